"""Ollama's API, which Open WebUI, Continue, Zed, Copilot's "bring your own model" and the `ollama` client speak:
`/api/chat` and `/api/generate` read as the chat or text completion they mean (`options` as sampling fields,
`format` as a response format, `think`, tools; openai_api.parse reads the rest), their answer as Ollama's objects,
whole or as newline-delimited JSON (a stream unless `"stream": false`, as in Ollama), and `/api/tags`, `/api/show`,
`/api/ps`, `/api/version`, which clients read to list the model and learn what it can do. Errors are
`{"error": "..."}` with the same 4xx. No HTTP here.

Load-time options (`num_ctx`, `num_gpu`, `num_thread`, `keep_alive`, ...) change nothing: the model was loaded when
the server started, and `/api/show` says what a sequence holds as `<arch>.context_length`, the number clients budget
their prompts against. Refused with a 400 rather than ignored, because the answer would not be what was asked:
images, a `template` (Ollama's Go templates; edgespec renders the model's own chat template, or `raw` text),
`think` for a model that does not think, and sampling edgespec does not do (`mirostat`, `typical_p`, `tfs_z` other
than their neutral values)."""
from __future__ import annotations

import hashlib
import json
import os
import time

from . import chat, fim, reasoning
from .errors import EdgespecError
from .openai_api import BadRequest, parse_as
from .sequences import Event, Request
from .typed_answer import TypedAnswer

VERSION = "0.12.0"  # the Ollama release whose API this follows (clients check it: Copilot asks for >= 0.6.4)
OPTIONS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
           "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n", "stop": "stop",
           "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}  # Ollama's -> the chat's
NEUTRAL = {"mirostat": 0, "typical_p": 1.0, "tfs_z": 1.0}  # sampling edgespec does not do, at its no-op values
PASSED = ("speculative", "logit_bias", "ignore_eos")  # edgespec's own fields, as on the other routes
NAMES = tuple((f"'{chat_name}'", f"'options.{name}'") for name, chat_name in OPTIONS.items()) + (
    ("'max_tokens'", "'options.num_predict'"), ("response_format", "format"))


# request parsing ------------------------------------------------------------------------------------------------
def parse_chat(body, state) -> tuple[Request, dict]:
    """An /api/chat body -> the engine's Request and how to render the answer."""
    fields = _common(body, state)
    fields["messages"] = _messages(body.get("messages"))
    if body.get("tools") is not None:
        fields["tools"] = body["tools"]
    req, how = parse_as(fields, state, NAMES)
    return req, {**how, "api": "chat", "include_usage": False}


def parse_generate(body, state) -> tuple[Request, dict]:
    """An /api/generate body -> the engine's Request and how to render the answer: the prompt in the model's chat
    template as a user's turn (after `system`), or as written with `raw`, or the text between it and `suffix`; an
    earlier answer's `context` (its tokens) before it."""
    fields = _common(body, state)
    model = state.engine.model
    texts = {name: body.get(name, "") for name in ("prompt", "system", "suffix")}
    for name, text in texts.items():
        if not isinstance(text, str):
            raise BadRequest(f"'{name}' must be a string", name)
    raw = body.get("raw", False)
    if not isinstance(raw, bool):
        raise BadRequest("'raw' must be true or false", "raw")
    context = body.get("context") or []
    if not isinstance(context, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise BadRequest("'context' must be the token ids an earlier answer gave", "context")
    kwargs = fields.pop("chat_template_kwargs", None)
    if fields.pop("logprobs", None) is True:  # (a text completion's logprobs: how many alternatives, up to 5)
        fields["logprobs"] = fields["top_logprobs"]
    fields.pop("top_logprobs", None)
    thinking = None
    try:
        if texts["suffix"]:
            tokens = fim.tokens(model, texts["prompt"], texts["suffix"])
        elif raw:
            tokens = model.tokenize(texts["prompt"], add_special=not context)
        else:
            messages = ([{"role": "system", "content": texts["system"]}] if texts["system"] else []) + [
                {"role": "user", "content": texts["prompt"]}]
            tokens = chat.tokenize(model, messages, template_kwargs=kwargs)
            if context and tokens[:1] == [model.bos]:
                tokens = tokens[1:]
            ids = reasoning.markers(model)
            thinking = reasoning.opened(tokens, ids) if ids else None
    except EdgespecError as e:
        raise BadRequest(str(e), "suffix" if texts["suffix"] else "prompt", "unsupported_value") from None
    req, how = parse_as({**fields, "prompt": context + tokens}, state, NAMES, is_chat=False)
    return req, {**how, "api": "generate", "thinking": thinking, "include_usage": False}


def loaded(body, api: str) -> bool:
    """Whether a request asks only that the model be loaded (an /api/generate without a prompt, an /api/chat without
    messages: what clients send to warm a model up), answered at once with done_reason "load"."""
    if not isinstance(body, dict):
        return False
    if api == "chat":
        return body.get("messages") in (None, [])
    return not any(body.get(name) for name in ("prompt", "system", "suffix"))


def _common(body, state) -> dict:
    """The fields /api/chat and /api/generate share, as a chat completion's: options, format, think, stream,
    logprobs."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("images"):
        raise BadRequest("images are not supported: edgespec serves text models", "images", "unsupported_value")
    if body.get("template"):
        raise BadRequest("'template' (an Ollama Go template) is not supported; edgespec renders the model's own chat "
                         "template, or give the whole prompt with \"raw\": true", "template", "unsupported_value")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'options' must be an object (temperature, top_k, num_predict, stop, ...)", "options")
    out = {chat_name: options[name] for name, chat_name in OPTIONS.items() if name in options}
    out.update((k, body[k]) for k in PASSED if k in body)
    for name, neutral in NEUTRAL.items():
        if options.get(name, neutral) != neutral:
            raise BadRequest(f"options.{name} is not supported by edgespec (its sampling: temperature, top_k, top_p, "
                             f"min_p, penalties)", f"options.{name}", "unsupported_value")
    n = options.get("num_predict", -1)
    if isinstance(n, bool) or not isinstance(n, int) or n < -2:
        raise BadRequest("'options.num_predict' must be an integer >= -2 (-1: until the model ends the text)",
                         "options.num_predict")
    if n >= 0:
        out["max_tokens"] = n
    out["stream"] = True if body.get("stream") is None else body["stream"]  # (Ollama streams unless told not to)
    fmt = body.get("format")
    if fmt == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt}}
    elif fmt not in (None, ""):
        raise BadRequest("'format' must be \"json\" or a JSON schema object", "format")
    think = body.get("think")
    if think not in (None, True, False, "low", "medium", "high"):
        raise BadRequest("'think' must be true, false, or \"low\", \"medium\", \"high\"", "think")
    if think not in (None, False) and reasoning.markers(state.engine.model) is None:
        raise BadRequest(f"{state.model_id} does not support thinking", "think", "unsupported_value")
    if think is False:
        out["chat_template_kwargs"] = {"enable_thinking": False}
    if body.get("logprobs") is not None:
        if not isinstance(body["logprobs"], bool):
            raise BadRequest("'logprobs' must be true or false", "logprobs")
        out["logprobs"] = body["logprobs"]
        out["top_logprobs"] = body.get("top_logprobs") or 0
    return out


def _messages(messages) -> list[dict]:
    """Ollama's messages -> chat messages: an assistant's tool calls (arguments as objects) with ids, a tool's answer
    as the tool message it is; an assistant's earlier `thinking` left out, as hidden thoughts are."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise BadRequest(f"{where}.role must be one of system, user, assistant, tool", f"{where}.role")
        if m.get("images"):
            raise BadRequest(f"{where}.images: images are not supported: edgespec serves text models",
                             f"{where}.images", "unsupported_value")
        content = m.get("content") or ""
        if not isinstance(content, str):
            raise BadRequest(f"{where}.content must be a string", f"{where}.content")
        msg = {"role": m["role"], "content": content}
        calls = m.get("tool_calls")
        if m["role"] == "assistant" and calls:
            if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                      for c in calls):
                raise BadRequest(f"{where}.tool_calls must be a list of {{\"function\": {{name, arguments}}}}",
                                 f"{where}.tool_calls")
            msg["tool_calls"] = [{"id": c.get("id") or f"call_{i}_{k}", "type": "function",
                                  "function": c["function"]} for k, c in enumerate(calls)]
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id") or _answered(out, m.get("tool_name"))
        out.append(msg)
    return out


def _answered(conversation: list[dict], name) -> str:
    """The id of the latest call to the tool `name` (Ollama's tool messages name the tool, not the call)."""
    for msg in reversed(conversation):
        for call in reversed(msg.get("tool_calls", [])):
            if call["function"].get("name") == name:
                return call["id"]
    return ""


# rendering --------------------------------------------------------------------------------------------------------
def created_at() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"


class OllamaAnswer(TypedAnswer):
    """One answer as it is generated: Ollama's chunks (`message` for /api/chat, `response` for /api/generate, a
    thinking model's reasoning as `thinking`, tool calls whole) as newline-delimited JSON, and the answer at the
    end with Ollama's counts and durations (in nanoseconds)."""

    MEDIA = "application/x-ndjson"

    def __init__(self, state, req: Request, how: dict) -> None:
        super().__init__(state, req, how)
        self.start = time.perf_counter()
        self.chat = how["api"] == "chat"
        self.content, self.thought, self.tool_calls, self.tokens = "", "", [], []
        self.entries: list[dict] = []

    def add(self, ev: Event) -> None:
        if ev.token is not None:
            self.tokens.append(ev.token)
        super().add(ev)

    def _piece(self, content: str = "", thinking: str = "", calls: list | None = None, entries=()) -> dict:
        out = {"model": self.state.model_id, "created_at": created_at()}
        if self.chat:
            out["message"] = {"role": "assistant", "content": content, **({"thinking": thinking} if thinking else {}),
                              **({"tool_calls": calls} if calls else {})}
        else:
            out.update({"response": content, **({"thinking": thinking} if thinking else {})})
        if entries:
            out["logprobs"] = list(entries)
        return {**out, "done": False}

    def _open_thought(self) -> None:
        pass

    def _thought(self, text: str) -> None:
        self.thought += text
        self._emit("", **self._piece(thinking=text))

    def _close_thought(self, ev: Event) -> None:
        pass

    def _open_text(self) -> None:
        pass

    def _text(self, text: str, entries: list) -> None:
        self.content += text
        self.entries += entries
        self._emit("", **self._piece(content=text, entries=entries))

    def _close_text(self, ev: Event) -> None:
        pass

    def _call(self, call: dict) -> None:
        fn = call["function"]
        call = {"id": call["id"], "function": {"index": len(self.tool_calls), "name": fn["name"],
                                               "arguments": json.loads(fn["arguments"])}}
        self.tool_calls.append(call)
        self._emit("", **self._piece(calls=[call]))

    def _end(self, last: Event) -> None:
        if not self.how["stream"]:  # (a stream's last line is _done of an empty piece: the text came before it)
            self.final = self._done(self._piece(self.content, self.thought, self.tool_calls, self.entries), last)

    def _done(self, piece: dict, last: Event) -> dict:
        prompt_s = last.stats.prompt_s if last.stats else 0.0
        eval_s = sum(r.seconds for r in last.stats.rounds) if last.stats else 0.0
        out = {**piece, "done": True, "done_reason": "stop" if last.finish_reason in ("stop", "grammar") else "length",
               "total_duration": int((time.perf_counter() - self.start) * 1e9), "load_duration": 0,
               "prompt_eval_count": len(self.req.prompt), "prompt_eval_duration": int(prompt_s * 1e9),
               "eval_count": self.n_out, "eval_duration": int(eval_s * 1e9)}
        if not self.chat:
            out["context"] = self.req.prompt + self.tokens
        return out

    def frames(self, ev: Event | None):
        if ev is None:
            return
        events, self._events = self._events, []
        if ev.finish_reason is not None:
            events.append({"error": f"generation failed: {ev.error}"} if ev.error else
                          self._done(self._piece(), ev))
        for event in events:
            event.pop("type", None)
            yield json.dumps(event, ensure_ascii=False) + "\n"


def load_answer(state, api: str) -> dict:
    """The answer to a request that only asks for the model to be loaded (it is, since the server started)."""
    out = {"model": state.model_id, "created_at": created_at()}
    out.update({"message": {"role": "assistant", "content": ""}} if api == "chat" else {"response": ""})
    return {**out, "done": True, "done_reason": "load"}


# the model's description ------------------------------------------------------------------------------------------
def _details(model) -> dict:
    import llama_cpp

    arch = model.meta("general.architecture") or "unknown"
    kinds = {getattr(llama_cpp, k): k.split("_", 3)[-1] for k in dir(llama_cpp) if k.startswith("LLAMA_FTYPE_")}
    ftype = model.meta("general.file_type")
    n = model.n_params()
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.2f}".rstrip("0").rstrip(".") + "M"
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch], "parameter_size": size,
            "quantization_level": kinds.get(int(ftype), "unknown") if ftype and ftype.isdigit() else "unknown"}


def _entry(state) -> dict:
    model = state.engine.model
    st = os.stat(model.path)
    identity = f"{os.path.realpath(model.path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return {"name": state.model_id, "model": state.model_id,
            "modified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.st_mtime)), "size": st.st_size,
            "digest": hashlib.sha256(identity).hexdigest(),  # (of the file's path, size and time: not read whole)
            "details": _details(model)}


def tags(state) -> dict:
    return {"models": [_entry(state)]}


def running(state) -> dict:
    """/api/ps: the model, held in memory until the server stops."""
    model = state.engine.model
    return {"models": [{**_entry(state), "expires_at": "9999-12-31T23:59:59Z",
                        "size_vram": model.size() if model.n_gpu_layers else 0,
                        "context_length": state.engine.target.n_ctx}]}


def show(body, state) -> dict:
    """/api/show of the served model (`model`, or the older `name`; Ollama's ":latest" tag allowed; another name is a
    404): the chat template, the sampling a request that names none gets, what the model can do, and its metadata,
    its context length as a sequence here holds it."""
    name = body.get("model", body.get("name")) if isinstance(body, dict) else None
    if not isinstance(name, str):
        raise BadRequest("'model' is required: the name /api/tags lists", "model")
    if name.removesuffix(":latest") != state.model_id.removesuffix(":latest"):
        raise BadRequest(f"model {name!r} not found; this server serves {state.model_id!r}", "model", status=404)
    engine, d = state.engine, state.defaults
    model = engine.model
    details = _details(model)
    arch = details["family"]
    info = {"general.architecture": arch, "general.parameter_count": model.n_params(),
            f"{arch}.context_length": engine.target.n_ctx}
    for key in ("general.name", "general.file_type", f"{arch}.embedding_length", f"{arch}.block_count"):
        if (value := model.meta(key)) is not None:
            info[key] = int(value) if value.isdigit() else value
    capabilities = ["completion", "tools"] + (["thinking"] if reasoning.markers(model) else []) \
        + (["insert"] if model.fim_ids else [])
    parameters = "\n".join(f"{name} {value}" for name, value in (
        ("num_ctx", engine.target.n_ctx), ("temperature", d.temperature), ("top_k", d.top_k), ("top_p", d.top_p),
        ("min_p", d.min_p), ("repeat_penalty", d.repeat_penalty)))  # (clients read num_ctx here, as Continue does)
    return {"license": model.meta("general.license") or "", "modelfile": f"# served by edgespec\nFROM {model.path}\n",
            "parameters": parameters, "template": model.chat_template() or "", "details": details, "model_info": info,
            "capabilities": capabilities, "modified_at": _entry(state)["modified_at"]}
