"""What Python's sampling and acceptance cost per verify round, at the Qwen vocabulary (151,936 tokens).

    .venv/bin/python bench/sampling_cost.py            # real logits from the 0.5B draft if present, else synthetic

Per round of R rows (R-1 drafted tokens and the bonus row): greedy (argmax + accept) and sampled (temperature 0.8,
top-k 40, top-p 0.95, min-p 0.05: probabilities of every row, then rejection sampling against a deterministic
draft and against a sampled one; the engine computes a row when verification reaches it); per drafted token, the
draft's q when sampling and its confidence (top probability) when greedy, which the confidence stop reads. Prints
milliseconds per round and per row; numbers, not assertions.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from edgespec.proposers.draft_model import _top_probability
from edgespec.sampling import Rows, SamplingConfig, probabilities, sample
from edgespec.verify import verify_greedy, verify_sampled

VOCAB = 151936
DRAFT = Path.home() / ".cache" / "edgespec-bench" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def real_logits(rows: int) -> np.ndarray | None:
    if not DRAFT.exists():
        return None
    from edgespec.backend import Context, Model

    ctx = Context(Model(str(DRAFT)), 512, 2)
    toks = ctx.model.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
                              "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n")
    return ctx.decode(toks, range(len(toks) - rows, len(toks)))


def timed(f, n: int) -> float:
    f()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    logits = real_logits(args.rows)
    source = f"real logits ({DRAFT.name})"
    if logits is None:
        rng = np.random.default_rng(0)
        logits = (rng.standard_normal((args.rows, VOCAB)) * 2.5).astype(np.float32)
        logits[:, rng.integers(0, VOCAB, 64)] += 12
        source = "synthetic logits"
    cfg = SamplingConfig(0.8, 40, 0.95, 0.05)
    rng = np.random.default_rng(1)
    draft = [int(t) for t in logits[:-1].argmax(axis=1)]  # a draft the target mostly accepts: every row is reached
    q = list(probabilities(logits[:-1] + 0.3 * rng.standard_normal(logits[:-1].shape).astype(np.float32), cfg))
    qd = [sample(x, rng) for x in q]
    early = draft[:2] + [(draft[2] + 1) % logits.shape[1]] + draft[3:]  # the target rejects position 3
    cases = {
        "greedy: argmax + accept": lambda: verify_greedy(logits.argmax(axis=1), draft),
        "sampled: probabilities of every row": lambda: probabilities(logits, cfg),
        "sampled: accept a deterministic draft": lambda: verify_sampled(Rows(logits, cfg), None, draft, rng),
        "sampled: accept a sampled draft (q)": lambda: verify_sampled(Rows(logits, cfg), q, qd, rng),
        "sampled: a rejection at position 3": lambda: verify_sampled(Rows(logits, cfg), None, early, rng),
        "one draft row's q (per drafted token)": lambda: probabilities(logits[0], cfg),
        "one greedy draft row's confidence": lambda: _top_probability(logits[0]),
    }
    print(f"{args.rows} rows x {logits.shape[1]} vocabulary, {source}; {args.repeats} repeats", file=sys.stderr)
    for name, f in cases.items():
        s = timed(f, args.repeats)
        rows = 1 if name.startswith("one") else args.rows
        print(f"{name:<42} {1000 * s:7.3f} ms per {'row' if rows == 1 else 'round'}  "
              f"({1000 * s / rows:.3f} ms per row)")


if __name__ == "__main__":
    main()
