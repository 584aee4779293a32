"""Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`), which Claude Code and the
`anthropic` SDK speak, as llama-server, vLLM and Ollama serve it: a request read as the chat completion it means
(`system`, content blocks, `tool_use` / `tool_result`, `tools` with `input_schema`, `tool_choice`, `stop_sequences`;
openai_api.parse reads the rest), its answer as a message, whole or as Anthropic's stream of typed events, and
errors in Anthropic's shape. No HTTP here.

Refused with a 400 rather than ignored: images and documents in the content, Anthropic's server tools (web search,
code execution: nothing here runs them). The request's `thinking` field is accepted and changes nothing (a thinking
model's reasoning comes as a thinking block either way, reasoning.py); earlier `thinking` blocks in the conversation
are left out, as hidden thoughts are."""
from __future__ import annotations

import json
import uuid

from .openai_api import BadRequest, parse_as, timings
from .sequences import Event, Request
from .typed_answer import TypedAnswer

PASSED = ("temperature", "top_p", "top_k", "min_p", "seed", "repeat_penalty", "repeat_last_n", "presence_penalty",
          "frequency_penalty", "logit_bias", "ignore_eos", "speculative", "stream", "reasoning_format",
          "chat_template_kwargs")
NAMES = (("].function.parameters", "].input_schema"), ("].function.", "]."), ("'stop'", "'stop_sequences'"),
         ("response_format", "output_config.format"))  # a chat field's name in an error -> this API's
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(body: dict, status: int) -> dict:
    """An OpenAI-style error body as Anthropic writes one: {"type": "error", "error": {"type", "message", ...}}."""
    return {"type": "error", "error": {**body.get("error", {}),
                                       "type": ERROR_TYPES.get(status, "api_error" if status >= 500 else
                                                               "invalid_request_error")}}


# request parsing ------------------------------------------------------------------------------------------------
def parse(body, state, counting: bool = False) -> tuple[Request, dict]:
    """A /v1/messages body -> the engine's Request and how to render the answer (`counting`: for count_tokens,
    where max_tokens is not asked for)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    chat = {k: body[k] for k in PASSED if k in body}
    if not counting:
        n = body.get("max_tokens")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadRequest("'max_tokens' is required: an integer >= 1", "max_tokens")
        chat["max_tokens"] = n
    chat["messages"] = _system(body.get("system")) + _conversation(body.get("messages"))
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("'stop_sequences' must be a list of strings", "stop_sequences")
        chat["stop"] = stop
    fmt = _format(body)
    if fmt is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": fmt}}
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            raise BadRequest("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}",
                             "tool_choice")
        chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(
            kind, {"type": "function", "function": {"name": choice.get("name")}})
        if choice.get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    req, how = parse_as(chat, state, NAMES)
    return req, {**how, "include_usage": False}


def _format(body: dict) -> dict | None:
    """Structured output: `output_config.format` (or the beta's `output_format`), {"type": "json_schema", "schema"}
    -> the schema."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise BadRequest("'output_config' must be an object", "output_config")
    fmt, where = ((config or {}).get("format"), "output_config.format") if config and config.get("format") is not None \
        else (body.get("output_format"), "output_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise BadRequest(f"'{where}' must be {{\"type\": \"json_schema\", \"schema\": {{...}}}}", where)
    return fmt["schema"]


def _system(system) -> list[dict]:
    if system is None:
        return []
    return [{"role": "system", "content": _text(system, "system")}]


def _text(content, where: str) -> str:
    """A string, or text blocks (their cache_control and citations have no meaning here)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        for i, block in enumerate(content):
            if block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise BadRequest(f"{where}[{i}]: only text blocks are supported here, not {block.get('type')!r}",
                                 f"{where}[{i}]", "unsupported_value")
        return "".join(b["text"] for b in content)
    raise BadRequest(f"{where} must be a string or a list of text blocks", where)


def _conversation(messages) -> list[dict]:
    """Anthropic's messages -> chat messages: an assistant's tool_use blocks as its tool calls, a user's
    tool_result blocks as tool messages (before the user's text, as they answer the calls just made)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects", "messages")
    out: list[dict] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise BadRequest(f"{where}.role must be user or assistant", f"{where}.role")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise BadRequest(f"{where}.content must be a string or a list of content blocks", f"{where}.content")
        texts, calls = [], []
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "tool_use" and m["role"] == "assistant":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                        or not isinstance(block.get("input", {}), dict):
                    raise BadRequest(f"{at}: a tool_use block needs an id, a name and an input object", at)
                calls.append({"id": block["id"], "type": "function", "function": {
                    "name": block["name"], "arguments": json.dumps(block.get("input", {}), ensure_ascii=False)}})
            elif kind == "tool_result" and m["role"] == "user":
                if not isinstance(block.get("tool_use_id"), str):
                    raise BadRequest(f"{at}.tool_use_id must be a string", f"{at}.tool_use_id")
                result = _text(block.get("content", ""), f"{at}.content")
                out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": f"Error: {result}" if block.get("is_error") else result})
            elif kind in ("thinking", "redacted_thinking") and m["role"] == "assistant":
                continue  # hidden thoughts, another model's or not: not part of what this one is shown
            else:
                raise BadRequest(f"{at}: edgespec reads text, tool_use (assistant) and tool_result (user) blocks, "
                                 f"not {kind!r}", at, "unsupported_value")
        if texts or calls or m["role"] == "assistant" or not out or out[-1]["role"] != "tool":
            msg = {"role": m["role"], "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    return out


def _tools(tools) -> list[dict]:
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be a list of {\"name\", \"description\", \"input_schema\"}", "tools")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        if kind != "custom":
            raise BadRequest(f"tools[{i}]: edgespec offers the model client tools only (name, description, "
                             f"input_schema; its caller runs them), not {kind!r}", f"tools[{i}].type",
                             "unsupported_value")
        fn = {"name": tool.get("name"), "description": tool.get("description", "")}
        if "input_schema" in tool:
            fn["parameters"] = tool["input_schema"]
        out.append({"type": "function", "function": fn})
    return out


def count_tokens(body, state) -> dict:
    """/v1/messages/count_tokens: the prompt's tokens, as the request would be given them."""
    req, _ = parse(body, state, counting=True)
    return {"input_tokens": len(req.prompt)}


# rendering --------------------------------------------------------------------------------------------------------
def _stop_reason(last: Event, calls: bool) -> str:
    if last.stop_word:
        return "stop_sequence"
    if last.finish_reason in ("stop", "grammar"):
        return "tool_use" if calls else "end_turn"
    return "max_tokens"


class MessageAnswer(TypedAnswer):
    """One message as it is generated: its content blocks (text, tool_use) built as the text comes, Anthropic's
    stream events for them, and the message at the end."""

    def __init__(self, state, req: Request, how: dict) -> None:
        super().__init__(state, req, how)
        self.id = f"msg_{uuid.uuid4().hex}"
        self.blocks: list[dict] = []

    def _start(self, block: dict) -> None:
        self.blocks.append(block)
        self._emit("content_block_start", index=len(self.blocks) - 1, content_block=dict(block))

    def _open_thought(self) -> None:
        self._start({"type": "thinking", "thinking": "", "signature": ""})

    def _thought(self, text: str) -> None:
        self.blocks[-1]["thinking"] += text
        self._emit("content_block_delta", index=len(self.blocks) - 1,
                   delta={"type": "thinking_delta", "thinking": text})

    def _close_thought(self, ev: Event) -> None:
        self._emit("content_block_stop", index=len(self.blocks) - 1)

    def _open_text(self) -> None:
        self._start({"type": "text", "text": ""})

    def _text(self, text: str, entries: list) -> None:
        self.blocks[-1]["text"] += text
        self._emit("content_block_delta", index=len(self.blocks) - 1, delta={"type": "text_delta", "text": text})

    def _close_text(self, ev: Event) -> None:
        self._emit("content_block_stop", index=len(self.blocks) - 1)

    def _call(self, call: dict) -> None:
        fn = call["function"]
        self._start({"type": "tool_use", "id": "toolu_" + call["id"].removeprefix("call_"), "name": fn["name"],
                     "input": {}})
        self.blocks[-1]["input"] = json.loads(fn["arguments"])
        index = len(self.blocks) - 1
        self._emit("content_block_delta", index=index,
                   delta={"type": "input_json_delta", "partial_json": fn["arguments"]})
        self._emit("content_block_stop", index=index)

    def _end(self, last: Event) -> None:
        self.final = self._message(_stop_reason(last, any(b["type"] == "tool_use" for b in self.blocks)), last)

    def _message(self, stop_reason: str | None, last: Event | None) -> dict:
        out = {"id": self.id, "type": "message", "role": "assistant", "model": self.state.model_id,
               "content": self.blocks if last is not None else [], "stop_reason": stop_reason,
               "stop_sequence": last and last.stop_word,
               "usage": self._usage(last)}
        if last is not None and last.stats:
            out["timings"] = timings(last.stats)
        return out

    def _usage(self, last: Event | None) -> dict:
        """Anthropic's usage: the prompt's tokens found in the cache (known once it was read) are
        cache_read_input_tokens, the rest input_tokens; the two add up to the prompt."""
        n_in = len(self.req.prompt)
        cached = max(0, n_in - last.stats.n_prompt_evaluated) if last is not None and last.stats else 0
        return {"input_tokens": n_in - cached, "output_tokens": self.n_out, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached}

    def _opening(self) -> list[dict]:
        return [{"type": "message_start", "message": self._message(None, None)}, {"type": "ping"}]

    def _closing(self, last: Event) -> list[dict]:
        if last.error:
            return [{"type": "error", "error": {"type": "api_error", "message": f"generation failed: {last.error}"}}]
        return [{"type": "message_delta", "delta": {"stop_reason": self.final["stop_reason"],
                                                    "stop_sequence": self.final["stop_sequence"]},
                 "usage": self.final["usage"]}, {"type": "message_stop"}]  # (cumulative, as Anthropic's)
