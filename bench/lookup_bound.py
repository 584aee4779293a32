"""How fast could prompt lookup be on these texts, on this machine? An upper bound, from an oracle.

    .venv/bin/python bench/lookup_bound.py --config compute --max-tokens 64

Decodes each prompt of the workload set plainly, measures the target's verify cost T_v(m) (median of 5 timings per
m), then replays each text with an oracle that knows the answer: every round it drafts exactly the tokens that will
pass (the longest run that an n-gram match in the text so far would have proposed, any earlier occurrence), or
nothing when even a fully accepted draft would not beat a plain step. No real policy can do better with the same
matches and the same verify costs; the gap between this and `bench/strategies.py` is what guessing costs.
Numbers, not assertions: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from edgespec.backend import Context, Model
from edgespec.engine import Engine

sys.path.insert(0, str(Path(__file__).parent))
from pairs import load_work, models_for  # noqa: E402


def oracle_time(prompt: list[int], out: list[int], t_verify, n_min: int, n_max: int, k_max: int) -> float:
    """Seconds the oracle needs for `out` after `prompt`; t_verify(m) is the cost of a verify of m rows."""
    seq, pos, total = list(prompt), 0, 0.0
    while pos < len(out):
        best = 0
        for n in range(n_min, n_max + 1):
            suffix = seq[-n:]
            for end in range(n, len(seq)):
                if seq[end - n:end] == suffix:
                    m = 0
                    while m < k_max and pos + m < len(out) - 1 and end + m < len(seq) and seq[end + m] == out[pos + m]:
                        m += 1
                    best = max(best, m)
        k = best if best and t_verify(best + 1) / (best + 1) < t_verify(1) else 0
        total += t_verify(k + 1)
        step = min(k + 1, len(out) - pos)
        seq += out[pos:pos + step]
        pos += step
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["memory", "compute"], default="compute")
    ap.add_argument("--models", default=str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="only the first N prompts of each category")
    args = ap.parse_args()

    target_path, _ = models_for(args.config, Path(args.models))
    engine = Engine(Context(Model(target_path), 2048, args.threads))
    engine.generate(engine.tokenize("Hello"), max_tokens=4, speculative=False)
    sizes = range(1, args.draft_max + 2)
    curves = [engine.calibrate(sizes) for _ in range(5)]
    curve = {m: statistics.median(c[m] for c in curves) for m in sizes}
    print("verify cost T_v(m) / T_v(1): " + "  ".join(f"{m}:{t / curve[1]:.2f}" for m, t in curve.items()))

    work = load_work(args.limit)
    bounds = {"n>=2": (2, 4), "n>=1": (1, 4)}
    totals = defaultdict(lambda: defaultdict(float))
    for i, w in enumerate(work):
        prompt = engine.tokenize(w["prompt"], chat_format=True)
        out = engine.generate(prompt, max_tokens=args.max_tokens, speculative=False).tokens
        for name, (lo, hi) in bounds.items():
            t = oracle_time(prompt, out, curve.__getitem__, lo, hi, args.draft_max)
            for c in (w["category"], "overall"):
                totals[c][name] += t
                totals[c]["plain"] += curve[1] * len(out) if name == "n>=2" else 0.0
        print(f"[{i + 1}/{len(work)}] {w['category']}", file=sys.stderr)

    cats = list(dict.fromkeys(w["category"] for w in work)) + ["overall"]
    print(f"\n{target_path.name}, {args.max_tokens} tokens x {len(work)} prompts: the most prompt lookup could reach "
          "(plain time / oracle time)")
    print(f"{'oracle':<10}" + "".join(f"{c:>12}" for c in cats))
    for name in bounds:
        print(f"{name:<10}" + "".join(f"{totals[c]['plain'] / totals[c][name]:>11.2f}x" for c in cats))


if __name__ == "__main__":
    main()
