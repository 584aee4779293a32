"""The OpenAI wire format: a request body -> the BatchEngine's Request (every bad field a BadRequest naming it), and
a request's events -> OpenAI's response JSON and SSE chunks (with llama-server's `timings`). No HTTP here.

`state` is the server's: its engine (tokenizer, vocabulary), default sampling and model id.
"""
from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import TYPE_CHECKING

from . import chat, choices, fields, fim, reasoning
from .batch import MODES, Event, Request
from .errors import EdgespecError
from .fields import BadRequest
from .sampling import SamplingConfig
from .tools import CallReader, ToolError, Tools, special_markers

if TYPE_CHECKING:
    from .server import ServerState


# request parsing ------------------------------------------------------------------------------------------------
def _messages(body: dict) -> list[dict]:
    """OpenAI's messages -> the chat template's: role and content, an assistant's earlier tool calls (arguments as
    objects, as templates take them) and a tool's results."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise BadRequest(f"messages[{i}]: role must be one of system, developer, user, assistant, tool",
                             f"messages[{i}].role")
        content = m.get("content")
        if content is None and m["role"] == "assistant":
            content = ""
        if isinstance(content, list):  # a list of parts: only text parts are understood
            texts = []
            for part in content:
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported", f"messages[{i}].content")
                texts.append(part["text"])
            content = "".join(texts)
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string or a list of text parts",
                             f"messages[{i}].content")
        msg = {"role": "system" if m["role"] == "developer" else m["role"], "content": content}
        if m["role"] == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = _earlier_calls(m["tool_calls"], i)
        if m["role"] == "tool":
            if not isinstance(m.get("tool_call_id", ""), str):
                raise BadRequest(f"messages[{i}].tool_call_id must be a string", f"messages[{i}].tool_call_id")
            msg["tool_call_id"] = m.get("tool_call_id", "")
        out.append(msg)
    return out


def _earlier_calls(calls, i: int) -> list[dict]:
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise BadRequest(f"{where} must be a list of calls", where)
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)):
            raise BadRequest(f"{where}: each call needs function.name", where)
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise BadRequest(f"{where}: function.arguments must be JSON text", where) from None
        out.append({"id": call.get("id", ""), "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return out


def parse(body, state: ServerState, is_chat: bool) -> tuple[Request, dict]:
    """An OpenAI request body -> the engine's Request and how to render the answer."""
    engine = state.engine
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    n = fields.number(body, "n", 1, 1, choices.MOST, integer=True)  # (choices.py: n sequences at once)
    tools = _tools(body) if is_chat else None
    constraint = fields.constraint(body)
    if tools is not None and tools.active:
        if constraint is not None:
            raise BadRequest("give 'tools' or a response format, not both", "response_format")
        constraint = tools.constraint(special_markers(engine.model))
    thinking = None  # a thinking model's chat: whether its reply starts inside its reasoning
    if is_chat:
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise BadRequest("'chat_template_kwargs' must be an object (e.g. {\"enable_thinking\": false})",
                             "chat_template_kwargs")
        tokens, echo = chat.tokenize(engine.model, _messages(body), tools=tools.for_template() if tools else None,
                                     template_kwargs=kwargs), ""
        if not isinstance(body.get("reasoning_format", "auto"), str):
            raise BadRequest("'reasoning_format' must be a string (\"none\": the reasoning stays in the content)",
                             "reasoning_format")
        ids = reasoning.markers(engine.model) if body.get("reasoning_format") != "none" else None
        thinking = reasoning.opened(tokens, ids) if ids else None
    else:
        tokens, echo = _prompt(body, engine.model)
    d = state.defaults
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    default = engine.target.n_ctx if state.max_tokens is None else state.max_tokens  # (serve -n)
    max_tokens = fields.number({"max_tokens": max_tokens}, "max_tokens", default, 0, 10 ** 9, integer=True)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest("'seed' must be an integer", "seed")
    sampling = SamplingConfig(temperature=fields.number(body, "temperature", d.temperature, 0, 2),
                              top_k=fields.number(body, "top_k", d.top_k, 0, 10 ** 6, integer=True),
                              top_p=fields.number(body, "top_p", d.top_p, 0, 1),
                              min_p=fields.number(body, "min_p", d.min_p, 0, 1),
                              seed=None if seed is None or seed < 0 else seed % 2 ** 64,
                              repeat_penalty=fields.number(body, "repeat_penalty", d.repeat_penalty, 1e-3, 10),
                              repeat_last_n=fields.number(body, "repeat_last_n", d.repeat_last_n, 0, 10 ** 6, integer=True),
                              presence_penalty=fields.number(body, "presence_penalty", d.presence_penalty, -2, 2),
                              frequency_penalty=fields.number(body, "frequency_penalty", d.frequency_penalty, -2, 2),
                              logit_bias=(fields.logit_bias(body, engine.model.n_vocab) or d.logit_bias)
                              + fields.ignore_eos(body, engine.model))
    spec = body.get("speculative") or {}
    if not isinstance(spec, dict):
        raise BadRequest("'speculative' must be an object: {\"mode\": ..., \"draft_max\": K}", "speculative")
    mode = spec.get("mode", "auto")
    if mode not in MODES:
        raise BadRequest(f"unknown speculative mode {mode!r}; use one of {', '.join(MODES)}", "speculative.mode")
    draft_max = fields.number(spec, "draft_max", None, 0, 32, integer=True)
    if is_chat:
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise BadRequest("'logprobs' must be true or false", "logprobs")
        logprobs = fields.number(body, "top_logprobs", 0, 0, 20, integer=True) if want else None
    else:
        logprobs = fields.number(body, "logprobs", None, 0, 5, integer=True)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false", "stream")
    options = body.get("stream_options") or {}
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    if not isinstance(body.get("return_progress", False), bool):
        raise BadRequest("'return_progress' must be true or false", "return_progress")
    req = Request(list(tokens), max_tokens, sampling, fields.stop(body), mode, draft_max, logprobs,
                  constraint=constraint, progress=stream and body.get("return_progress", False))
    if echo and logprobs is not None:
        raise BadRequest("'echo' with 'logprobs' would need the prompt's log-probabilities, which edgespec does not "
                         "compute; ask for one or the other", "echo", "unsupported_value")
    return req, {"stream": stream, "include_usage": include_usage, "chat": is_chat,
                 "tools": tools is not None and tools.active, "echo": echo, "thinking": thinking, "n": n}


def parse_as(chat: dict, state: ServerState, names: tuple[tuple[str, str], ...],
             is_chat: bool = True) -> tuple[Request, dict]:
    """parse() of a chat (or text) completion built from another API's request (the Responses API, Anthropic's,
    Ollama's), its errors naming that request's fields: `names` pairs a field's text in an error with the request's
    own."""
    try:
        return parse(chat, state, is_chat)
    except BadRequest as e:
        def renamed(text: str) -> str:
            for chat_name, name in names:
                text = text.replace(chat_name, name)
            return text

        raise BadRequest(renamed(str(e)), e.param and renamed(e.param), e.code, e.status) from None


def _prompt(body: dict, model) -> tuple[list[int], str]:
    """/v1/completions' prompt -> its tokens, and the text `echo` puts before the completion ("" without echo).
    A `suffix` asks for the text between the prompt and it (fill in the middle, fim.py), as Ollama and
    llama-cpp-python read it: a model without FIM tokens is refused, not asked an ordinary completion that would
    ignore it. `best_of` > 1 is refused too, not ignored."""
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise BadRequest("'suffix' must be a string", "suffix")
    if body.get("best_of") not in (None, 1):
        raise BadRequest("only best_of = 1 is supported", "best_of", "unsupported_value")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise BadRequest("'echo' must be true or false", "echo")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if suffix:  # ("" is no suffix, as in OpenAI's API and Ollama's)
        if not isinstance(prompt, str):
            raise BadRequest("with a 'suffix', 'prompt' must be the text before the gap, a string", "prompt")
        if echo:
            raise BadRequest("'echo' with a 'suffix' is not defined; ask for one or the other", "echo",
                             "unsupported_value")
        try:
            return fim.tokens(model, prompt, suffix), ""
        except EdgespecError as e:
            raise BadRequest(str(e), "suffix", "unsupported_value") from None
    if isinstance(prompt, str):
        # a raw prompt, as written (llama.cpp's completion semantics)
        return model.tokenize(prompt), prompt if echo else ""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not echo:
            return prompt, ""
        try:
            text = model.detokenize(prompt).decode("utf-8", errors="replace")
        except EdgespecError as e:  # an id outside the vocabulary: what submitting it would say
            raise BadRequest(str(e), "prompt") from None
        return prompt, text
    raise BadRequest("'prompt' must be a string, a list of one string, or a list of token ids", "prompt")


def _tools(body: dict) -> Tools | None:
    try:
        return Tools.parse(body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls"))
    except ToolError as e:
        raise BadRequest(str(e), e.param) from None


# rendering --------------------------------------------------------------------------------------------------------
def usage(req: Request, n_out: int, stats) -> dict:
    """OpenAI's usage, with the prompt tokens found in the cache (a conversation's earlier turns, a shared system
    prompt) as `prompt_tokens_details.cached_tokens`."""
    n_in = len(req.prompt)
    cached = max(0, n_in - stats.n_prompt_evaluated) if stats is not None else 0
    return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
            "prompt_tokens_details": {"cached_tokens": cached}}


def timings(stats) -> dict:
    gen_s = sum(r.seconds for r in stats.rounds)
    n = stats.n_tokens
    return {"prompt_n": stats.n_prompt_evaluated, "prompt_ms": 1000 * stats.prompt_s,
            "predicted_n": n, "predicted_ms": 1000 * gen_s,
            "predicted_per_second": n / gen_s if gen_s else None,
            "draft_n": stats.n_drafted, "draft_n_accepted": stats.n_accepted}


def prompt_progress(ev: Event) -> dict:
    """llama-server's prompt_progress: the prompt's tokens, those found in the cache, those read (cached ones
    included), and the milliseconds since the request joined."""
    processed, total, cached, seconds = ev.progress
    return {"total": total, "cache": cached, "processed": processed, "time_ms": round(1000 * seconds, 1)}


def _token_entry(model, token: int, logprob: float, top: list[tuple[int, float]]) -> dict:
    def one(t, lp):
        raw = model.piece(t)
        return {"token": raw.decode("utf-8", "replace"), "logprob": lp, "bytes": list(raw)}

    return {**one(token, logprob), "top_logprobs": [one(t, lp) for t, lp in top]}


def _finish(reason: str | None, calls: bool = False) -> str | None:
    """OpenAI's finish reasons: a grammar that allows nothing more ended the text (stop, or tool_calls when the reply
    holds calls); anything else that ended it early (a shutdown) is a length."""
    if reason in ("stop", "grammar"):
        return "tool_calls" if calls else "stop"
    return "length" if reason else None


class Answer:
    """The events of one request, gathered as they come (for the final JSON and for logprobs)."""

    MEDIA = "text/event-stream"  # what its stream is sent as

    def __init__(self, state: ServerState, req: Request, how: dict) -> None:
        self.state, self.req, self.how = state, req, how
        self.id = ("chatcmpl-" if how["chat"] else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.text: list[str] = []
        self.logprobs: list[dict] = []
        self.n_out = 0
        self.calls = CallReader() if how.get("tools") else None  # a stream's tool calls, read as they come
        thinking = how.get("thinking")
        self.thoughts = reasoning.Thoughts(thinking) if thinking is not None else None  # a stream's reasoning
        self._offset = 0  # a stream's: where the next chunk's first token begins in the text (text_offset)
        self.index, self.grouped = 0, False  # its choice's index; grouped: one of n (choices.Group ends the stream)

    def add(self, ev: Event) -> None:
        self.text.append(ev.text)
        if ev.token is not None:
            self.n_out += 1
            if ev.logprob is not None:
                self.logprobs.append(_token_entry(self.state.engine.model, ev.token, ev.logprob, ev.top))

    def _logprobs_block(self, entries: list[dict], offset: int = 0):
        """The logprobs of these tokens as the endpoint writes them; completions' text_offset counts from `offset`,
        where the first of them begins in the text."""
        if self.req.logprobs is None:
            return None
        if self.how["chat"]:
            return {"content": entries}
        starts = list(itertools.accumulate((len(e["token"]) for e in entries[:-1]), initial=offset)) if entries else []
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": starts}

    def body(self, last: Event) -> dict:
        text = "".join(self.text)
        choice = {"index": self.index, "logprobs": self._logprobs_block(self.logprobs),
                  "finish_reason": _finish(last.finish_reason)}
        if self.how["chat"]:
            thought, text = ("", text) if self.thoughts is None else reasoning.split(text, self.how["thinking"])
            choice["message"] = {"role": "assistant", "content": text}
            if self.calls is not None:
                reader = CallReader()
                content, calls = reader.feed(text)
                content += reader.rest()
                if calls:
                    choice["message"] = {"role": "assistant", "content": content.strip() or None, "tool_calls": calls}
                    choice["finish_reason"] = _finish(last.finish_reason, calls=True)
            if thought:
                choice["message"]["reasoning_content"] = thought
        else:
            choice["text"] = self.how["echo"] + text
        return {"id": self.id, "object": "chat.completion" if self.how["chat"] else "text_completion",
                "created": self.created, "model": self.state.model_id, "choices": [choice],
                "usage": usage(self.req, self.n_out, last.stats), "timings": timings(last.stats)}

    def chunk(self, ev: Event | None, first: bool = False, last: Event | None = None) -> dict | None:
        """The SSE chunk for one event (None when it has nothing to show yet: text that may open a tool call)."""
        entries = []
        if ev is not None and ev.logprob is not None:
            entries = [_token_entry(self.state.engine.model, ev.token, ev.logprob, ev.top)]
        choice = {"index": self.index,
                  "logprobs": self._logprobs_block(entries, self._offset) if ev is not None else None,
                  "finish_reason": _finish(last.finish_reason) if last is not None else None}
        self._offset += sum(len(e["token"]) for e in entries)
        text = ev.text if ev is not None else ""
        thought = ""
        if self.thoughts is not None and not first:
            thought, text = self.thoughts.feed(text, end=last is not None)
        if self.how["chat"] and self.calls is not None and not first:
            done = len(self.calls.calls)
            content, calls = self.calls.feed(text)
            if ev is None:
                content += self.calls.rest()
            delta = {"content": content} if content else {}
            if calls:
                delta["tool_calls"] = [{"index": done + k, **call} for k, call in enumerate(calls)]
            if last is not None and self.calls.calls:
                choice["finish_reason"] = _finish(last.finish_reason, calls=True)
            if thought:
                delta = {"reasoning_content": thought, **delta}
            if not delta and not entries and last is None:
                return None
            choice["delta"] = delta
        elif self.how["chat"] and first:
            choice["delta"] = {"role": "assistant", "content": ""}
        elif self.how["chat"]:  # (one piece may end the reasoning and begin the answer: both, then)
            choice["delta"] = {**({"reasoning_content": thought} if thought else {}),
                               **({"content": text} if text or ev is not None and not thought else {})}
        else:
            choice["text"] = self.how["echo"] if first else text  # (echo: the prompt comes first)
        out = {"id": self.id, "object": "chat.completion.chunk" if self.how["chat"] else "text_completion",
               "created": self.created, "model": self.state.model_id, "choices": [choice]}
        if last is not None:
            out["timings"] = timings(last.stats)
        return out

    def progress(self, ev: Event) -> dict:
        """llama-server's return_progress chunk: no text, and how far the prompt's reading has come."""
        choice = {"index": self.index, "logprobs": None, "finish_reason": None,
                  **({"delta": {}} if self.how["chat"] else {"text": ""})}
        return {"id": self.id, "object": "chat.completion.chunk" if self.how["chat"] else "text_completion",
                "created": self.created, "model": self.state.model_id, "choices": [choice],
                "prompt_progress": prompt_progress(ev)}

    def frames(self, ev: Event | None):
        """The server-sent events that show an event of the stream (None: its opening), after add(ev)."""
        if ev is not None and ev.progress is not None:
            yield sse(self.progress(ev))
            return
        if ev is None:
            if (opening := self.chunk(None, first=True)) is not None:
                yield sse(opening)
            return
        if (ev.text or (ev.logprob is not None and ev.finish_reason is None)) and (chunk := self.chunk(ev)) is not None:
            yield sse(chunk)
        if ev.finish_reason is None:
            return
        if ev.error:
            yield sse({"error": {"message": f"generation failed: {ev.error}", "type": "server_error"}})
        yield sse(self.chunk(None, last=ev))
        if not self.grouped:
            yield from self.tail(ev.stats)

    def tail(self, stats=None, total: dict | None = None):
        """What an OpenAI stream ends with: the usage chunk when asked for (total: n choices' together), and
        [DONE]."""
        if self.how["include_usage"]:
            yield sse({"id": self.id, "object": "chat.completion.chunk" if self.how["chat"] else "text_completion",
                       "created": self.created, "model": self.state.model_id, "choices": [],
                       "usage": total or usage(self.req, self.n_out, stats)})
        yield "data: [DONE]\n\n"


def sse(data) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"
