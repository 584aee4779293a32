"""edgespec's prompt lookup against llama-cpp-python's own (LlamaPromptLookupDecoding), same target, same prompts.

    .venv/bin/python bench/baselines.py --config compute --limit 2

Each side is timed against its own plain decoding in the same run: edgespec plain vs edgespec lookup, and
llama-cpp-python's Llama without a draft vs with LlamaPromptLookupDecoding(num_pred_tokens = 2 and 10; it needs
logits_all=True, without which it crashes past 512 tokens). Greedy, 2 threads. For llama-cpp-python ms/token is
(time of the last streamed token - time of the first) / (tokens - 1), which leaves its prompt processing out.
Also reports how many outputs differ from edgespec's plain output.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

import edgespec

sys.path.insert(0, str(Path(__file__).parent))
from pairs import load_work, models_for  # noqa: E402


def lcp_run(llm, tokens, max_tokens):
    """(seconds, tokens timed, text): the time from the first streamed token to the last, and the count after it."""
    stamps, pieces = [], []
    for chunk in llm.create_completion(tokens, max_tokens=max_tokens, temperature=0.0, stream=True):
        stamps.append(time.perf_counter())
        pieces.append(chunk["choices"][0]["text"])
    return stamps[-1] - stamps[0], len(stamps) - 1, "".join(pieces)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["memory", "compute"], default="compute")
    ap.add_argument("--models", default=str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--json")
    args = ap.parse_args()
    target, _ = models_for(args.config, Path(args.models))
    work = load_work(args.limit)

    engine = edgespec.Engine.load(target, lookup=True, n_ctx=2048, n_threads=args.threads, draft_max=16)
    common = dict(model_path=str(target), n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads,
                  verbose=False)
    lcp = {"lcp-plain": llama_cpp.Llama(**common)}
    for n in (2, 10):
        lcp[f"lcp-lookup{n}"] = llama_cpp.Llama(**common, logits_all=True,
                                                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=n))
    sums = defaultdict(lambda: defaultdict(float))
    for i, w in enumerate(work):
        tokens = engine.tokenize(w["prompt"], chat_format=True)
        plain = engine.generate(tokens, max_tokens=args.max_tokens, speculative=False)
        look = engine.generate(tokens, max_tokens=args.max_tokens)
        ref_text = plain.text
        row = {"edgespec-plain": (plain.stats.generation_s, plain.stats.n_tokens, plain.text),
               "edgespec-lookup": (look.stats.generation_s, look.stats.n_tokens, look.text)}
        for name, llm in lcp.items():
            llm.reset()
            row[name] = lcp_run(llm, tokens, args.max_tokens)
        for name, (sec, n, text) in row.items():
            for key in (w["category"], "overall"):
                sums[(key, name)]["s"] += sec
                sums[(key, name)]["n"] += n
                sums[(key, name)]["differs"] += text != ref_text
        print(f"[{i + 1}/{len(work)}] {w['category']:<10} " +
              ", ".join(f"{k} {1000 * v[0] / max(v[1], 1):.0f}" for k, v in row.items()), file=sys.stderr)

    cats = list(dict.fromkeys(w["category"] for w in work)) + ["overall"]
    print(f"\n{target.name}, {args.threads} threads, greedy, {args.max_tokens} tokens x {len(work)} prompts")
    print("speedup of each method over its own plain decoding (sum(time)/sum(tokens)); Nd = outputs differing "
          "from edgespec's plain output")
    print(f"{'method':<18}" + "".join(f"{c:>14}" for c in cats))

    def ms(c, name):
        return sums[(c, name)]["s"] / sums[(c, name)]["n"]

    for name, base in [("edgespec-plain", "lcp-plain"), ("edgespec-lookup", "edgespec-plain"),
                       ("lcp-lookup2", "lcp-plain"), ("lcp-lookup10", "lcp-plain")]:
        cells = [f"{ms(c, base) / ms(c, name):.2f}x {int(sums[(c, name)]['differs'])}d" for c in cats]
        print(f"{name:<18}" + "".join(f"{x:>14}" for x in cells))
    if args.json:
        Path(args.json).write_text(json.dumps({f"{c}|{n}": v for (c, n), v in sums.items()}, indent=1))


if __name__ == "__main__":
    main()
