"""Plain vs speculative decoding over the workload set, interleaved prompt by prompt in one run.

    .venv/bin/python bench/run.py --config memory     # Qwen2.5-Coder-1.5B F16 target, 0.5B Q4_K_M draft
    .venv/bin/python bench/run.py --config compute    # the same with the Q4_K_M target
    .venv/bin/python bench/run.py --target T.gguf --draft D.gguf

Models come from ../shared/models/fetch-bench-models.sh (default folder: $EDGESPEC_BENCH_MODELS or
~/.cache/edgespec-bench); the F16 target is written there on first use with llama.cpp's quantize API.
Greedy, 2 threads. Prints per category and overall: speedup (plain ms/token over speculative ms/token, each
sum(time)/sum(tokens)), acceptance, mean accepted length, time per phase, and the share of round time spent outside
llama.cpp. Numbers, not assertions: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import edgespec
from edgespec import backend, benchmark
from edgespec.diagnostics import divergence
from edgespec.stats import PHASES

HERE = Path(__file__).parent
TARGET_Q4 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
TARGET_F16 = "qwen2.5-coder-1.5b-instruct-f16.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def models_for(config: str, folder: Path) -> tuple[Path, Path]:
    if not (folder / TARGET_Q4).exists() or not (folder / DRAFT).exists():
        sys.exit(f"models missing in {folder}: run ../shared/models/fetch-bench-models.sh {folder}")
    if config == "compute":
        return folder / TARGET_Q4, folder / DRAFT
    f16 = folder / TARGET_F16
    if not f16.exists():
        print(f"writing {f16} (F16 copy of the Q4_K_M target) ...", file=sys.stderr)
        backend.quantize(folder / TARGET_Q4, f16.with_suffix(".part"), "F16")
        os.replace(f16.with_suffix(".part"), f16)
    return f16, folder / DRAFT


def add_model_args(ap: argparse.ArgumentParser) -> None:
    """The options that pick the pair: --config (memory: F16 target; compute: Q4_K_M), or --target/--draft."""
    ap.add_argument("--config", choices=["memory", "compute"], default="memory")
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--models", default=os.environ.get("EDGESPEC_BENCH_MODELS")
                    or str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--threads", type=int, default=2)


def pair_of(args) -> tuple[Path, Path]:
    return (Path(args.target), Path(args.draft)) if args.target else models_for(args.config, Path(args.models))


def load_work(limit: int | None = None) -> list[dict]:
    """The workload set; with limit, the first `limit` prompts of each category, categories interleaved."""
    # the built-in workload of `edgespec bench`; these scripts send single prompts, so the multi-turn chats stay out
    work = [w for w in json.loads(benchmark.WORKLOADS.read_text()) if "prompt" in w]
    if not limit:
        return work
    by_cat = defaultdict(list)
    for w in work:
        by_cat[w["category"]].append(w)
    return [ws[i] for i in range(limit) for ws in by_cat.values() if i < len(ws)]


class Totals:
    def __init__(self) -> None:
        self.s = defaultdict(float)

    def add(self, plain, spec) -> None:
        s = self.s
        s["prompts"] += 1
        s["identical"] += plain.tokens == spec.tokens
        s["plain_s"] += plain.stats.generation_s
        s["plain_n"] += plain.stats.n_tokens
        s["spec_s"] += spec.stats.generation_s
        s["spec_n"] += spec.stats.n_tokens
        s["rounds"] += spec.stats.n_rounds
        s["drafted"] += spec.stats.n_drafted
        s["accepted"] += spec.stats.n_accepted
        s["llama_s"] += sum(r.llama_seconds for r in spec.stats.rounds)
        for p in PHASES:
            s[p] += spec.stats.phase_s[p]

    def row(self) -> dict:
        s = self.s
        plain_ms = 1000 * s["plain_s"] / s["plain_n"]
        spec_ms = 1000 * s["spec_s"] / s["spec_n"]
        return {
            "prompts": int(s["prompts"]), "identical": int(s["identical"]), "not_near_tie": int(s["unexplained"]),
            "plain_ms_per_token": plain_ms, "spec_ms_per_token": spec_ms, "speedup": plain_ms / spec_ms,
            "acceptance": s["accepted"] / s["drafted"] if s["drafted"] else 0.0,
            "mean_accepted_length": s["accepted"] / s["rounds"],
            "phase_ms_per_round": {p: 1000 * s[p] / s["rounds"] for p in PHASES},
            "python_overhead": 1 - s["llama_s"] / s["spec_s"],
        }


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

    target, draft = pair_of(args)
    work = load_work(args.limit)
    k = f"K={args.draft_max}" if args.fixed else f"adaptive K<={args.draft_max}"
    print(f"target {target.name}, draft {draft.name}{' + lookup' if args.lookup else ''}, {k}, {args.threads} threads, greedy, "
          f"{args.max_tokens} tokens x {len(work)} prompts", file=sys.stderr)
    engine = edgespec.Engine.load(target, draft=draft, lookup=args.lookup, n_ctx=2048, n_threads=args.threads,
                                  draft_max=args.draft_max, adaptive=not args.fixed)
    for spec in (False, True):  # warm-up: first calls of each batch shape allocate compute graphs
        engine.generate(engine.tokenize("Hello"), max_tokens=8, speculative=spec)
    per_cat: dict[str, Totals] = defaultdict(Totals)
    notes = []
    overall = Totals()
    t0 = time.time()
    for i, w in enumerate(work):
        tokens = engine.tokenize(w["prompt"], chat_format=True)
        # Interleaved, alternating which goes first; both reuse the prompt already in the target's cache.
        runs = {}
        for spec in ((False, True) if i % 2 == 0 else (True, False)):
            runs[spec] = engine.generate(tokens, max_tokens=args.max_tokens, speculative=spec)
        per_cat[w["category"]].add(runs[False], runs[True])
        overall.add(runs[False], runs[True])
        d = divergence(engine.model, tokens, runs[False].tokens, runs[True].tokens, args.draft_max, args.threads)
        if d is not None:
            notes.append(f"prompt {i + 1} ({w['category']}): {d}")
            per_cat[w["category"]].s["unexplained"] += not d.near_tie
            overall.s["unexplained"] += not d.near_tie
        p, s = runs[False].stats, runs[True].stats
        print(f"[{i + 1}/{len(work)} {time.time() - t0:5.0f}s] {w['category']:<10} plain {p.ms_per_token:6.1f} "
              f"spec {s.ms_per_token:6.1f} ms/token  x{p.ms_per_token / s.ms_per_token:.2f}  "
              f"acc {s.acceptance_rate or 0:.2f}  {'same' if runs[False].tokens == runs[True].tokens else 'DIFFERENT'}",
              file=sys.stderr)
    engine.close()

    rows = {c: t.row() for c, t in per_cat.items()} | {"overall": overall.row()}
    print(f"\n{target.name} + {draft.name}{' + lookup' if args.lookup else ''}, {k}, {args.threads} threads, greedy, "
          f"{args.max_tokens} tokens/prompt")
    print(f"{'category':<11}{'n':>3}{'same':>5}{'plain ms/t':>11}{'spec ms/t':>10}{'speedup':>8}{'accept':>7}"
          f"{'acc.len':>8}{'draft':>8}{'prep':>6}{'verify':>8}{'accept':>7}{'py ovh':>7}")
    for c, r in rows.items():
        ph = r["phase_ms_per_round"]
        print(f"{c:<11}{r['prompts']:>3}{r['identical']:>5}{r['plain_ms_per_token']:>11.1f}{r['spec_ms_per_token']:>10.1f}"
              f"{r['speedup']:>7.2f}x{r['acceptance']:>7.2f}{r['mean_accepted_length']:>8.2f}{ph['draft']:>8.1f}"
              f"{ph['prepare']:>6.2f}{ph['verify']:>8.1f}{ph['accept']:>7.2f}{100 * r['python_overhead']:>6.1f}%")
    print("(phase columns: ms per round; py ovh: share of round time outside llama.cpp; same: greedy outputs "
          "identical token for token)")
    for n in notes:
        print(n)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"target": str(target), "draft": str(draft), "args": vars(args),
                                               "rows": rows, "divergences": notes}, indent=1))


if __name__ == "__main__":
    main()
