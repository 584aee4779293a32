"""Drafting strategies against plain decoding, interleaved prompt by prompt on one loaded target.

    .venv/bin/python bench/strategies.py --config memory --limit 3
    .venv/bin/python bench/strategies.py --config compute --modes plain,lookup,hybrid,draft

Modes: plain; draft:K (draft model, exactly K per round); draft (adaptive K); draft-pmin (adaptive, stop on draft
confidence < --p-min); lookup (prompt lookup, adaptive); lookup:K; hybrid (lookup then draft, adaptive); hybrid:K.
`--sweep` adds draft:K for K in 1,2,3,4,6,8,12,16. Also prints the measured verify-cost curve T_v(m), m = 1..16.
Greedy, 2 threads; ms/token is sum(time)/sum(tokens) per mode; every mode's output is checked against plain.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from edgespec.backend import Context, Model
from edgespec.engine import Engine
from edgespec.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer

sys.path.insert(0, str(Path(__file__).parent))
from run import load_work, models_for  # noqa: E402

SWEEP = (1, 2, 3, 4, 6, 8, 12, 16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["memory", "compute"], default="memory")
    ap.add_argument("--models", default=str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--modes", default="plain,draft,lookup,hybrid")
    ap.add_argument("--sweep", action="store_true", help="add draft:K for K in " + ",".join(map(str, SWEEP)))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=16, help="cap for the adaptive modes")
    ap.add_argument("--p-min", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="only the first N prompts of each category")
    ap.add_argument("--json")
    args = ap.parse_args()

    target_path, draft_path = models_for(args.config, Path(args.models))
    modes = args.modes.split(",") + ([f"draft:{k}" for k in SWEEP] if args.sweep else [])
    work = load_work(args.limit)

    target = Model(target_path)
    dctx = Context(Model(draft_path), 2048, args.threads)
    draft = DraftModelProposer(dctx, target.n_vocab)
    draft_pmin = DraftModelProposer(dctx, target.n_vocab, p_min=args.p_min)
    lookup = PromptLookupProposer()
    proposers = {"draft": draft, "draft-pmin": draft_pmin, "lookup": lookup, "lookup1": PromptLookupProposer(n_min=1),
                 "lookup2": PromptLookupProposer(n_min=2),
                 "hybrid": HybridProposer(DraftModelProposer(dctx, target.n_vocab))}  # learns apart from "draft"
    engine = Engine(Context(target, 2048, args.threads), draft, args.draft_max, adaptive=True)
    warm = engine.tokenize("Hello")
    for m in modes:
        run_mode(engine, proposers, m, warm, 8)
    curve = engine.calibrate(range(1, 17))
    print("verify cost T_v(m) / T_v(1): " + "  ".join(f"{m}:{t / curve[1]:.2f}" for m, t in curve.items()))

    totals = defaultdict(lambda: defaultdict(float))  # (category, mode) -> sums
    t0 = time.time()
    for i, w in enumerate(work):
        tokens = engine.tokenize(w["prompt"], chat_format=True)
        order = modes[i % len(modes):] + modes[: i % len(modes)]
        results = {m: run_mode(engine, proposers, m, tokens, args.max_tokens) for m in order}
        ref = results["plain"].tokens
        line = []
        for m, r in results.items():
            for key in (w["category"], "overall"):
                t = totals[(key, m)]
                t["s"] += r.stats.generation_s
                t["n"] += r.stats.n_tokens
                t["drafted"] += r.stats.n_drafted
                t["accepted"] += r.stats.n_accepted
                t["rounds"] += r.stats.n_rounds
                t["fallback"] += r.stats.fallback_rounds
                t["same"] += r.tokens == ref
                t["prompts"] += 1
            line.append(f"{m} {r.stats.ms_per_token:.0f}")
        print(f"[{i + 1}/{len(work)} {time.time() - t0:5.0f}s] {w['category']:<10} " + ", ".join(line), file=sys.stderr)

    cats = list(dict.fromkeys(w["category"] for w in work)) + ["overall"]
    print(f"\n{target_path.name} + {draft_path.name}, {args.threads} threads, greedy, {args.max_tokens} tokens x "
          f"{len(work)} prompts; speedup over plain (ms/token), [acceptance], same-as-plain count")
    print(f"{'mode':<12}" + "".join(f"{c:>18}" for c in cats))
    rows = {}
    for m in modes:
        cells = []
        for c in cats:
            t, p = totals[(c, m)], totals[(c, "plain")]
            speed = (p["s"] / p["n"]) / (t["s"] / t["n"])
            acc = t["accepted"] / t["drafted"] if t["drafted"] else 0.0
            rows.setdefault(m, {})[c] = {"speedup": speed, "ms_per_token": 1000 * t["s"] / t["n"], "acceptance": acc,
                                         "same": int(t["same"]), "prompts": int(t["prompts"]),
                                         "fallback_rounds": int(t["fallback"]), "rounds": int(t["rounds"])}
            cells.append(f"{speed:6.2f}x [{acc:.2f}] {int(t['same'])}/{int(t['prompts'])}")
        print(f"{m:<12}" + "".join(f"{x:>18}" for x in cells))
    fixed = [m for m in modes if m.startswith("draft:")]
    if fixed and "draft" in modes:
        print("\nbest fixed K per category vs adaptive (draft model):")
        for c in cats:
            best = max(fixed, key=lambda m: rows[m][c]["speedup"])
            print(f"  {c:<11} best {best} {rows[best][c]['speedup']:.2f}x, adaptive {rows['draft'][c]['speedup']:.2f}x "
                  f"({rows['draft'][c]['speedup'] / rows[best][c]['speedup']:.1%} of best)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "verify_curve": curve, "rows": rows}, indent=1))


def run_mode(engine: Engine, proposers: dict, mode: str, tokens: list[int], max_tokens: int):
    name, _, k = mode.partition(":")
    if name == "plain":
        return engine.generate(tokens, max_tokens=max_tokens, speculative=False)
    if k:
        return engine.generate(tokens, max_tokens=max_tokens, proposer=proposers[name], draft_max=int(k),
                               adaptive=False)
    return engine.generate(tokens, max_tokens=max_tokens, proposer=proposers[name])  # adaptive, capped by the engine


if __name__ == "__main__":
    main()
