"""Making a replay's recording (replay.py says what it holds and why): a pair's greedy texts on a workload, the draft
model's prediction at each position of them, and what each model's decodes cost on this machine. Real models, real
timings: run it alone on the machine."""
from __future__ import annotations

import os
import statistics
import time
from typing import Callable, Sequence

import numpy as np

from .backend import Context, Model
from .workloads import Item
from .engine import DEFAULT_CTX, Engine
from .errors import InvalidArgument
from .pairing import VocabInfo, check_pair
from .replay import FORMAT, VERSION

TIMED_SIZES = (*range(1, 18), 24, 32, 48, 64, 128, 256, 512)  # decode sizes timed for the cost curves
VERIFY_ROWS = 17  # ... and up to this many, with every row's logits (a verify of up to 16 drafts)


def item_messages(item: Item) -> list[tuple[str, str]]:
    """The chat an item of a workload stands for, as Item.tokens() renders it."""
    if item.suffix is not None:
        raise InvalidArgument("a replay records chats; a fill-in-the-middle item (\"suffix\") cannot be recorded")
    if item.messages is not None:
        return [(dict(m)["role"], dict(m)["content"]) for m in item.messages]
    return [("user", item.prompt)]


def greedy_text(ctx: Context, prompt: list[int], max_tokens: int) -> list[int]:
    """The prompt and the target's plain greedy continuation, as the engine's plain rounds decode it (the prompt
    but its last token in one batch, then a token a decode): up to max_tokens, or through an end-of-generation
    token."""
    ctx.clear()
    ctx.decode(prompt[:-1])
    logits = ctx.decode(prompt[-1:], [0])[0]
    text = list(prompt)
    while len(text) - len(prompt) < max_tokens:
        tok = int(np.argmax(logits))
        text.append(tok)
        if ctx.model.is_eog(tok) or len(text) - len(prompt) == max_tokens:
            break
        logits = ctx.decode([tok], [0])[0]
    return text


def predictions(ctx: Context, text: list[int], n_prompt: int) -> tuple[list[int], list[float]]:
    """The draft's greedy next token after text[:p + 1] for p from n_prompt - 1 to len(text) - 2, each from a
    one-token decode at the end of its cache, as drafting computes its rows, and its probability there (the
    draft's confidence, which a confidence rule such as --draft-p-min reads)."""
    ctx.clear()
    ctx.decode(text[:n_prompt - 1])
    tokens, top = [], []
    for tok in text[n_prompt - 1:-1]:
        row = ctx.decode([tok], [0])[0].astype(np.float64)
        best = int(np.argmax(row))
        tokens.append(best)
        top.append(round(float(1.0 / np.exp(row - row[best]).sum()), 4))
    return tokens, top


def predict_again(data: dict, draft_path: str, n_threads: int | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> dict:
    """A recording's draft predictions made again, by this draft model (another draft against the same target's
    texts, or the confidences of a recording made without them)."""
    dm = Model(draft_path)
    ctx = Context(dm, DEFAULT_CTX, n_threads)
    texts = []
    for i, t in enumerate(data["texts"]):
        tokens, top = predictions(ctx, t["tokens"], t["n_prompt"])
        texts.append({**t, "draft": tokens, "draft_p": top})
        if progress is not None:
            progress(i + 1, len(data["texts"]), t["category"])
    ctx.close()
    dm.close()
    return {**data, "draft": os.path.basename(draft_path), "texts": texts}


def time_decodes(ctx: Context, context: list[int], sizes: Sequence[int] = TIMED_SIZES, repeats: int = 5
                 ) -> dict[str, dict[int, float]]:
    """Median seconds of a decode of m tokens at the end of `context`, asking for the last row's logits ("one_row")
    and, up to VERIFY_ROWS tokens, for every row's ("all_rows"); sizes and kinds interleaved."""
    ctx.clear()
    ctx.decode(context)
    held = len(ctx.tokens)
    sizes = [m for m in sizes if m <= ctx.room]
    filler = context[-1:]
    ctx.decode(filler, [0])  # the first call of a shape allocates
    ctx.truncate(held)
    shapes = [(m, kind) for m in sizes for kind in ("one_row", "all_rows") if kind == "one_row" or 1 < m <= VERIFY_ROWS]
    seconds: dict[tuple[int, str], list[float]] = {s: [] for s in shapes}
    for _ in range(repeats):
        ctx.decode(filler, [0])  # after the largest decode the first small one is slower: not a decode's cost
        ctx.truncate(held)
        for m, kind in shapes:
            t0 = time.perf_counter()
            ctx.decode(filler * m, [m - 1] if kind == "one_row" else range(m))
            seconds[(m, kind)].append(time.perf_counter() - t0)
            ctx.truncate(held)
    out: dict[str, dict[int, float]] = {"one_row": {}, "all_rows": {}}
    for (m, kind), ts in seconds.items():
        out[kind][m] = statistics.median(ts)
    out["all_rows"][1] = out["one_row"][1]  # the same decode
    return out


def record(target_path: str, draft_path: str, items: Sequence[Item], max_tokens: int, n_threads: int | None = None,
           n_ctx: int = DEFAULT_CTX, progress: Callable[[int, int, str], None] | None = None,
           repeats: int = 5) -> dict:
    """Record what a replay needs of a pair on these items (see the module's docstring). Timed first, so run it
    alone on the machine for the costs to be this machine's."""
    for it in items:
        item_messages(it)  # each can be recorded, before anything is timed
    tm, dm = Model(target_path), Model(draft_path)
    check_pair(VocabInfo.of(tm), VocabInfo.of(dm))
    tctx, dctx = Context(tm, n_ctx, n_threads), Context(dm, n_ctx, n_threads)
    engine = Engine(tctx)  # for the chat template
    prompts = [it.tokens(engine) for it in items]
    fits = [len(p) + max_tokens <= n_ctx for p in prompts]
    costs = {"target": time_decodes(tctx, _context(prompts), repeats=repeats),
             "draft": time_decodes(dctx, _context(prompts), repeats=repeats)}
    texts = []
    for i, (it, prompt, ok) in enumerate(zip(items, prompts, fits)):
        if not ok:
            continue
        text = greedy_text(tctx, prompt, max_tokens)
        drafted, top = predictions(dctx, text, len(prompt))
        texts.append({"category": it.category, "messages": item_messages(it), "n_prompt": len(prompt),
                      "tokens": text, "draft": drafted, "draft_p": top})
        if progress is not None:
            progress(i + 1, len(items), f"{it.category}: {len(text) - len(prompt)} tokens")
    filler = next(t for t in range(100, tm.n_vocab) if not tm.is_eog(t))
    vocab = {"n_vocab": tm.n_vocab, "eog": tm.eog_ids, "bos": tm.bos, "filler": filler,
             "control": sorted(tm.control_ids)}
    out = {"format": FORMAT, "version": VERSION, "target": os.path.basename(target_path),
           "draft": os.path.basename(draft_path), "max_tokens": max_tokens, "threads": tctx.n_threads,
           "costs": costs, "vocab": vocab, "texts": texts}
    for c in (tctx, dctx):
        c.close()
    for m in (tm, dm):
        m.close()
    return out


def _context(prompts: Sequence[list[int]], n: int = 256) -> list[int]:
    """What the costs are timed after: the first n tokens of the longest prompt (a decode's cost grows a little with
    what the cache holds)."""
    longest = max(prompts, key=len)
    return longest[:n]


def retime(data: dict, target_path: str, draft_path: str, n_threads: int | None = None, repeats: int = 5) -> dict:
    """A recording's decode costs timed again on this machine (its texts kept): the costs of another day, other
    threads. Alone on the machine."""
    tm, dm = Model(target_path), Model(draft_path)
    context = _context([t["tokens"][:t["n_prompt"]] for t in data["texts"]])
    costs = {}
    for name, model in (("target", tm), ("draft", dm)):
        ctx = Context(model, DEFAULT_CTX, n_threads)
        costs[name] = time_decodes(ctx, context, repeats=repeats)
        ctx.close()
        model.close()
    return {**data, "costs": costs}
