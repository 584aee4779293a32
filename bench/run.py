"""Plain vs one speculative configuration over the built-in workload: a thin wrapper of `edgespec bench`.

    .venv/bin/python bench/run.py --config memory                  # F16 target, 0.5B Q4_K_M draft, adaptive
    .venv/bin/python bench/run.py --config compute --fixed --draft-max 4
    .venv/bin/python bench/run.py --target T.gguf --draft D.gguf --lookup

It runs `edgespec bench --modes plain,MODE` on the pair (MODE: draft, hybrid with --lookup, or draft:K / hybrid:K
with --fixed) and prints what that command prints: per category the speedup over plain measured in the same run,
acceptance, phases, Python's share, TTFT; every greedy difference from plain gets the near-tie check. The result
files under results/ from before it became a wrapper keep their older format.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pairs import add_model_args, bench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--fixed", action="store_true", help="draft exactly --draft-max every round (else adaptive)")
    ap.add_argument("--lookup", action="store_true", help="prompt lookup first, the draft model for the rest")
    ap.add_argument("--limit", type=int, help="only the first N prompts of each category")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    name = "hybrid" if args.lookup else "draft"
    bench(args, ["plain", f"{name}:{args.draft_max}" if args.fixed else name])


if __name__ == "__main__":
    main()
