/* edgespec's chat page (`edgespec serve` answers a browser at / with it): a conversation with the served model over
   /v1/chat/completions, streamed, each reply with its speed and how many drafted tokens the target accepted.
   The conversation, the settings and a message not yet sent live in this browser's localStorage, so a reload, a
   refused request or a stopped server loses nothing. What the model or the user wrote is shown as text
   (textContent), never read as HTML. Everything above start() also runs in Node (tests/test_webui.py). */
"use strict";

const STORE = "edgespec-chat";
const MODES = ["auto", "off", "draft", "lookup", "hybrid"];

/* Server-sent events: the data of each complete event in `buffer`, and the rest (an event not ended yet). */
function takeEvents(buffer) {
  const parts = buffer.split(/\r?\n\r?\n/);
  const rest = parts.pop();
  const out = [];
  for (const part of parts) {
    const data = part.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
    if (data.length) out.push(data.join("\n"));
  }
  return [out, rest];
}

class RequestError extends Error {
  constructor(message, status, code = null) {
    super(message);
    this.status = status;
    this.code = code;  // OpenAI's error code ("context_length_exceeded", ...)
  }
}

/* The error a refused request answered: OpenAI's {"error": {"message", "code"}}, or its text. */
async function refusal(response) {
  const text = await response.text();
  try {
    const e = JSON.parse(text).error;
    if (typeof e === "string") return new RequestError(e, response.status);
    if (e && e.message) return new RequestError(e.message, response.status, e.code || null);
  } catch (_) { /* not JSON: its text */ }
  return new RequestError(text || `HTTP ${response.status}`, response.status);
}

/* The conversation the request carries: all of it, or without its `drop` oldest messages, starting at a user's. */
function recent(history, drop) {
  let kept = history.slice(drop);
  while (kept.length > 1 && kept[0].role !== "user") kept = kept.slice(1);
  return kept;
}

function headers(apiKey) {
  const h = {"Content-Type": "application/json"};
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

/* What the settings and the conversation ask of /v1/chat/completions (a reply's thinking is not sent back). */
function requestBody(settings, messages) {
  const body = {messages: []};
  if ((settings.system || "").trim()) body.messages.push({role: "system", content: settings.system});
  for (const m of messages) {
    if (m.role === "user" || (m.role === "assistant" && m.content)) body.messages.push({role: m.role, content: m.content});
  }
  const temperature = String(settings.temperature ?? "").trim();
  if (temperature !== "") body.temperature = Number(temperature);
  const maxTokens = String(settings.max_tokens ?? "").trim();
  if (maxTokens !== "") body.max_tokens = Number(maxTokens);
  if (settings.mode && settings.mode !== "auto") body.speculative = {mode: settings.mode};
  return body;
}

/* One chat completion, streamed: onDelta(content, reasoning) for each piece, onProgress(prompt_progress) while
   the server reads the prompt (llama-server's return_progress); resolves to how it ended
   ({finish_reason, timings, usage, cut}: cut when the stream ended without its [DONE]). */
async function streamChat(fetchFn, base, body, {apiKey = "", signal, onDelta, onProgress = () => {}}) {
  const response = await fetchFn(`${base}/v1/chat/completions`, {
    method: "POST", headers: headers(apiKey), signal,
    body: JSON.stringify({...body, stream: true, stream_options: {include_usage: true}, return_progress: true}),
  });
  if (!response.ok) throw await refusal(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const end = {finish_reason: null, timings: null, usage: null, cut: true};
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), {stream: !done});
    const [events, rest] = takeEvents(done ? `${buffer}\n\n` : buffer);
    buffer = rest;
    for (const data of events) {
      if (data === "[DONE]") return {...end, cut: false};
      const chunk = JSON.parse(data);
      if (chunk.error) throw new RequestError(chunk.error.message || String(chunk.error), 500);
      if (chunk.prompt_progress) onProgress(chunk.prompt_progress);
      const choice = chunk.choices && chunk.choices[0];
      if (choice) {
        const d = choice.delta || {};
        if (d.content || d.reasoning_content) onDelta(d.content || "", d.reasoning_content || "");
        if (choice.finish_reason) end.finish_reason = choice.finish_reason;
      }
      if (chunk.timings) end.timings = chunk.timings;
      if (chunk.usage) end.usage = chunk.usage;
    }
    if (done) return end;
  }
}

/* A reply's line under it: tokens, speed, drafts accepted, prompt tokens found in the cache, why it ended early. */
function statsLine(end) {
  const t = end.timings || {};
  const parts = [];
  if (t.predicted_n != null) parts.push(`${t.predicted_n} tokens`);
  if (t.predicted_per_second) parts.push(`${t.predicted_per_second.toFixed(1)} tok/s`);
  if (t.draft_n) parts.push(`${t.draft_n_accepted} of ${t.draft_n} drafted tokens accepted`);
  else if (t.predicted_n) parts.push("no drafts");
  const u = end.usage;
  if (u && u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) {
    parts.push(`${u.prompt_tokens_details.cached_tokens} of ${u.prompt_tokens} prompt tokens cached`);
  }
  if (end.finish_reason === "length") parts.push("stopped at the token limit");
  if (end.cut) parts.push("the stream ended early");
  return parts.join(" · ");
}

/* A reply's fields that make one version of it: regenerating a reply keeps the ones before, to switch back to. */
const VERSION = ["content", "reasoning", "stats", "error"];

function snapshot(m) {
  return Object.fromEntries(VERSION.filter((k) => m[k]).map((k) => [k, m[k]]));
}

/* The empty reply that takes `last`'s place when it is regenerated, keeping it and its other versions. */
function regenerated(last) {
  const versions = last.versions ? [...last.versions] : [];
  versions[last.shown ?? 0] = snapshot(last);
  return {role: "assistant", content: "", reasoning: "", versions, shown: versions.length};
}

/* Reply m showing its version j instead (the one it showed kept as it is now). */
function showVersion(m, j) {
  const versions = [...m.versions];
  versions[m.shown] = snapshot(m);
  return {role: m.role, ...versions[j], versions, shown: j};
}

/* A conversation's name in the list of earlier ones: its first message's start. */
function chatTitle(messages) {
  const first = messages.find((m) => m.role === "user");
  const text = first ? first.content.replace(/\s+/g, " ").trim() : "";
  return text.length > 48 ? `${text.slice(0, 47)}…` : text || "(no message)";
}

const newId = (now) => `c${now.toString(36)}${Math.random().toString(36).slice(2, 6)}`;

/* The conversations after moving to earlier one `id` (null: a new, empty one): the open one put away first, newest
   first, where it holds anything. {id, messages, earlier}; null where there is no such earlier one. */
function moveTo(state, id, now = Date.now()) {
  const earlier = [...(state.earlier || [])];
  let open = {id: newId(now), messages: []};
  if (id != null) {
    const i = earlier.findIndex((c) => c.id === id);
    if (i < 0) return null;
    open = earlier.splice(i, 1)[0];
  }
  if (state.messages.length) {
    earlier.unshift({id: state.id || newId(now), title: chatTitle(state.messages), updated: now,
                     messages: state.messages});
  }
  return {id: open.id, messages: open.messages, earlier};
}

/* Text onto the clipboard: the Clipboard API where the page may use it (localhost, https), else a selection copied
   (a server on another host over plain http). */
async function copyText(doc, text) {
  const clipboard = doc.defaultView.navigator.clipboard;
  if (clipboard && clipboard.writeText) return clipboard.writeText(text);
  const area = doc.createElement("textarea");
  area.value = text;
  area.style.position = "fixed";
  area.style.opacity = "0";
  doc.body.append(area);
  area.select();
  try {
    if (!doc.execCommand || !doc.execCommand("copy")) throw new Error("this browser refused to copy");
  } finally {
    area.remove();
  }
}

/* The page: a conversation and the earlier ones, a box to write in, settings; all kept in localStorage. */
function start() {
  const $ = (id) => document.getElementById(id);
  const defaults = {system: "", temperature: "", max_tokens: "", mode: "auto", apiKey: ""};
  // the open conversation (id, messages), the earlier ones (newest first), the settings, a message not sent yet
  let state = {id: newId(Date.now()), messages: [], earlier: [], settings: {...defaults}, unsent: ""};
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) || "null");
    if (saved && Array.isArray(saved.messages)) state = {...state, ...saved, settings: {...defaults, ...saved.settings}};
    if (!Array.isArray(state.earlier)) state.earlier = [];
  } catch (_) { /* a store another version wrote, or none: start afresh */ }
  let controller = null;

  const save = () => {
    try {
      localStorage.setItem(STORE, JSON.stringify(state));
    } catch (_) {  // full or refused: the page still works, unsaved, and says so
      say("this browser's storage is full, so the conversation is not saved: delete earlier chats to make room");
    }
  };
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text) e.textContent = text;
    return e;
  };
  const log = $("log"), input = $("input"), send = $("send"), notice = $("notice"), chats = $("chats");
  const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 80;

  function view(m, i) {
    const box = el("div", `msg ${m.role}`);
    fill(box, m);
    if (m.role === "assistant" && !controller) box.append(actions(m, i === state.messages.length - 1));
    return box;
  }
  function button(label, title, onClick) {
    const b = el("button", "", label);
    b.type = "button";
    b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }
  function actions(m, last) {  // under a reply: copy it; the last one: regenerate it, switch between its versions
    const row = el("div", "actions");
    if (m.content) {
      const copy = button("Copy", "Copy this reply", () => copyText(document, m.content).then(
        () => { copy.textContent = "Copied"; setTimeout(() => { copy.textContent = "Copy"; }, 1500); },
        (e) => say(`cannot copy: ${e.message}`)));
      row.append(copy);
    }
    if (!last) return row;
    row.append(button("Regenerate", "Write this reply again (the one before stays, to switch back to)", regenerate));
    const n = m.versions ? Math.max(m.versions.length, m.shown + 1) : 1;
    if (n > 1) {
      const to = (j) => () => {
        if (controller) return;
        state.messages[state.messages.length - 1] = showVersion(m, j);
        save();
        render();
      };
      const older = button("‹", "The version before", to(m.shown - 1));
      const newer = button("›", "The next version", to(m.shown + 1));
      older.disabled = m.shown === 0;
      newer.disabled = m.shown === n - 1;
      row.append(older, el("span", "version", `${m.shown + 1}/${n}`), newer);
    }
    return row;
  }
  function fill(box, m) {  // (in place while a reply streams: an opened "thinking" stays open)
    let thinking = box.querySelector(".thinking");
    if (m.reasoning && !thinking) {
      thinking = el("details", "thinking");
      thinking.append(el("summary", "", "thinking"), el("div", "text"));
      box.prepend(thinking);
    }
    if (thinking) thinking.lastChild.textContent = m.reasoning;
    let text = box.querySelector(":scope > .text");
    if (!text) box.append((text = el("div", "text")));
    if (m.role === "user") text.textContent = m.content;
    else text.replaceChildren(...markdownNodes(document, m.content));  // (markdown.js)
    for (const [cls, value] of [["error", m.error], ["stats", m.stats]]) {
      if (value && !box.querySelector(`.${cls}`)) box.append(el("div", cls, value));
    }
  }
  function reading(box, p) {  // a long prompt's reading, shown in its reply's place until the reply begins
    let line = box.querySelector(".reading");
    if (!p || p.processed >= p.total) {
      if (line) line.remove();
      return;
    }
    if (!line) box.append((line = el("div", "reading")));
    line.textContent = `reading the prompt: ${p.processed} of ${p.total} tokens ` +
      `(${Math.floor((100 * p.processed) / p.total)}%)`;
  }
  function render() {
    chats.replaceChildren(new Option(state.messages.length ? chatTitle(state.messages) : "New chat", ""),
      ...state.earlier.map((c) => new Option(`${c.title} · ${new Date(c.updated).toLocaleDateString()}`, c.id)));
    chats.disabled = !state.earlier.length;
    log.replaceChildren(...state.messages.map(view));
    if (!state.messages.length) {
      log.append(el("div", "empty", "Write a message below; Enter sends it, Shift+Enter starts a new line."));
    }
    log.scrollTop = log.scrollHeight;
  }
  function say(text) {
    notice.textContent = text;
    notice.hidden = !text;
  }
  function busy(on) {  // (the box stays open meanwhile: the next message may be written while a reply comes)
    send.textContent = on ? "Stop" : "Send";
    if (!on) input.focus();
  }

  function submit() {
    if (controller) {
      controller.abort();
      return;
    }
    const text = input.value;
    if (!text.trim()) return;
    const user = {role: "user", content: text};
    const reply = {role: "assistant", content: "", reasoning: ""};
    const history = [...state.messages, user];
    state.messages.push(user, reply);
    input.value = state.unsent = "";
    return ask(history, reply, () => {  // nothing came: the message goes back to the box, to send again or change
      state.messages.splice(state.messages.length - 2, 2);
      input.value = state.unsent = input.value ? `${text}\n${input.value}` : text;
    });
  }
  function regenerate() {
    const last = state.messages[state.messages.length - 1];
    if (controller || !last || last.role !== "assistant") return;
    const reply = regenerated(last);
    state.messages[state.messages.length - 1] = reply;
    return ask(state.messages.slice(0, -1), reply, () => {  // nothing came: the reply it was to replace stays
      state.messages[state.messages.length - 1] = last;
    });
  }

  /* The reply to `history` (which ends with the user's message), streamed into `reply`, the last of the messages;
     undo(): where nothing came, what puts the conversation back as it was. */
  async function ask(history, reply, undo) {
    say("");
    controller = new AbortController();
    save();
    render();
    const box = log.lastChild;
    busy(true);
    try {
      // a conversation past the context: its oldest exchanges are left out of the request (not the page), as the
      // terminal chat does, until it fits or only the new message is left
      let drop = 0, end = null, sent = history;
      while (end === null) {
        sent = recent(history, drop);
        try {
          end = await streamChat(fetch, ".", requestBody(state.settings, sent), {
            apiKey: state.settings.apiKey, signal: controller.signal,
            onProgress: (p) => reading(box, p),
            onDelta(content, reasoning) {
              reading(box, null);
              const follow = nearBottom();
              reply.content += content;
              reply.reasoning += reasoning;
              fill(box, reply);
              if (follow) log.scrollTop = log.scrollHeight;
            },
          });
        } catch (e) {
          if (!(e instanceof RequestError) || e.code !== "context_length_exceeded" || sent.length <= 1) throw e;
          drop += 2;
        }
      }
      const left = history.length - sent.length;
      reply.stats = statsLine(end) + (left ? ` · ${left} earlier messages left out to fit the context` : "");
    } catch (e) {
      const stopped = e.name === "AbortError", began = reply.content || reply.reasoning;
      let reason = e.message;  // (the server's own words where it answered)
      if (!(e instanceof RequestError)) {
        reason = began ? `the connection to the server was lost (${e.message})`
          : `cannot reach the server (${e.message}); is edgespec serve running?`;
      } else if (e.status === 401) {
        reason += " (set the server's key under Settings)";
      }
      if (!began) {
        undo();
        if (!stopped) say(reason);
      } else if (stopped) {
        reply.stats = "stopped";
      } else {
        reply.error = reason;
      }
    } finally {
      controller = null;
      if (reply.versions) reply.versions[reply.shown] = snapshot(reply);
      save();
      render();
      busy(false);
    }
  }

  // the settings: each field kept as it changes
  const fields = {system: $("system"), temperature: $("temperature"), max_tokens: $("max_tokens"), mode: $("mode"),
                  apiKey: $("apikey")};
  for (const mode of MODES) $("mode").append(new Option(mode, mode));
  for (const [name, field] of Object.entries(fields)) {
    field.value = state.settings[name] ?? "";
    field.addEventListener("input", () => {
      state.settings[name] = field.value;
      save();
    });
  }
  input.value = state.unsent || "";
  input.addEventListener("input", () => {
    state.unsent = input.value;
    save();
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      if (!controller) submit();  // (Stop is the button's alone)
    }
  });
  send.addEventListener("click", submit);
  // the conversations: a new one (the open one kept among the earlier), an earlier one again, the open one deleted
  const move = (id) => {
    const moved = !controller && moveTo(state, id);
    if (!moved) return;
    Object.assign(state, moved);
    say("");
    save();
    render();
  };
  $("new").addEventListener("click", () => { if (state.messages.length) move(null); });
  chats.addEventListener("change", () => { if (chats.value) move(chats.value); else render(); });
  $("delete").addEventListener("click", () => {
    if (controller || !state.messages.length) return;
    if (!confirm("Delete this conversation? It cannot be brought back.")) return;
    state.messages = [];
    move(state.earlier.length ? state.earlier[0].id : null);
  });
  render();
  input.focus();
  fetch("./v1/models", {headers: headers(state.settings.apiKey)})
    .then((r) => (r.ok ? r.json() : null))
    .then((models) => {
      const name = models && models.data && models.data[0] && models.data[0].id;
      if (name) {
        $("model").textContent = name;
        document.title = `${name} · edgespec`;
      }
    })
    .catch(() => {});
}

if (typeof module !== "undefined" && module.exports) {
  module.exports = {takeEvents, requestBody, streamChat, statsLine, recent, RequestError, snapshot, regenerated,
                    showVersion, chatTitle, moveTo};
} else {
  start();
}
