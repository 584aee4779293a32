"""Chat prompts in the model's own template (read from the GGUF metadata)."""
from __future__ import annotations

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
