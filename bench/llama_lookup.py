"""llama.cpp's own `llama-lookup` against itself with drafting off, next to edgespec's lookup, same prompts.

    bench/build-llama-tools.sh                      # builds build/llama-tools/bin/llama-lookup (a few minutes)
    .venv/bin/python bench/llama_lookup.py --config compute --limit 2

llama-lookup's own "decoded N tokens in T seconds" (prompt processing excluded) is summed per category, for
--draft-max K and for --draft-max 0 (the same program decoding one token per step): speedup = ratio of the two.
edgespec's prompt lookup runs on the same chat-formatted prompts in the same process order. Greedy, 2 threads.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import edgespec

sys.path.insert(0, str(Path(__file__).parent))
from pairs import load_work, models_for  # noqa: E402

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")


def llama_lookup(binary: str, model: Path, text: str, n: int, draft: int, threads: int) -> tuple[float, int]:
    cmd = [binary, "-m", str(model), "-p", text, "-n", str(n), "--spec-draft-n-max", str(draft), "-t", str(threads),
           "-c", "2048", "--temp", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = DECODED.search(out.stdout + out.stderr)
    if not m:
        sys.exit(f"no timing from llama-lookup:\n{(out.stdout + out.stderr)[-2000:]}")
    return float(m.group(2)), int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/llama-tools/bin/llama-lookup")
    ap.add_argument("--config", choices=["memory", "compute"], default="compute")
    ap.add_argument("--models", default=str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int)
    args = ap.parse_args()
    target, _ = models_for(args.config, Path(args.models))
    engine = edgespec.Engine.load(target, lookup=True, n_ctx=2048, n_threads=args.threads, draft_max=16)
    sums = defaultdict(lambda: defaultdict(float))
    work = load_work(args.limit)
    for i, w in enumerate(work):
        text = edgespec.chat.format_messages(engine.model, [("user", w["prompt"])])
        runs = {"llama-lookup": llama_lookup(args.bin, target, text, args.max_tokens, args.draft_max, args.threads),
                "llama-plain": llama_lookup(args.bin, target, text, args.max_tokens, 0, args.threads)}
        tokens = engine.tokenize_chat([("user", w["prompt"])])
        for name, spec in (("edgespec-plain", False), ("edgespec-lookup", True)):
            r = engine.generate(tokens, max_tokens=args.max_tokens, speculative=spec)
            runs[name] = (r.stats.generation_s, r.stats.n_tokens)
        for name, (sec, n) in runs.items():
            for key in (w["category"], "overall"):
                sums[(key, name)]["s"] += sec
                sums[(key, name)]["n"] += n
        print(f"[{i + 1}/{len(work)}] {w['category']:<10} " +
              ", ".join(f"{k} {1000 * s / max(n, 1):.0f}" for k, (s, n) in runs.items()), file=sys.stderr)
    cats = list(dict.fromkeys(w["category"] for w in work)) + ["overall"]
    print(f"\n{target.name}, {args.threads} threads, greedy, {args.max_tokens} tokens x {len(work)} prompts; "
          f"speedup of each lookup over its own plain decoding (sum(time)/sum(tokens))")
    print(f"{'method':<18}" + "".join(f"{c:>12}" for c in cats))

    def ms(c, name):
        return sums[(c, name)]["s"] / sums[(c, name)]["n"]

    for name, base in (("llama-lookup", "llama-plain"), ("edgespec-lookup", "edgespec-plain"),
                       ("edgespec-plain", "llama-plain")):
        print(f"{name:<18}" + "".join(f"{ms(c, base) / ms(c, name):>11.2f}x" for c in cats))


if __name__ == "__main__":
    main()
