"""What Python's sampling and acceptance cost per verify round, at the Qwen vocabulary (151,936 tokens).

    .venv/bin/python bench/sampling_cost.py                 # real logits from the 0.5B draft if present,
                                                            # else synthetic
    .venv/bin/python bench/sampling_cost.py --against HEAD  # and REV's edgespec/sampling.py, timed in turn with
                                                            # this tree's in the same run: before / after

Per round of R rows (R-1 drafted tokens and the bonus row): greedy (argmax + accept) and sampled (temperature 0.8,
top-k 40, top-p 0.95, min-p 0.05, and once without top-k: probabilities of every row, then rejection sampling
against a deterministic draft and against a sampled one; the engine computes rows as verification reaches them,
so a rejection at position 1 or 3 reads about that many); per drafted token, sampling: its q, the token drawn
from it and the draft's confidence (q's top), greedy: the confidence (its top probability), which the confidence
stop reads. Prints milliseconds per round and per
row (the median over batches: this machine's timings wander between runs by up to 2x); numbers, not assertions.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from edgespec import sampling
from edgespec.verify import verify_greedy, verify_sampled

VOCAB = 151936
DRAFT = Path.home() / ".cache" / "edgespec-bench" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


PROSE = ("The committee met on Tuesday to discuss the budget for the coming year. After a long debate about the "
         "library's opening hours, the members agreed to keep the branch open on Sundays, but only in winter. ")
CODE = ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
        "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n")


def real_logits() -> np.ndarray | None:
    """The 0.5B draft's logits at every position of a paragraph of prose, then a function: a verify's rows are the
    last ones (code, mostly certain), a drafted token's row any of them (prose, mostly not)."""
    if not DRAFT.exists():
        return None
    from edgespec.backend import Context, Model

    ctx = Context(Model(str(DRAFT)), 512, 2)
    toks = ctx.model.tokenize(PROSE + CODE)
    return ctx.decode(toks, range(len(toks)))


def sampling_at(rev: str):
    """edgespec/sampling.py as it was at git revision rev, as a module of its own (the verify code is this tree's)."""
    text = subprocess.run(["git", "show", f"{rev}:edgespec/sampling.py"], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parent).stdout.replace("from .errors", "from edgespec.errors")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sampling_before.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("sampling_before", path)
        module = sys.modules["sampling_before"] = importlib.util.module_from_spec(spec)  # (dataclasses look it up)
        spec.loader.exec_module(module)
    return module


def cases(m, logits: np.ndarray, every: np.ndarray) -> dict:
    """What is timed, with the sampling module m (probabilities, Rows, and top_probability where it has one): a
    verify of the rows `logits`, a drafted token's row taken in turn from `every`."""
    cfg, rng = m.SamplingConfig(0.8, 40, 0.95, 0.05), np.random.default_rng(1)
    no_k = m.SamplingConfig(0.8, 0, 0.95, 0.05)  # (top-k 0: off, as with the min-p recipe)
    turn = itertools.count()

    def row() -> np.ndarray:
        return every[next(turn) % len(every)]

    draft = [int(t) for t in logits[:-1].argmax(axis=1)]  # a draft the target mostly accepts: every row is reached
    noisy = logits[:-1] + 0.3 * np.random.default_rng(2).standard_normal(logits[:-1].shape).astype(np.float32)
    q = list(m.probabilities(noisy, cfg))
    qd = [m.sample(x, rng) for x in q]

    def rejected_at(i: int) -> list[int]:
        return draft[:i - 1] + [(draft[i - 1] + 1) % logits.shape[1]] + draft[i:]

    early, first = rejected_at(3), rejected_at(1)
    top = getattr(m, "top_probability", None) or (lambda x: float(1.0 / np.exp(x - x.max()).sum()))  # (before it)

    def drafted(x: np.ndarray):  # (before sampling.draw: the three as the draft model computed them)
        if hasattr(m, "draw"):
            return m.draw(x, cfg, rng)
        q = m.probabilities(x, cfg)
        return q, m.sample(q, rng), float(q.max())

    return {
        "greedy: argmax + accept": lambda: verify_greedy(logits.argmax(axis=1), draft),
        "sampled: probabilities of every row": lambda: m.probabilities(logits, cfg),
        "sampled: accept a deterministic draft": lambda: verify_sampled(m.Rows(logits, cfg), None, draft, rng),
        "sampled: accept a sampled draft (q)": lambda: verify_sampled(m.Rows(logits, cfg), q, qd, rng),
        "sampled: a rejection at position 3": lambda: verify_sampled(m.Rows(logits, cfg), None, early, rng),
        "sampled: a rejection at position 1": lambda: verify_sampled(m.Rows(logits, cfg), None, first, rng),
        "sampled, top-k off: accept a deterministic draft": lambda: verify_sampled(m.Rows(logits, no_k), None, draft,
                                                                                   rng),
        "one sampled drafted token (q, token, confidence)": lambda: drafted(row()),
        "one greedy draft row's confidence": lambda: top(row()),
    }


def timed(fs: list, n: int, batches: int = 15) -> list[float]:
    """Seconds per call of each f: the median over batches of n // batches calls, the fs taking turns batch by
    batch (so a slower spell of the machine falls on each alike)."""
    for f in fs:
        f()
    each, times = max(1, n // batches), [[] for _ in fs]
    for _ in range(batches):
        for f, t in zip(fs, times):
            t0 = time.perf_counter()
            for _ in range(each):
                f()
            t.append((time.perf_counter() - t0) / each)
    return [float(np.median(t)) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--against", metavar="REV", help="also time edgespec/sampling.py as at this git revision")
    args = ap.parse_args()
    every = real_logits()
    source = f"real logits ({DRAFT.name}, {len(every) if every is not None else 0} positions)"
    if every is None:
        rng = np.random.default_rng(0)
        every = (rng.standard_normal((args.rows, VOCAB)) * 2.5).astype(np.float32)
        every[:, rng.integers(0, VOCAB, 64)] += 12
        source = "synthetic logits"
    logits = every[-args.rows:]
    modules = [sampling] + ([sampling_at(args.against)] if args.against else [])
    runs = [cases(m, logits, every) for m in modules]
    print(f"{args.rows} rows x {logits.shape[1]} vocabulary, {source}; {args.repeats} repeats"
          + (f"; before: edgespec/sampling.py at {args.against}" if args.against else ""), file=sys.stderr)
    for name in runs[0]:
        s = timed([run[name] for run in runs], args.repeats)
        rows = 1 if name.startswith("one") else args.rows
        line = f"{name:<50} {1000 * s[0]:7.3f} ms per {'row' if rows == 1 else 'round'}  " \
               f"({1000 * s[0] / rows:.3f} ms per row)"
        if len(s) > 1:
            line += f"  before {1000 * s[1]:7.3f} ms: {s[1] / s[0]:.2f}x"
        print(line)


if __name__ == "__main__":
    main()
