"""JSON extraction under a schema: constrained speculation against constrained plain decoding, and the same prompts
without the schema, interleaved prompt by prompt in one run.

    .venv/bin/python bench/extract.py --config memory     # Qwen2.5-Coder-1.5B F16 target, 0.5B Q4_K_M draft
    .venv/bin/python bench/extract.py --config compute    # the same with the Q4_K_M target

The workload is bench/extraction.json (24 passages, each with what to extract and the JSON schema of the answer;
written by bench/make_extraction.py). Greedy, 2 threads, the draft model and prompt lookup (the Qwen preset's
set-up) under the adaptive draft length. Prints per category and overall: ms/token (sum T / sum N) and speedup of
each mode over its own plain baseline; acceptance by source (grammar: tokens the schema forces, proposed free;
lookup; draft); the share of emitted tokens that came free from the grammar; the grammar's share of the rounds'
time (matcher, masks, forced tokens); outputs identical to plain and valid against their schema. Numbers, not
assertions: nothing here passes or fails.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import edgespec
from edgespec.report import provenance

sys.path.insert(0, str(Path(__file__).parent))
from pairs import add_model_args, pair_of  # noqa: E402

HERE = Path(__file__).parent
SOURCES = ("grammar", "lookup", "draft")


def valid(text: str, schema: dict) -> bool:
    try:
        import jsonschema
    except ImportError:  # the test extra; without it, parsing is all that is checked
        jsonschema = None
    try:
        value = json.loads(text)
        if jsonschema is not None:
            jsonschema.validate(value, schema)
        return True
    except Exception:  # noqa: BLE001 - any failure is "not valid"
        return False


class Sums:
    def __init__(self) -> None:
        self.s = defaultdict(float)

    def add(self, kind: str, plain, spec, schema: dict | None) -> None:
        s = self.s
        s[f"{kind}_n"] += 1
        s[f"{kind}_same"] += plain.tokens == spec.tokens
        for name, r in (("plain", plain), ("spec", spec)):
            s[f"{kind}_{name}_s"] += r.stats.generation_s
            s[f"{kind}_{name}_tokens"] += r.stats.n_tokens
            s[f"{kind}_{name}_grammar_s"] += r.stats.constraint_s
            if schema is not None:
                s[f"{kind}_{name}_valid"] += r.finish_reason != "length" and valid(r.text, schema)
        for src in SOURCES:
            s[f"{kind}_drafted_{src}"] += spec.stats.drafted_by_source.get(src, 0)
            s[f"{kind}_accepted_{src}"] += spec.stats.accepted_by_source.get(src, 0)
        s[f"{kind}_rounds"] += spec.stats.n_rounds

    def row(self, kind: str) -> dict | None:
        s = self.s
        if not s[f"{kind}_n"]:
            return None
        ms = {m: 1000 * s[f"{kind}_{m}_s"] / max(1, s[f"{kind}_{m}_tokens"]) for m in ("plain", "spec")}
        out = {"prompts": int(s[f"{kind}_n"]), "identical": int(s[f"{kind}_same"]),
               "plain_ms_per_token": ms["plain"], "spec_ms_per_token": ms["spec"], "speedup": ms["plain"] / ms["spec"],
               "tokens": int(s[f"{kind}_spec_tokens"]), "tokens_per_round": s[f"{kind}_spec_tokens"] / s[f"{kind}_rounds"],
               "accepted_by_source": {k: int(s[f"{kind}_accepted_{k}"]) for k in SOURCES},
               "drafted_by_source": {k: int(s[f"{kind}_drafted_{k}"]) for k in SOURCES},
               "free_from_grammar": s[f"{kind}_accepted_grammar"] / max(1, s[f"{kind}_spec_tokens"]),
               "grammar_share_spec": s[f"{kind}_spec_grammar_s"] / max(1e-9, s[f"{kind}_spec_s"]),
               "grammar_share_plain": s[f"{kind}_plain_grammar_s"] / max(1e-9, s[f"{kind}_plain_s"])}
        if kind == "json":
            out["valid_plain"], out["valid_spec"] = int(s["json_plain_valid"]), int(s["json_spec_valid"])
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--no-lookup", action="store_true", help="the draft model alone (no prompt lookup)")
    ap.add_argument("--no-free", action="store_true", help="skip the same prompts without the schema")
    ap.add_argument("--limit", type=int, help="only the first N prompts")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    target, draft = pair_of(args)
    work = json.loads((HERE / "extraction.json").read_text())[:args.limit]
    lookup = not args.no_lookup
    print(f"target {target.name}, draft {draft.name}{' + lookup' if lookup else ''}, adaptive K<={args.draft_max}, "
          f"{args.threads} threads, greedy, up to {args.max_tokens} tokens x {len(work)} prompts", file=sys.stderr)
    engine = edgespec.Engine.load(target, draft=draft, lookup=lookup, n_ctx=4096, n_threads=args.threads,
                                  draft_max=args.draft_max)
    warm = edgespec.Constraint.json_object()
    for spec in (False, True):  # warm-up: compute graphs of each batch shape, the grammar's vocabulary
        engine.generate(engine.tokenize("Hello"), max_tokens=8, speculative=spec, constraint=warm)
    per_cat: dict[str, Sums] = defaultdict(Sums)
    overall = Sums()
    kinds = ("json",) if args.no_free else ("json", "free")
    t0 = time.time()
    for i, w in enumerate(work):
        tokens = engine.tokenize(w["prompt"], chat_format=True)
        constraint = edgespec.Constraint.json_schema(w["schema"])
        for kind in kinds:
            runs = {}
            for spec in ((False, True) if i % 2 == 0 else (True, False)):  # interleaved, alternating order
                runs[spec] = engine.generate(tokens, max_tokens=args.max_tokens, speculative=spec,
                                             constraint=constraint if kind == "json" else None)
            schema = w["schema"] if kind == "json" else None
            per_cat[w["category"]].add(kind, runs[False], runs[True], schema)
            overall.add(kind, runs[False], runs[True], schema)
            p, s = runs[False].stats, runs[True].stats
            print(f"[{i + 1}/{len(work)} {time.time() - t0:5.0f}s] {w['category']:<9} {kind:<4} plain "
                  f"{p.ms_per_token:6.1f} spec {s.ms_per_token:6.1f} ms/token x{p.ms_per_token / s.ms_per_token:.2f} "
                  f"{s.n_tokens:4d} tokens, {s.tokens_per_round:.2f}/round, free "
                  f"{s.accepted_by_source.get('grammar', 0):3d}, grammar {100 * s.constraint_s / s.generation_s:.1f}% "
                  f"{'same' if runs[False].tokens == runs[True].tokens else 'DIFFERENT'}", file=sys.stderr)
    engine.close()

    rows = {c: {k: t.row(k) for k in kinds} for c, t in per_cat.items()} | \
        {"overall": {k: overall.row(k) for k in kinds}}
    print(f"\n{target.name} + {draft.name}{' + lookup' if lookup else ''}, adaptive K<={args.draft_max}, "
          f"{args.threads} threads, greedy, up to {args.max_tokens} tokens/prompt")
    print(f"{'category':<10}{'kind':<5}{'n':>3}{'same':>5}{'valid':>6}{'plain ms/t':>11}{'spec ms/t':>10}"
          f"{'speedup':>8}{'tok/rnd':>8}{'grammar':>12}{'lookup':>12}{'draft':>12}{'free':>6}{'mask':>6}")
    for c, by_kind in rows.items():
        for kind, r in by_kind.items():
            acc = "".join(f"{r['accepted_by_source'][k]:>6}/{r['drafted_by_source'][k]:<5}" for k in SOURCES)
            v = f"{r['valid_spec']}/{r['prompts']}" if kind == "json" else "-"
            print(f"{c:<10}{kind:<5}{r['prompts']:>3}{r['identical']:>5}{v:>6}{r['plain_ms_per_token']:>11.1f}"
                  f"{r['spec_ms_per_token']:>10.1f}{r['speedup']:>7.2f}x{r['tokens_per_round']:>8.2f} {acc}"
                  f"{100 * r['free_from_grammar']:>5.0f}%{100 * r['grammar_share_spec']:>5.1f}%")
    print("(json: held to the schema; free: the same prompt without it. speedup: plain ms/token over speculative, each "
          "sum T / sum N, in its own kind. grammar/lookup/draft: accepted/proposed tokens by source. free: share of "
          "emitted tokens the grammar forced, proposed at no cost. mask: the grammar's share of the speculative "
          "rounds' time. valid: speculative outputs that parse and validate. same: greedy outputs identical to plain)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        record = provenance(" ".join([".venv/bin/python", *sys.argv]))
        Path(args.json).write_text(json.dumps({**record, "target": str(target), "draft": str(draft),
                                               "args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
