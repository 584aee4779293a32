"""Can this draft speak for this target? llama.cpp's rule (common/speculative.cpp), stated over plain data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .errors import PairError

MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5  # ids below 5 are special tokens that vendors renumber freely
VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}


@dataclass(frozen=True)
class VocabInfo:
    name: str
    vocab_type: int
    n_vocab: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int
    text: Callable[[int], bytes]

    @classmethod
    def of(cls, model) -> "VocabInfo":
        return cls(model.path, model.vocab_type, model.n_vocab, model.add_bos, model.bos, model.add_eos,
                   model.eos, model.token_text)


def pair_problem(target: VocabInfo, draft: VocabInfo) -> str | None:
    """Why the two cannot pair, in one line, or None when they can."""
    if target.vocab_type != draft.vocab_type:
        return (f"vocab types differ: target {VOCAB_TYPES.get(target.vocab_type, target.vocab_type)}, "
                f"draft {VOCAB_TYPES.get(draft.vocab_type, draft.vocab_type)}")
    for what, t, d in (("add_bos", target.add_bos, draft.add_bos), ("bos id", target.bos, draft.bos),
                       ("add_eos", target.add_eos, draft.add_eos), ("eos id", target.eos, draft.eos)):
        if t != d:
            return f"BOS/EOS handling differs: {what} is {t} in the target, {d} in the draft"
    if abs(target.n_vocab - draft.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        return (f"vocab sizes differ by more than {MAX_VOCAB_SIZE_DIFFERENCE}: "
                f"target {target.n_vocab}, draft {draft.n_vocab}")
    for i in range(FIRST_CHECKED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        t, d = target.text(i), draft.text(i)
        if t != d:
            return f"token {i} differs: target {t.decode('utf-8', 'replace')!r}, draft {d.decode('utf-8', 'replace')!r}"
    return None


def check_pair(target: VocabInfo, draft: VocabInfo) -> None:
    problem = pair_problem(target, draft)
    if problem:
        raise PairError(f"draft {draft.name} cannot draft for target {target.name}: {problem}")
