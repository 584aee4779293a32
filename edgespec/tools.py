"""Tool calls (OpenAI's `tools` and `tool_choice`): the functions a request offers, checked; the grammar that makes
every call the model writes valid against its function's schema; and the calls read back out of the text.

Calls are written in the Hermes format that Qwen2.5 and Qwen3, Hermes and many fine-tunes are trained on (and that
their chat templates describe): `<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`. Where the vocabulary
has `<tool_call>` as a token of its own, the grammar asks for that token (the model's own way to open a call), else
for the text. A chat template that knows no tools gets them described in its system message in the same format.

tool_choice: "none" (no tools in the prompt, free text), "auto" (free text, and any call it starts is held to its
schema), "required" (one call or more, nothing else), or one named function (exactly one call of it).
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from .constraints import JSON_STYLE, Constraint
from .errors import InvalidArgument

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# A keyword of a tool's schema that llguidance does not implement (propertyNames, say) is not enforced, rather than
# the request refused: agents offer tools from many sources (MCP servers), as llama-server takes them. A
# response_format schema is enforced whole, or refused.
LENIENT = {**JSON_STYLE, "lenient": True}
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class ToolError(InvalidArgument):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tools:
    functions: tuple[dict, ...]  # {"name", "description", "parameters"}, as the request gave them
    choice: str  # "none" | "auto" | "required" | a function's name
    parallel: bool = True

    @classmethod
    def parse(cls, tools, tool_choice=None, parallel=None) -> "Tools | None":
        """OpenAI's fields -> Tools (None when the request offers none); a ToolError naming the field if bad."""
        if tools is None:
            if tool_choice not in (None, "none", "auto"):
                raise ToolError("'tool_choice' needs 'tools' to choose from", "tool_choice")
            return None
        if not isinstance(tools, list):
            raise ToolError("'tools' must be a list of {\"type\": \"function\", \"function\": {...}}", "tools")
        functions, seen = [], set()
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" \
                else None
            if not isinstance(fn, dict):
                raise ToolError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                                f"tools[{i}]")
            name, params = fn.get("name"), fn.get("parameters", {"type": "object", "properties": {}})
            if not isinstance(name, str) or not _NAME.match(name):
                raise ToolError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-'",
                                f"tools[{i}].function.name")
            if name in seen:
                raise ToolError(f"two tools are named {name!r}", f"tools[{i}].function.name")
            if not isinstance(params, dict):
                raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object",
                                f"tools[{i}].function.parameters")
            try:  # a schema llguidance cannot compile: a 400 naming the tool, before any decoding
                Constraint.json_schema({**params, "x-guidance": LENIENT}).grammar()
            except InvalidArgument as e:
                raise ToolError(f"tools[{i}].function.parameters: {e}", f"tools[{i}].function.parameters") from None
            seen.add(name)
            described = {"name": name, "description": fn.get("description", ""), "parameters": params}
            if not isinstance(described["description"], str):
                raise ToolError(f"tools[{i}].function.description must be text", f"tools[{i}].function.description")
            functions.append(described)
        choice = "auto" if tool_choice is None else tool_choice
        if isinstance(choice, dict):
            fn = choice.get("function") if choice.get("type") == "function" else None
            choice = fn.get("name") if isinstance(fn, dict) else None
            if choice not in seen:
                raise ToolError("'tool_choice' names no tool of this request", "tool_choice")
        elif choice not in ("none", "auto", "required"):
            raise ToolError("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        if choice == "required" and not functions:
            raise ToolError("'tool_choice' is \"required\" but 'tools' is empty", "tool_choice")
        if parallel is not None and not isinstance(parallel, bool):
            raise ToolError("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
        return cls(tuple(functions), choice, parallel is not False)

    @property
    def active(self) -> bool:
        """The model is offered tools (they are in its prompt, and a grammar holds its calls)."""
        return self.choice != "none" and bool(self.functions)

    def for_template(self) -> list[dict]:
        """The tools as chat templates take them (transformers' convention)."""
        return [{"type": "function", "function": f} for f in self.functions] if self.active else []

    def constraint(self, special: tuple[int, int] | None) -> Constraint:
        """The grammar of what the model may write. `special`: the token ids of <tool_call> and </tool_call> where
        the vocabulary has them as tokens of their own."""
        chosen = [f for f in self.functions if self.choice in ("auto", "required") or f["name"] == self.choice]
        body = {"anyOf": [{"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": _args(f)},
                           "required": ["name", "arguments"], "additionalProperties": False} for f in chosen],
                "x-guidance": LENIENT}
        open_, close = (f"<[{special[0]}]>", f"<[{special[1]}]>") if special else (json.dumps(OPEN), json.dumps(CLOSE))
        many = self.parallel and self.choice in ("auto", "required")
        lines = [f"body: %json {json.dumps(body)}",
                 f'call: {open_} "\\n" body "\\n" {close}',
                 'calls: call ("\\n" call)*' if many else "calls: call"]
        if self.choice != "auto":
            lines.insert(0, "start: calls")
        elif special:  # text can never hold the special token: the call starts where the model writes it
            lines[:0] = ["start: text | text calls", "text: /(?s:.*)/"]
        else:  # text up to the first "<tool_call>" (lazy: it ends there), then the rest of that call
            lines[:0] = ["start: text | opening rest", "text: /(?s:.*)/", f"opening[lazy]: /(?s:.*){OPEN}/",
                         f'rest: "\\n" body "\\n" {close}' + (' ("\\n" call)*' if many else "")]
        return Constraint("lark", "\n".join(lines))


def _args(fn: dict) -> dict:
    params = dict(fn["parameters"])
    params.setdefault("type", "object")
    return params


def special_markers(model) -> tuple[int, int] | None:
    """The token ids of <tool_call> and </tool_call> where this vocabulary has each as one token."""
    ids = [model.tokenize(tag, add_special=False, parse_special=True) for tag in (OPEN, CLOSE)]
    if all(len(t) == 1 and model.piece(t[0]) == tag.encode() for t, tag in zip(ids, (OPEN, CLOSE))):
        return ids[0][0], ids[1][0]
    return None


def describe_in_system(messages: list[dict], tools) -> list[dict]:
    """For a chat template that knows no tools: the tools and the call format told in the system message, calls and
    their results written as the text the format uses."""
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            calls = "\n".join(f"{OPEN}\n{json.dumps(_plain(c))}\n{CLOSE}" for c in m["tool_calls"])
            out.append({"role": "assistant", "content": (m["content"] + "\n" if m["content"] else "") + calls})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    if tools:
        text = ("You may call one or more functions to assist with the user query. The functions are described "
                "within <tools></tools> XML tags:\n<tools>\n"
                + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
                + "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  f"within {OPEN}{CLOSE} XML tags:\n{OPEN}\n{{\"name\": <function-name>, \"arguments\": "
                  f"<args-json-object>}}\n{CLOSE}")
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _plain(call: dict) -> dict:
    fn = call.get("function", call)
    return {"name": fn.get("name"), "arguments": fn.get("arguments")}


class CallReader:
    """A reply read as it comes: the content before any tool call (never a piece of a call's opening tag), and each
    call once its closing tag has come."""

    def __init__(self) -> None:
        self.text, self.pos, self.in_calls = "", 0, False
        self.calls: list[dict] = []

    def feed(self, text: str) -> tuple[str, list[dict]]:
        """More of the reply -> (content to show now, calls completed now)."""
        self.text += text
        content = ""
        if not self.in_calls:
            i = self.text.find(OPEN, self.pos)
            if i < 0:
                end = len(self.text) - partial_tag(self.text, OPEN)
                content, self.pos = self.text[self.pos:end], end
                return content, []
            content, self.pos, self.in_calls = self.text[self.pos:i], i, True
        new = []
        while (j := self.text.find(CLOSE, self.pos)) >= 0:
            block = self.text[self.pos:j]
            call = _call(block[block.find(OPEN) + len(OPEN):] if OPEN in block else block)
            if call is not None:
                new.append(call)
            self.pos = j + len(CLOSE)
        self.calls += new
        return content, new

    def rest(self) -> str:
        """At the end: content held back (text that only looked like the start of a call, or a call cut short)."""
        rest, self.pos = self.text[self.pos:], len(self.text)
        return rest if not self.in_calls or rest.strip() else ""


def partial_tag(text: str, tag: str) -> int:
    """How many characters at the end of text could begin `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def _call(payload: str) -> dict | None:
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not (isinstance(data, dict) and isinstance(data.get("name"), str)):
        return None
    args = data.get("arguments", {})
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": data["name"], "arguments": json.dumps(args, ensure_ascii=False)}}
