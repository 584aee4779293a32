"""Fill in the middle: the text before a gap and the text after it, framed with the model's own FIM tokens as
llama.cpp's /infill frames them (prefix, suffix, middle), so that what the model writes next is the gap's text."""
from __future__ import annotations

import os

from .errors import EdgespecError

FIM_MODELS = "Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder, Codestral"


def tokens(model, prefix: str, suffix: str) -> list[int]:
    """[BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle>. Both texts are literal: "<|fim_middle|>" in
    the code being edited is those characters, never the token. A model without FIM tokens is an error (an
    ordinary completion of the prefix would ignore the suffix, an answer to another question)."""
    ids = model.fim_ids
    if ids is None:
        raise EdgespecError(f"{os.path.basename(model.path)} has no fill-in-the-middle tokens, so it cannot take a "
                            f"suffix; use a model trained for it ({FIM_MODELS})")
    pre, suf, mid = ids
    head = [model.bos] if model.add_bos else []
    return [*head, pre, *model.tokenize(prefix, add_special=False, parse_special=False),
            suf, *model.tokenize(suffix, add_special=False, parse_special=False), mid]
