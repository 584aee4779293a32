"""The prompts a bench runs: the built-in workload (workloads.json: 13 categories of 6, code and general language;
bench/make_workloads.py), a user's JSONL of prompts, chats or gaps to fill, and the selection by category."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .errors import InvalidArgument

if TYPE_CHECKING:
    from .engine import Engine

WORKLOADS = Path(__file__).with_name("workloads.json")


@dataclass(frozen=True)
class Item:
    """One prompt of a workload: plain text (a user message), a chat's messages ending with the user's turn, or
    the text before and after a gap to fill (suffix: an editor's completion at the cursor, raw text framed with
    the model's FIM tokens)."""

    category: str
    prompt: str | None = None
    messages: tuple | None = None
    suffix: str | None = None

    def tokens(self, engine: Engine) -> list[int]:
        if self.messages is not None:
            return engine.tokenize_chat([dict(m) for m in self.messages])
        if self.suffix is not None:
            return engine.tokenize(self.prompt, suffix=self.suffix)
        return engine.tokenize(self.prompt, chat_format=True)


def _item(obj, where: str) -> Item:
    if not isinstance(obj, dict):
        raise InvalidArgument(f"{where}: expected a JSON object with \"prompt\" or \"messages\"")
    category = obj.get("category", "prompts")
    if not isinstance(category, str) or not category:
        raise InvalidArgument(f"{where}: \"category\" must be a non-empty string")
    suffix = obj.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise InvalidArgument(f"{where}: \"suffix\" must be text (the text after the gap to fill)")
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return Item(category, prompt=obj["prompt"], suffix=suffix)
    if suffix is not None:
        raise InvalidArgument(f"{where}: a \"suffix\" goes with a \"prompt\", the text before the gap")
    messages = obj.get("messages")
    if (isinstance(messages, list) and messages and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                        and m.get("role") in ("system", "user", "assistant")
                                                        for m in messages)):
        if messages[-1]["role"] != "user":
            raise InvalidArgument(f"{where}: the last message must be the user's (the model answers it)")
        return Item(category, messages=tuple(tuple(sorted((k, m[k]) for k in ("role", "content"))) for m in messages))
    raise InvalidArgument(f"{where}: needs \"prompt\" (non-empty text) or \"messages\" (a list of {{\"role\": "
                          "system|user|assistant, \"content\": text}})")


def builtin() -> list[Item]:
    """The built-in workload: 13 categories of 6 prompts, code and general language (see bench/make_workloads.py)."""
    return [_item(o, f"{WORKLOADS.name} item {i + 1}") for i, o in enumerate(json.loads(WORKLOADS.read_text()))]


def read_jsonl(path: str | os.PathLike) -> list[Item]:
    """The user's workload: one JSON object per line, {"prompt": ...}, {"messages": [...]} or {"prompt": BEFORE,
    "suffix": AFTER} (fill in the middle), optional "category"."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"cannot read the workload {path}: {e.strerror if isinstance(e, OSError) else e}") \
            from None
    items = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise InvalidArgument(f"{path} line {n}: not JSON ({e})") from None
            items.append(_item(obj, f"{path} line {n}"))
    if not items:
        raise InvalidArgument(f"the workload {path} holds no prompts (one JSON object per line)")
    return items


def select(items: Sequence[Item], categories: Sequence[str] | None = None, limit: int | None = None,
           skip: int = 0) -> list[Item]:
    """The items of the given categories (all: None), at most `limit` of each after leaving out the first `skip`,
    categories interleaved."""
    by_cat: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        by_cat[it.category].append(it)
    if categories:
        unknown = [c for c in categories if c not in by_cat]
        if unknown:
            raise InvalidArgument(f"no category {', '.join(unknown)} in the workload (it has: {', '.join(by_cat)})")
        by_cat = {c: by_cat[c] for c in categories}
    by_cat = {c: v[skip:] for c, v in by_cat.items() if v[skip:]}
    if not by_cat:
        raise InvalidArgument(f"--skip {skip} leaves no prompt in any category")
    n = max(len(v) for v in by_cat.values()) if limit is None else limit
    return [v[i] for i in range(n) for v in by_cat.values() if i < len(v)]
