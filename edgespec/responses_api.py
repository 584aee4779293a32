"""OpenAI's Responses API, the one agents and newer SDKs speak: `POST /v1/responses` read as the chat completion it
means (`input` items and `instructions` as messages, function `tools`, `text.format`, `max_output_tokens`;
openai_api.parse reads the rest), its answer as a response object, whole or as the stream of typed events the SDKs
accumulate, and the finished responses kept in memory for `previous_response_id` and `GET`/`DELETE
/v1/responses/{id}` (the newest KEPT of them). No HTTP here.

Refused with a 400 rather than ignored, because the answer would not be what was asked: tools other than functions
(web search, file search, computer use: nothing here runs them), images and files in the input, `background`,
`truncation: "auto"`. Another model's `reasoning` items in the input are left out, as its hidden thoughts are."""
from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

from .openai_api import BadRequest, parse_as, timings
from .sequences import Event, Request
from .typed_answer import TypedAnswer

KEPT = 1000  # finished responses kept for previous_response_id; the oldest go first
PASSED = ("temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "repeat_last_n", "presence_penalty",
          "frequency_penalty", "logit_bias", "ignore_eos", "speculative", "stop", "stream", "parallel_tool_calls",
          "reasoning_format", "chat_template_kwargs")
LOGPROBS = "message.output_text.logprobs"
NAMES = (("response_format", "text.format"), ("max_tokens", "max_output_tokens"), ("].function.", "]."),
         ("messages", "input"))  # a chat field's name in an error -> this API's


class Store:
    """Finished responses by id: the response object, and the conversation it ends as chat messages (its
    `instructions` left out: a response that follows another does not inherit them)."""

    def __init__(self, size: int = KEPT) -> None:
        self.size, self._kept, self._lock = size, OrderedDict(), threading.Lock()

    def put(self, response: dict, conversation: list[dict]) -> None:
        with self._lock:
            self._kept[response["id"]] = (response, conversation)
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)

    def get(self, id: str) -> tuple[dict, list[dict]] | None:
        with self._lock:
            return self._kept.get(id)

    def delete(self, id: str) -> bool:
        with self._lock:
            return self._kept.pop(id, None) is not None


# request parsing ------------------------------------------------------------------------------------------------
def parse(body, state) -> tuple[Request, dict]:
    """A /v1/responses body -> the engine's Request and how to render the answer."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("background"):
        raise BadRequest("'background' responses are not supported; ask without it (stream for progress)",
                         "background", "unsupported_value")
    if body.get("truncation", "disabled") != "disabled":
        raise BadRequest("only truncation \"disabled\" is supported: a conversation past the context is refused, "
                         "never cut silently", "truncation", "unsupported_value")
    if not isinstance(body.get("store", True), bool):
        raise BadRequest("'store' must be true or false", "store")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string", "instructions")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise BadRequest("'metadata' must map keys to strings", "metadata")
    previous, history = body.get("previous_response_id"), []
    if previous is not None:
        kept = state.responses.get(previous) if isinstance(previous, str) else None
        if kept is None:
            raise BadRequest(f"no stored response {previous!r} (this server keeps the newest {KEPT} responses made "
                             "with store true, until it stops)", "previous_response_id",
                             "previous_response_not_found", status=404)
        history = kept[1]
    messages = _conversation(body.get("input"))
    chat = {k: body[k] for k in PASSED if k in body}
    chat["messages"] = ([{"role": "system", "content": instructions}] if instructions else []) + history + messages
    if body.get("max_output_tokens") is not None:
        n = body["max_output_tokens"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadRequest("'max_output_tokens' must be an integer >= 1", "max_output_tokens")
        chat["max_tokens"] = n
    fmt = _format(body.get("text"))
    if fmt["type"] == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt["schema"]}}
    elif fmt["type"] == "json_object":
        chat["response_format"] = {"type": "json_object"}
    tools = _tools(body.get("tools"))
    if tools is not None:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" not in choice:
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}  # (the flat form)
    elif choice is not None:
        chat["tool_choice"] = choice
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
        raise BadRequest("'include' must be a list of strings", "include")
    if LOGPROBS in include:
        chat["logprobs"], chat["top_logprobs"] = True, body.get("top_logprobs", 0)
    req, how = parse_as(chat, state, NAMES)
    return req, {**how, "include_usage": False, "store": body.get("store", True), "instructions": instructions,
                 "previous": previous, "metadata": metadata, "format": fmt, "tool_choice": choice or "auto",
                 "tools_given": body.get("tools") or [], "parallel": body.get("parallel_tool_calls", True),
                 "conversation": history + messages, "max_output_tokens": body.get("max_output_tokens")}


def _conversation(items) -> list[dict]:
    """`input`: a text (one user message) or a list of items -> chat messages (an assistant's function calls on
    its message, their outputs as tool messages)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("'input' must be a string or a non-empty list of items", "input")
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            if item.get("role") not in ("user", "assistant", "system", "developer"):
                raise BadRequest(f"{where}.role must be user, assistant, system or developer", f"{where}.role")
            out.append({"role": item["role"], "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            for name in ("call_id", "name", "arguments"):
                if not isinstance(item.get(name), str):
                    raise BadRequest(f"{where}.{name} must be a string", f"{where}.{name}")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}.call_id must be a string", f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _text(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            continue  # another model's hidden thoughts: not part of what this one is shown
        elif kind is None:
            raise BadRequest(f"{where} must be an object", where)
        else:
            raise BadRequest(f"{where}: edgespec reads message, function_call and function_call_output items, not "
                             f"{kind!r}", f"{where}.type", "unsupported_value")
    return out


def _text(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            key = "refusal" if kind == "refusal" else "text"
            if kind not in ("input_text", "output_text", "text", "refusal") or not isinstance(part.get(key), str):
                raise BadRequest(f"{where}: only text parts are supported (input_text, output_text), not {kind!r}",
                                 where, "unsupported_value")
            texts.append(part[key])
        return "".join(texts)
    raise BadRequest(f"{where} must be a string or a list of text parts", where)


def _format(text) -> dict:
    """`text.format` -> {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "name", "schema", ...}."""
    fmt = text.get("format") if isinstance(text, dict) else None if text is None else False
    if fmt is False:
        raise BadRequest("'text' must be an object: {\"format\": {...}}", "text")
    if fmt is None:
        return {"type": "text"}
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise BadRequest("'text.format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                         "text.format")
    if fmt["type"] == "json_schema" and not isinstance(fmt.get("schema"), dict):
        raise BadRequest("text.format.schema must be a JSON schema object", "text.format.schema")
    return fmt


def _tools(tools) -> list[dict] | None:
    """Responses' function tools ({"type": "function", "name", "parameters", ...}) in the chat form."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list of {\"type\": \"function\", \"name\": ...}", "tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise BadRequest(f"tools[{i}]: edgespec offers the model function tools only (its caller runs them), "
                             f"not {kind!r}", f"tools[{i}].type", "unsupported_value")
        out.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                                     if k in tool}})
    return out


# rendering --------------------------------------------------------------------------------------------------------
def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponsesAnswer(TypedAnswer):
    """One response as it is generated: its output items (a message, function calls) built as the text comes, the
    stream's events for them, and the response object at the end (kept in the store when `store`)."""

    NUMBERED = True

    def __init__(self, state, req: Request, how: dict) -> None:
        super().__init__(state, req, how)
        self.id = _id("resp")
        self.items: list[dict] = []
        self._message: dict | None = None  # the message item text is being added to
        self._reasoning: dict | None = None  # a thinking model's reasoning item

    def _open_thought(self) -> None:
        self._reasoning = {"type": "reasoning", "id": _id("rs"), "summary": [], "status": "in_progress",
                           "content": [{"type": "reasoning_text", "text": ""}]}
        self._open(self._reasoning)

    def _thought(self, text: str) -> None:
        self._reasoning["content"][0]["text"] += text
        self._emit("response.reasoning_text.delta", item_id=self._reasoning["id"], output_index=len(self.items) - 1,
                   content_index=0, delta=text)

    def _close_thought(self, ev: Event) -> None:
        item, index = self._reasoning, self.items.index(self._reasoning)
        item["status"] = "completed"
        self._emit("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                   text=item["content"][0]["text"])
        self._emit("response.output_item.done", output_index=index, item=item)

    def _open_text(self) -> None:
        self._message = {"type": "message", "id": _id("msg"), "status": "in_progress", "role": "assistant",
                         "content": []}
        self._open(self._message)
        self._emit("response.content_part.added", item_id=self._message["id"], output_index=len(self.items) - 1,
                   content_index=0, part=self._part(""))
        self._message["content"].append(self._part(""))

    def _text(self, text: str, entries: list[dict]) -> None:
        part = self._message["content"][0]
        part["text"] += text
        part["logprobs"] += entries
        self._emit("response.output_text.delta", item_id=self._message["id"], output_index=len(self.items) - 1,
                   content_index=0, delta=text, logprobs=entries)

    def _part(self, text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def _call(self, call: dict) -> None:
        fn = call["function"]
        item = {"type": "function_call", "id": _id("fc"), "call_id": call["id"], "name": fn["name"],
                "arguments": "", "status": "in_progress"}
        self._open(item)
        where = {"item_id": item["id"], "output_index": len(self.items) - 1}
        self._emit("response.function_call_arguments.delta", **where, delta=fn["arguments"])
        item["arguments"], item["status"] = fn["arguments"], "completed"
        self._emit("response.function_call_arguments.done", **where, name=fn["name"], arguments=fn["arguments"])
        self._emit("response.output_item.done", output_index=len(self.items) - 1, item=dict(item))

    def _open(self, item: dict) -> None:
        self.items.append(item)
        self._emit("response.output_item.added", output_index=len(self.items) - 1, item={**item, "content": []}
                   if "content" in item else dict(item))

    def _close_text(self, ev: Event) -> None:
        item, self._message = self._message, None
        item["status"] = "completed" if ev.finish_reason in (None, "stop", "grammar") else "incomplete"
        part, index = item["content"][0], self.items.index(item)
        self._emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                   text=part["text"], logprobs=part["logprobs"])
        self._emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
        self._emit("response.output_item.done", output_index=index, item=item)

    def _end(self, last: Event) -> None:
        finished = last.finish_reason in ("stop", "grammar")
        status = "failed" if last.error else "completed" if finished else "incomplete"
        self.final = self._response(status, last)
        if last.error:
            self.final["error"] = {"code": "server_error", "message": f"generation failed: {last.error}"}
        elif status == "incomplete":
            self.final["incomplete_details"] = {"reason": "max_output_tokens"}
        if self.how["store"] and not last.error:
            self.state.responses.put(self.final, self._conversation())

    def _conversation(self) -> list[dict]:
        """The conversation this response ends, as a following response is shown it: its output one assistant
        message (a prefill and what continued it, one message)."""
        text = "".join(i["content"][0]["text"] for i in self.items if i["type"] == "message")
        calls = [{"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}
                 for i in self.items if i["type"] == "function_call"]
        before = self.how["conversation"]
        if before and before[-1]["role"] == "assistant" and not before[-1].get("tool_calls"):
            before, text = before[:-1], before[-1]["content"] + text
        return before + [{"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}]

    # rendering
    def _response(self, status: str, last: Event | None = None) -> dict:
        how, s = self.how, self.req.sampling
        out = {"id": self.id, "object": "response", "created_at": self.created, "status": status, "error": None,
               "incomplete_details": None, "instructions": how["instructions"],
               "max_output_tokens": how["max_output_tokens"], "model": self.state.model_id,
               "output": [dict(i) for i in self.items] if last is not None else [],
               "parallel_tool_calls": how["parallel"], "previous_response_id": how["previous"],
               "reasoning": {"effort": None, "summary": None}, "store": how["store"], "temperature": s.temperature,
               "text": {"format": how["format"]}, "tool_choice": how["tool_choice"], "tools": how["tools_given"],
               "top_p": s.top_p, "truncation": "disabled", "usage": None, "user": None, "metadata": how["metadata"]}
        if last is not None:
            n_in = len(self.req.prompt)
            cached = max(0, n_in - last.stats.n_prompt_evaluated) if last.stats else 0
            out["usage"] = {"input_tokens": n_in, "input_tokens_details": {"cached_tokens": cached},
                            "output_tokens": self.n_out, "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": n_in + self.n_out}
            if last.stats:
                out["timings"] = timings(last.stats)
        return out

    def _opening(self) -> list[dict]:
        opening = self._response("in_progress")
        return [{"type": "response.created", "response": opening},
                {"type": "response.in_progress", "response": opening}]

    def _closing(self, last: Event) -> list[dict]:
        return [{"type": f"response.{self.final['status']}", "response": self.final}]
