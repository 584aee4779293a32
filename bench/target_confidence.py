"""Whether the target's confidence in the token it just gave (free: that row's logits are computed anyway) tells,
before the draft model is asked, if the draft's next token will pass, beside the draft's own confidence (which
costs the draft step). Greedy: each prompt's plain continuation, then one batched decode of prompt + continuation
per model with every continuation row's logits (a batched row differs from a step's by the kernels' rounding: a
statistic, not an identity).

    .venv/bin/python bench/target_confidence.py --config memory --workload bench/heldout.jsonl --limit 4
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import edgespec
from edgespec import workloads
from edgespec.backend.contexts import Context

from pairs import add_model_args, add_prompt_args, pair_of  # noqa: E402


def _top(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    return p.max(axis=-1), p.argmax(axis=-1)


def _auc(score: np.ndarray, y: np.ndarray) -> float:
    """The chance a passing position scores above a failing one (ties at random)."""
    pos, neg = y.sum(), len(y) - y.sum()
    if not pos or not neg:
        return float("nan")
    order = np.argsort(score, kind="stable")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    for s in np.unique(score):  # average the ranks of ties
        m = score == s
        ranks[m] = ranks[m].mean()
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def measure(target: str, draft: str, items, max_tokens: int, threads: int) -> list[tuple[str, float, float, bool]]:
    """Per continuation position j >= 1: (category, the target's confidence in token j-1, the draft's in its own
    token j, whether the draft's token j is the target's)."""
    rows = []
    with edgespec.Engine.load(target, draft=draft, n_ctx=1024, n_threads=threads) as e:
        tctx, dctx = Context(e.target.model, n_ctx=1024, n_threads=threads), \
            Context(e.proposer.ctx.model, n_ctx=1024, n_threads=threads)
        for it in items:
            t0 = time.time()
            prompt = it.tokens(e)
            if len(prompt) + max_tokens > 1024:
                print(f"  {it.category}: a {len(prompt)}-token prompt does not fit 1024 tokens, left out",
                      file=sys.stderr)
                continue
            out = list(e.generate(prompt, max_tokens=max_tokens, speculative=False).tokens)
            seq, n = prompt + out, len(prompt)
            at = list(range(n - 1, len(seq) - 1))  # row i predicts seq[i + 1]
            tctx.clear()
            dctx.clear()
            (tp, _), (dp, da) = _top(tctx.decode(seq, at)), _top(dctx.decode(seq, at))
            rows += [(it.category, float(tp[j - 1]), float(dp[j]), bool(da[j] == seq[n + j]))
                     for j in range(1, len(out))]
            print(f"  {it.category}: {len(out)} tokens, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def report(rows) -> None:
    cat = np.array([r[0] for r in rows])
    t, d, y = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    y = y.astype(bool)
    print(f"{len(rows)} positions; the draft's token passes at {y.mean():.3f}")
    print(f"AUC for 'passes': the target's confidence in the token before {_auc(t, y):.3f}, the draft's own "
          f"confidence {_auc(d, y):.3f}, their product {_auc(t * d, y):.3f}")
    print("by the target's confidence in the token before: the draft's pass rate, and the share of positions where "
          "the draft's confidence is under 0.5 (where it would mostly refuse its token)")
    for lo, hi in ((0, .5), (.5, .8), (.8, .95), (.95, 1.01)):
        m = (t >= lo) & (t < hi)
        if m.any():
            print(f"  [{lo:.2f}, {min(hi, 1):.2f}{']' if hi > 1 else ')'}: n={m.sum():5d}  passes {y[m].mean():.2f}  "
                  f"draft under 0.5 {(d[m] < .5).mean():.2f}")
    print("within the draft's confidence bins, by the target's confidence before (>= 0.9 | < 0.9): pass rates")
    for lo, hi in ((0, .3), (.3, .6), (.6, .9), (.9, 1.01)):
        m = (d >= lo) & (d < hi)
        if m.sum() >= 20:
            a, b = m & (t >= .9), m & (t < .9)
            print(f"  draft [{lo:.1f}, {min(hi, 1):.1f}{']' if hi > 1 else ')'}: n={m.sum():5d}  "
                  f"passes {y[m].mean():.2f}"
                  f"  ({y[a].mean() if a.any() else float('nan'):.2f}, n={a.sum()} | "
                  f"{y[b].mean() if b.any() else float('nan'):.2f}, n={b.sum()})")
    print("by category: positions, pass rate, mean confidences (target before, draft), AUC of the target's within it")
    for c in dict.fromkeys(cat):
        m = cat == c
        print(f"  {c:14s} n={m.sum():4d}  passes {y[m].mean():.2f}  target {t[m].mean():.2f}  draft {d[m].mean():.2f}"
              f"  AUC {_auc(t[m], y[m]):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_args(ap)
    add_prompt_args(ap)
    ap.add_argument("--workload", help="a JSONL of prompts (default: the built-in workload)")
    a = ap.parse_args()
    target, draft = (str(x) for x in pair_of(a))
    items = workloads.read_jsonl(a.workload) if a.workload else workloads.builtin()
    report(measure(target, draft, workloads.select(items, a.category, a.limit, a.skip), a.max_tokens, a.threads))


if __name__ == "__main__":
    main()
