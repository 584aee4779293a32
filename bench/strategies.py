"""Drafting strategies against plain decoding on one loaded target: a thin wrapper of `edgespec bench`.

    .venv/bin/python bench/strategies.py --config memory --limit 3
    .venv/bin/python bench/strategies.py --config compute --modes plain,lookup,hybrid,draft --sweep

Modes as `edgespec bench --modes` takes them: plain; draft, lookup, hybrid (adaptive); draft:K, lookup:K, hybrid:K
(exactly K per round). `--sweep` adds draft:K for K in 1,2,3,4,6,8,12,16. The table ends with the adaptive draft
model against its best fixed K and the hybrid against the better of its parts, per category. (The older modes
draft-pmin, lookup1 and lookup2 are gone; their results stay in results/strategies-*.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pairs import add_model_args, bench  # noqa: E402

SWEEP = (1, 2, 3, 4, 6, 8, 12, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--modes", default="plain,draft,lookup,hybrid")
    ap.add_argument("--sweep", action="store_true", help="add draft:K for K in " + ",".join(map(str, SWEEP)))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=16, help="cap for the adaptive modes")
    ap.add_argument("--limit", type=int, help="only the first N prompts of each category")
    ap.add_argument("--json")
    args = ap.parse_args()
    modes = args.modes.split(",") + ([f"draft:{k}" for k in SWEEP] if args.sweep else [])
    bench(args, list(dict.fromkeys(modes)))


if __name__ == "__main__":
    main()
