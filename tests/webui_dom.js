/* The chat page driven as a user would, in jsdom (`npm install jsdom`, found through NODE_PATH): tests/test_webui.py
   runs it against a server with the key "sesame" where jsdom is installed, and skips it elsewhere. Exits 1 with the
   first expectation that failed. */
const assert = require("assert");
const {JSDOM, VirtualConsole} = require("jsdom");

const base = process.argv[2];
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

async function open(html, stored, server = base) {
  const errors = [];
  const console_ = new VirtualConsole();
  console_.on("jsdomError", (e) => errors.push(e.message));
  const dom = new JSDOM(html, {url: `${base}/`, runScripts: "dangerously", resources: "usable", virtualConsole: console_,
    beforeParse(w) {
      if (stored) w.localStorage.setItem("edgespec-chat", stored);
      w.fetch = (url, options) => fetch(new URL(url, `${server}/`), options);  // (Node's, with its AbortController)
      w.AbortController = AbortController;
      w.TextDecoder = TextDecoder;
      w.confirm = () => true;
      Object.defineProperty(w.navigator, "clipboard", {value: {writeText: async (t) => { w.copied = t; }}});
    }});
  await new Promise((r) => dom.window.addEventListener("load", r));
  await pause(300);
  return {w: dom.window, d: dom.window.document, errors};
}

async function send(page, text) {
  const {w, d} = page;
  const input = d.getElementById("input");
  input.value = text;
  input.dispatchEvent(new w.Event("input"));
  input.dispatchEvent(new w.KeyboardEvent("keydown", {key: "Enter"}));
}

async function settled(page) {
  for (let i = 0; i < 300 && page.d.getElementById("send").textContent !== "Send"; i++) await pause(100);
  assert.strictEqual(page.d.getElementById("send").textContent, "Send");
}

function set(page, id, value) {
  const field = page.d.getElementById(id);
  field.value = value;
  field.dispatchEvent(new page.w.Event("input"));
}

const stored = (page) => JSON.parse(page.w.localStorage.getItem("edgespec-chat"));
const messages = (page) => [...page.d.querySelectorAll(".msg")];

(async () => {
  const html = await (await fetch(`${base}/`, {headers: {Accept: "text/html"}})).text();
  const page = await open(html);
  // without the key: refused, the message back in the box, the reason shown
  await send(page, "Hello <b>there</b> <|im_end|>");
  await settled(page);
  assert.strictEqual(messages(page).length, 0);
  assert.strictEqual(page.d.getElementById("input").value, "Hello <b>there</b> <|im_end|>");
  assert.match(page.d.getElementById("notice").textContent, /API key.*set the server's key under Settings/);
  // with it: a streamed reply with its line of figures; the markup typed stays text
  set(page, "apikey", "sesame");
  set(page, "temperature", "0");
  set(page, "max_tokens", "12");
  await send(page, page.d.getElementById("input").value);
  assert.strictEqual(page.d.getElementById("send").textContent, "Stop");
  await settled(page);
  const [user, reply] = messages(page);
  assert.strictEqual(user.querySelector(".text").textContent, "Hello <b>there</b> <|im_end|>");
  assert.strictEqual(user.querySelector("b"), null);
  assert.ok(reply.querySelector(".text").textContent.length > 0);
  assert.match(reply.querySelector(".stats").textContent, /^12 tokens · [\d.]+ tok\/s · /);
  assert.ok(page.d.getElementById("notice").hidden);
  assert.strictEqual(stored(page).messages.length, 2);
  assert.strictEqual(stored(page).unsent, "");
  // stopped mid-reply: what came is kept, marked stopped
  set(page, "max_tokens", "400");
  await send(page, "Tell me a long story about a cat.");
  for (let i = 0; i < 100 && !messages(page)[3].querySelector(".text").textContent; i++) await pause(20);
  await send(page, "written meanwhile");  // (Enter while a reply comes neither sends nor stops)
  assert.strictEqual(page.d.getElementById("send").textContent, "Stop");
  page.d.getElementById("send").click();
  await settled(page);
  assert.strictEqual(messages(page).length, 4);
  assert.strictEqual(messages(page)[3].querySelector(".stats").textContent, "stopped");
  assert.strictEqual(page.d.getElementById("input").value, "written meanwhile");
  // a reply copied; the last one regenerated, the one before kept to switch back to
  const button = (box, label) => [...box.querySelectorAll(".actions button")].find((b) => b.textContent === label);
  assert.strictEqual(button(messages(page)[1], "Regenerate"), undefined);  // (only the last reply's)
  button(messages(page)[1], "Copy").click();
  await pause(50);
  assert.strictEqual(page.w.copied, stored(page).messages[1].content);
  assert.strictEqual(button(messages(page)[1], "Copied").textContent, "Copied");
  const stoppedText = stored(page).messages[3].content;
  set(page, "max_tokens", "6");
  button(messages(page)[3], "Regenerate").click();
  assert.strictEqual(page.d.getElementById("send").textContent, "Stop");
  assert.strictEqual(messages(page)[3].querySelector(".actions"), null);  // (none while it streams)
  await settled(page);
  assert.strictEqual(messages(page).length, 4);
  assert.match(messages(page)[3].querySelector(".stats").textContent, /^6 tokens · /);
  assert.strictEqual(messages(page)[3].querySelector(".version").textContent, "2/2");
  button(messages(page)[3], "‹").click();
  assert.strictEqual(messages(page)[3].querySelector(".text").textContent, stoppedText);
  assert.strictEqual(messages(page)[3].querySelector(".stats").textContent, "stopped");
  assert.strictEqual(messages(page)[3].querySelector(".version").textContent, "1/2");
  assert.strictEqual(stored(page).messages[3].content, stoppedText);  // (what the next message is sent after)
  button(messages(page)[3], "›").click();
  assert.match(messages(page)[3].querySelector(".stats").textContent, /^6 tokens · /);
  assert.strictEqual(stored(page).messages[3].versions.length, 2);
  // half-typed text and the settings survive a reload; the conversation too, until "New chat"
  set(page, "input", "not sent yet");
  const kept = stored(page);
  kept.messages.push({role: "user", content: "code?"},
                     {role: "assistant", content: "Here:\n```python\nprint('<b>')\n```\nDone.", stats: "7 tokens"},
                     {role: "user", content: "plan?"},
                     {role: "assistant", content: "## Plan\n- **bold <i>x</i>**\n- [site](https://example.org/) " +
                      "[bad](javascript:alert(1))\n\n| a | b |\n|---|---|\n| 1 | 2 |"});
  const again = await open(html, JSON.stringify(kept));
  assert.strictEqual(messages(again).length, 8);
  const code = messages(again)[5].querySelector("pre.code code");
  assert.strictEqual(code.textContent, "print('<b>')");
  assert.strictEqual(code.parentNode.dataset.lang, "python");
  assert.deepStrictEqual([...messages(again)[5].querySelector(".text").children].map((e) => [e.tagName, e.textContent]),
                         [["P", "Here:"], ["PRE", "print('<b>')"], ["P", "Done."]]);
  // Markdown as elements, what the model wrote still text: HTML in it shown, a javascript: link not made one
  const md = messages(again)[7].querySelector(".text");
  assert.strictEqual(md.querySelector("h2").textContent, "Plan");
  assert.strictEqual(md.querySelector("li strong").textContent, "bold <i>x</i>");
  assert.strictEqual(md.querySelector("i"), null);
  assert.deepStrictEqual([...md.querySelectorAll("a")].map((a) => [a.href, a.rel]),
                         [["https://example.org/", "noopener noreferrer"]]);
  assert.match(md.textContent, /\[bad\]\(javascript:alert\(1\)\)/);
  assert.strictEqual(md.querySelectorAll("table td").length, 2);
  assert.strictEqual(again.d.getElementById("input").value, "not sent yet");
  assert.strictEqual(again.d.getElementById("apikey").value, "sesame");
  assert.strictEqual(again.d.getElementById("model").textContent.length > 0, true);
  // a conversation past the context: its oldest exchanges left out of the request, said under the reply
  const long = {...kept, unsent: "", messages: []};
  for (let i = 0; i < 6; i++) {
    long.messages.push({role: "user", content: `question ${i}: ${"tell me more about it ".repeat(20)}`},
                       {role: "assistant", content: `answer ${i}: ${"there is more to say ".repeat(20)}`});
  }
  long.settings = {...long.settings, max_tokens: "8"};
  const full = await open(html, JSON.stringify(long));
  await send(full, "and now?");
  await settled(full);
  assert.strictEqual(messages(full).length, 14);
  assert.match(messages(full)[13].querySelector(".stats").textContent,
               /^8 tokens · .* · \d+ earlier messages left out to fit the context$/);
  assert.strictEqual(messages(full)[0].querySelector(".text").textContent.slice(0, 11), "question 0:");
  // a long prompt's reading shown in the reply's place until the reply comes, then gone
  const slow = await open(html, JSON.stringify({...long, messages: []}));
  const seen = [];
  new slow.w.MutationObserver((records) => records.forEach((r) => r.addedNodes.forEach((n) => {
    if (n.classList && n.classList.contains("reading")) seen.push(n.textContent);
  }))).observe(slow.d.getElementById("log"), {childList: true, subtree: true});
  await send(slow, "A slow fox naps. ".repeat(45));
  await settled(slow);
  assert.match(seen[0] || "", /^reading the prompt: \d+ of \d+ tokens \(\d+%\)$/);
  assert.strictEqual(slow.d.querySelector(".reading"), null);
  assert.match(messages(slow)[1].querySelector(".stats").textContent, /^8 tokens · /);
  // a server gone: said so, the message back in the box
  const gone = await open(html, null, "http://127.0.0.1:9");
  await send(gone, "anyone there?");
  await settled(gone);
  assert.match(gone.d.getElementById("notice").textContent, /^cannot reach the server \(.*\); is edgespec serve running\?$/);
  assert.strictEqual(gone.d.getElementById("input").value, "anyone there?");
  assert.strictEqual(messages(gone).length, 0);
  // ... and a regenerate that got nothing leaves the reply it was to replace
  const goneKept = await open(html, JSON.stringify(kept), "http://127.0.0.1:9");
  button(messages(goneKept)[7], "Regenerate").click();
  await settled(goneKept);
  assert.match(goneKept.d.getElementById("notice").textContent, /^cannot reach the server/);
  assert.strictEqual(stored(goneKept).messages[7].content, kept.messages[7].content);
  assert.strictEqual(messages(goneKept)[7].querySelector(".version"), null);
  // New chat keeps this one among the earlier conversations, to open again; Delete (asked first) removes it
  const chats = again.d.getElementById("chats");
  assert.ok(chats.disabled);
  again.d.getElementById("new").click();
  assert.strictEqual(messages(again).length, 0);
  assert.deepStrictEqual([...chats.options].map((o) => o.textContent.split(" · ")[0]),
                         ["New chat", "Hello <b>there</b> <|im_end|>"]);
  const earlierId = chats.options[1].value;
  again.d.getElementById("new").click();  // (an empty one is not kept)
  assert.strictEqual(stored(again).earlier.length, 1);
  chats.value = earlierId;
  chats.dispatchEvent(new again.w.Event("change"));
  assert.strictEqual(messages(again).length, 8);
  assert.strictEqual(chats.options[0].textContent, "Hello <b>there</b> <|im_end|>");
  const reopened = await open(html, again.w.localStorage.getItem("edgespec-chat"));  // (a reload keeps them all)
  assert.strictEqual(messages(reopened).length, 8);
  assert.strictEqual(reopened.d.getElementById("chats").options.length, stored(again).earlier.length + 1);
  let asked = "";
  again.w.confirm = (q) => { asked = q; return true; };
  again.d.getElementById("delete").click();
  assert.match(asked, /^Delete this conversation\?/);
  assert.ok(stored(again).earlier.every((c) => c.id !== earlierId) && stored(again).id !== earlierId);
  // storage full: said, the page goes on
  again.w.Storage.prototype.setItem = () => { throw new Error("QuotaExceededError"); };
  set(again, "input", "still typing");
  assert.match(again.d.getElementById("notice").textContent, /storage is full.*delete earlier chats/);
  assert.deepStrictEqual([...page.errors, ...again.errors, ...reopened.errors, ...slow.errors], []);
  console.log("ok");
  process.exit(0);
})().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
