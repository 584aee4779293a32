"""Chat prompts in the model's own template (read from the GGUF metadata)."""
from __future__ import annotations

import functools
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Sequence, Union

from .backend import Model, apply_builtin_template
from .errors import EdgespecError


def format_messages(model: Model, messages: Sequence[Message], template: str | None = None,
                    add_assistant: bool = True, tools: Sequence[dict] | None = None) -> str:
    """Chat messages -> the prompt text the model was trained on, ending where the assistant speaks."""
    return render(model, messages, template, add_assistant, tools)[0]


def tokenize(model: Model, messages: Sequence[Message], template: str | None = None,
             tools: Sequence[dict] | None = None, template_kwargs: dict | None = None) -> list[int]:
    """Chat messages in the chat template, as tokens ready for the assistant's reply; only the template's markup may
    become control tokens, what the messages say stays text."""
    text, literal = render(model, messages, template, tools=tools, template_kwargs=template_kwargs)
    return model.tokenize_literal(text, literal)


# A message: (role, content), or OpenAI's dict (role, content, and an assistant's tool_calls or a tool's answer).
Message = Union[tuple[str, str], dict]


def render(model: Model, messages: Sequence[Message], template: str | None = None, add_assistant: bool = True,
           tools: Sequence[dict] | None = None,
           template_kwargs: dict | None = None) -> tuple[str, list[tuple[int, int]]]:
    """The prompt text, and the spans of it that must stay literal text when tokenized: wherever a message holds the
    text of a control token ("<|im_end|>"). Only the template's own markup is special.

    Such text is swapped for a placeholder before rendering (so the template treats the content as it would) and
    put back after, noting where it went. A conversation that ends with the assistant's words (no tool calls) ends
    inside them, so that the model continues them (a prefill). `tools` (OpenAI's function list) go to a template
    that knows them; one that does not gets them described in the system message (tools.py). `template_kwargs` are
    the template's own variables (Qwen3's `enable_thinking`, say), as llama-server's `chat_template_kwargs`."""
    if isinstance(messages, (str, bytes, dict)) or not all(isinstance(m, (dict, tuple, list)) for m in messages):
        raise EdgespecError("messages must be a list of chat messages, each a {'role', 'content'} dict or a "
                            f"(role, content) pair; got {type(messages).__name__}")
    msgs = [m if isinstance(m, dict) else {"role": m[0] if len(m) else None, "content": m[1] if len(m) > 1 else None}
            for m in messages]
    for m in msgs:
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            raise EdgespecError(f"a chat message needs a role and content that are text, got {role!r}: {content!r}")
        try:
            _walk(m, lambda s: s.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 where the text came from
            raise EdgespecError("a chat message is not valid UTF-8 text (it holds undecodable bytes)") from None
    tmpl = template or model.chat_template()
    if not tmpl:
        raise EdgespecError(f"{model.path} has no chat template in its metadata; run without --chat, or give one "
                            "with --chat-format")
    # the assistant's words last: a prefill, continued where they end (as llama-server and Anthropic's API read it)
    prefill = add_assistant and msgs[-1:] != [] and msgs[-1]["role"] == "assistant" and not msgs[-1].get("tool_calls")
    if prefill and not msgs[-1]["content"]:
        msgs, prefill = msgs[:-1], False  # (nothing to continue: the reply starts as it would without it)
    rich = bool(tools) or any(set(m) - {"role", "content"} or m["role"] == "tool" for m in msgs)
    if rich and "tool" not in tmpl:
        from .tools import describe_in_system  # a template that knows no tools: the Hermes format, told in words

        msgs, tools, rich = describe_in_system(msgs, tools), None, False
    control = model.control_pattern()
    # NUL too: llama.cpp's built-in templates take C strings, which would end the message there
    hide_re = re.compile(f"{control.pattern}|\x00" if control is not None else "\x00")
    nonce = str(secrets.randbelow(10 ** 12))  # digits: a template that changes case leaves them be
    hidden: list[str] = []

    def hide(m: re.Match) -> str:
        hidden.append(m.group())
        return f"\ue000{nonce}.{len(hidden) - 1}\ue001"

    msgs = [_walk(m, lambda s: hide_re.sub(hide, s)) for m in msgs]
    template_kwargs = _walk(template_kwargs or {}, lambda s: hide_re.sub(hide, s))  # a caller's text is text too
    end = f"\ue002{nonce}\ue003"  # where a prefill ends: the prompt is cut there, the template's closing markup off
    if prefill:
        msgs[-1] = {**msgs[-1], "content": msgs[-1]["content"] + end}
        add_assistant = False
    # The template as the Jinja it is (as transformers, llama-server and LM Studio render it: a model's default system
    # prompt included); llama.cpp's own rendering for a template named, or one this renderer cannot run.
    text, failed = None, None
    if "{{" in tmpl or "{%" in tmpl:
        try:
            text = _render_jinja(model, tmpl, msgs, add_assistant, tools, template_kwargs)
        except TemplateError as e:
            if rich or template_kwargs:
                raise
            failed = e
    if text is None:
        text = apply_builtin_template(tmpl, [(m["role"], m["content"]) for m in msgs], add_assistant)
    if text is None:
        raise failed or EdgespecError(f"llama.cpp knows no chat template named {tmpl[:40]!r}")
    if prefill:
        if end not in text:
            raise EdgespecError("the chat template does not show the last assistant message, so it cannot be "
                                "continued; end the conversation with a user message")
        text = text[:text.index(end)]
    if not hidden:
        return text, []
    out, spans, pos, length = [], [], 0, 0
    for m in re.finditer(f"\ue000{nonce}\\.(\\d+)\ue001", text):
        out.append(text[pos:m.start()])
        length += m.start() - pos
        original = hidden[int(m.group(1))]
        out.append(original)
        spans.append((length, length + len(original)))
        length += len(original)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out), spans


def template_note(model: Model, template: str | None = None) -> str | None:
    """Why the chat template (the model's, or the one given) will not be run as the Jinja it is, where it will not:
    llama.cpp's built-in rendering of the family it looks like stands in for it (tokenize), which leaves out what the
    template itself adds (a default system prompt, tools in its own words). None where it runs."""
    tmpl = template or model.chat_template()
    if not tmpl or ("{{" not in tmpl and "{%" not in tmpl):
        return None
    try:
        _render_jinja(model, tmpl, [{"role": "user", "content": "hi"}], True)
    except TemplateError as e:
        return f"{e}; llama.cpp's built-in rendering of that template family is used instead"
    except EdgespecError:
        pass  # (the template refused this conversation on purpose: it runs)
    return None


def _walk(value, f):
    """`value` with f applied to every string in it (dicts, lists)."""
    if isinstance(value, str):
        return f(value)
    if isinstance(value, dict):
        return {k: _walk(v, f) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, f) for v in value]
    return value


class TemplateError(EdgespecError):
    """A chat template this renderer cannot run (its syntax, a function it calls): not a refusal of the conversation."""


@functools.lru_cache(maxsize=8)
def _compiled(tmpl: str):
    """A template compiled once, as transformers renders templates: trimmed blocks, loop controls, JSON as json.dumps
    writes it (keys in their order, text not escaped), `strftime_now` for the date some templates print."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(tmpl)


def _render_jinja(model: Model, tmpl: str, messages: list[dict], add_assistant: bool,
                  tools: Sequence[dict] | None = None, variables: dict | None = None) -> str:
    def raise_exception(message: str) -> None:
        raise EdgespecError(f"the chat template refused the conversation: {message}")

    context = {**(variables or {}),  # (the caller's own variables; the conversation's are never theirs to set)
               "messages": messages, "add_generation_prompt": add_assistant,
               "bos_token": model.token_text(model.bos).decode("utf-8", "replace"),
               "eos_token": model.token_text(model.eos).decode("utf-8", "replace"),
               "raise_exception": raise_exception, **({"tools": list(tools)} if tools else {})}
    try:
        return _compiled(tmpl).render(**context)
    except EdgespecError:
        raise
    except Exception as e:  # a template is a program: any error it makes is the template's, not ours
        raise TemplateError(f"cannot render the chat template: {type(e).__name__}: {e}") from None


ROLES = ("system", "user", "assistant")


@dataclass
class Conversation:
    """A chat: optional system prompt and alternating user / assistant turns. Saved and loaded as JSON.

    `turns` is the whole conversation; when the context is full the oldest exchanges leave the model's window
    (`start` moves on) but stay in the conversation, so /save still writes everything that was said."""

    system: str | None = None
    turns: list[tuple[str, str]] = field(default_factory=list)
    start: int = 0  # turns[start:] are what the model sees

    def messages(self) -> list[tuple[str, str]]:
        """What the model sees: the system prompt and the turns still in the window."""
        return ([("system", self.system)] if self.system else []) + list(self.turns[self.start:])

    def all_messages(self) -> list[tuple[str, str]]:
        return ([("system", self.system)] if self.system else []) + list(self.turns)

    def add(self, role: str, content: str) -> None:
        self.turns.append((role, content))

    def drop_oldest_exchange(self) -> int:
        """Move the oldest user turn and the reply to it out of the window (the system prompt stays). Returns how
        many messages left it (0: nothing left to drop)."""
        window = self.turns[self.start:]
        if len(window) <= 1:
            return 0
        n = 2 if len(window) > 2 and window[1][0] == "assistant" else 1
        self.start += n
        return n

    def to_json(self) -> str:
        msgs = [{"role": r, "content": c} for r, c in self.all_messages()]
        return json.dumps({"messages": msgs}, indent=1, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Write atomically: a failed write (disk full, no permission) leaves the previous file as it was."""
        path = Path(path)
        data = (self.to_json() + "\n").encode("utf-8")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    @classmethod
    def load(cls, path: str | Path) -> "Conversation":
        shape = 'expected {"messages": [{"role": "system"|"user"|"assistant", "content": TEXT}, ...]}'
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise EdgespecError(f"cannot read {path}: {e.strerror or e}") from None
        except ValueError as e:  # not JSON, or not UTF-8
            raise EdgespecError(f"{path} is not a saved chat ({e.__class__.__name__}); {shape}") from None
        msgs = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(msgs, list):
            raise EdgespecError(f"{path} is not a saved chat: {shape}")
        out = []
        for i, m in enumerate(msgs):
            if not (isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content"), str)):
                raise EdgespecError(f"{path}: message {i + 1} is not a chat message: {shape}")
            if m["role"] == "system" and i > 0:
                raise EdgespecError(f"{path}: message {i + 1} is a system message; only the first may be one")
            out.append((m["role"], m["content"]))
        system = out[0][1] if out and out[0][0] == "system" else None
        return cls(system, out[1:] if system is not None else out)
