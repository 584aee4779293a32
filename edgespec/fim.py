"""Fill in the middle: the text before a gap and the text after it, framed with the model's own FIM tokens as
llama.cpp's /infill frames them (prefix, suffix, middle), so that what the model writes next is the gap's text."""
from __future__ import annotations

import os
from typing import Sequence

from .errors import ContextOverflowError, EdgespecError

FIM_MODELS = "Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder, Codestral"
SNIPPET = "\n\n--- snippet ---\n\n"  # between other files' texts where the vocabulary has no file separator
REPO = "myproject"  # llama-server's repository name and file name for the repo-level pattern
FILE = "filename"


def tokens(model, prefix: str, suffix: str) -> list[int]:
    """[BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle>. Both texts are literal: "<|fim_middle|>" in
    the code being edited is those characters, never the token. A model without FIM tokens is an error (an
    ordinary completion of the prefix would ignore the suffix, an answer to another question)."""
    return infill(model, prefix, suffix, repo=False)[0]


def infill(model, prefix: str, suffix: str, middle: str = "", extra: Sequence[tuple[str, str]] = (),
           budget: int | None = None, repo: bool = True) -> tuple[list[int], bool]:
    """llama-server's /infill prompt and whether it had to be cut to `budget` tokens.

    Other files' text (`extra`: (file name, text) pairs) comes first: in the repo-level pattern where the
    vocabulary has its tokens (Qwen2.5-Coder: <|repo_name|> myproject, <|file_sep|> and a name before each file and
    before the frame; `repo`), after a "--- snippet ---" line otherwise. `middle` (llama-server's `prompt`: what
    the cursor's line holds before it) follows the prefix. Over the budget, other files' text goes first (its end,
    nearest the frame, kept), then the prefix's start and the suffix's end, three to one as llama-server cuts them."""
    ids = model.fim_ids
    if ids is None:
        raise EdgespecError(f"{os.path.basename(model.path)} has no fill-in-the-middle tokens, so it cannot take a "
                            f"suffix; use a model trained for it ({FIM_MODELS})")
    pre, suf, mid = ids

    def text(s: str) -> list[int]:
        return model.tokenize(s, add_special=False, parse_special=False)

    rep, sep = model.fim_repo_ids if repo else (None, None)
    context = [rep, *text(REPO + "\n")] if rep is not None else []
    for name, body in extra:
        context += [sep, *text((name or "tmp") + "\n")] if sep is not None else text(SNIPPET)
        context += text(body)
    if sep is not None:
        context += [sep, *text(FILE + "\n")]
    head = [model.bos] if model.add_bos else []
    p, m, s = text(prefix), text(middle), text(suffix)
    frame = len(head) + 3 + len(m)
    cut = False
    if budget is not None:
        room = budget - frame
        if room < 0:
            raise ContextOverflowError(f"the text typed before the cursor is {len(m)} tokens, more than the context "
                                       f"holds beside the answer ({budget - len(head) - 3})")
        if len(p) + len(s) > room:
            s_take = min(len(s), max(room // 4, room - len(p)))
            p, s, cut = p[len(p) - (room - s_take):] if room - s_take else [], s[:s_take], True
        keep = max(0, budget - frame - len(p) - len(s))
        if len(context) > keep:
            context, cut = context[len(context) - keep:] if keep else [], True
    return [*head, *context, pre, *p, *m, suf, *s, mid], cut
