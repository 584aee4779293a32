"""Chat prompts in the model's own template (read from the GGUF metadata)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .backend import Model, apply_builtin_template
from .errors import EdgespecError


def format_messages(model: Model, messages: Sequence[tuple[str, str]], template: str | None = None,
                    add_assistant: bool = True) -> str:
    """(role, content) pairs -> the prompt text the model was trained on, ending where the assistant speaks."""
    tmpl = template or model.chat_template()
    if not tmpl:
        raise EdgespecError(f"{model.path} has no chat template in its metadata; run without --chat")
    # llama.cpp recognises the common templates itself; anything else is rendered as the Jinja it is.
    text = apply_builtin_template(tmpl, messages, add_assistant)
    return text if text is not None else _render_jinja(model, tmpl, messages, add_assistant)


def _render_jinja(model: Model, tmpl: str, messages: Sequence[tuple[str, str]], add_assistant: bool) -> str:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise EdgespecError(f"the chat template refused the conversation: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    try:
        return env.from_string(tmpl).render(
            messages=[{"role": r, "content": c} for r, c in messages],
            add_generation_prompt=add_assistant,
            bos_token=model.token_text(model.bos).decode("utf-8", "replace"),
            eos_token=model.token_text(model.eos).decode("utf-8", "replace"),
            raise_exception=raise_exception,
        )
    except jinja2.TemplateError as e:
        raise EdgespecError(f"cannot render the chat template of {model.path}: {e}") from None


@dataclass
class Conversation:
    """A chat: optional system prompt and alternating user / assistant turns. Saved and loaded as JSON."""

    system: str | None = None
    turns: list[tuple[str, str]] = field(default_factory=list)

    def messages(self) -> list[tuple[str, str]]:
        return ([("system", self.system)] if self.system else []) + list(self.turns)

    def add(self, role: str, content: str) -> None:
        self.turns.append((role, content))

    def drop_oldest_exchange(self) -> bool:
        """Forget the oldest user turn and the reply to it (the system prompt stays). False if nothing to drop."""
        if len(self.turns) <= 1:
            return False
        del self.turns[: 2 if len(self.turns) > 2 and self.turns[1][0] == "assistant" else 1]
        return True

    def to_json(self) -> str:
        msgs = [{"role": r, "content": c} for r, c in self.messages()]
        return json.dumps({"messages": msgs}, indent=1, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Conversation":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            msgs = [(m["role"], m["content"]) for m in data["messages"]]
        except OSError as e:
            raise EdgespecError(f"cannot read {path}: {e.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise EdgespecError(f"{path} is not a saved chat (expected {{\"messages\": [{{\"role\", \"content\"}}]}})") from None
        system = msgs[0][1] if msgs and msgs[0][0] == "system" else None
        return cls(system, msgs[1:] if system is not None else msgs)
