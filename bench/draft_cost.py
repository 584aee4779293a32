"""What a draft model's file format costs it on this machine: one draft step (a one-token decode after a 400-token
context) and its reading of a prompt (the 400 tokens in one decode, per token), for each GGUF given, the files taken
in turn and repeated, medians. The draft's step and reading are what its rounds and its prompts cost the engine
(costs.py, reading.py); its agreement with the target is bench/window_read.py's (--window 100000 reads every prompt
whole). Run it alone:

    git show cd6eb10:README.md | head -c 6000 | tail -c 5000 > /tmp/long.txt
    .venv/bin/python bench/draft_cost.py /tmp/long.txt DRAFT.gguf [DRAFT.gguf ...] [--threads 2] [--repeats 3]

A copy of a draft in another format: `.venv/bin/edgespec quantize SRC.gguf DST.gguf --type Q4_0` (llama.cpp's
quantize API; from a quantized file it re-quantizes)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from edgespec.backend import Context
from edgespec.backend.model import Model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("text", help="a text file, its first 400 tokens the context")
    ap.add_argument("drafts", nargs="+", metavar="DRAFT.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    text = Path(args.text).read_text()
    models = {path: Model(path) for path in args.drafts}
    read: dict[str, list[float]] = {p: [] for p in models}
    step: dict[str, list[float]] = {p: [] for p in models}
    print(" ".join(["bench/draft_cost.py", *sys.argv[1:]]), flush=True)
    for _ in range(args.repeats):
        for path, model in models.items():
            ctx = Context(model, 2048, args.threads)
            tokens = model.tokenize(text)[:400]
            t0 = time.perf_counter()
            ctx.decode(tokens, [len(tokens) - 1])
            read[path].append((time.perf_counter() - t0) / len(tokens))
            steps = []
            for i in range(16):  # one token at a time after the context, as a draft drafts
                t0 = time.perf_counter()
                ctx.decode([tokens[i]], [0])
                steps.append(time.perf_counter() - t0)
            step[path].append(statistics.median(steps))
            ctx.close()
    for path in models:
        print(f"{Path(path).name}: {Path(path).stat().st_size / 2**20:.0f} MiB, reads "
              f"{1000 * statistics.median(read[path]):.2f} ms a token, steps in "
              f"{1000 * statistics.median(step[path]):.2f} ms (medians of {args.repeats})", flush=True)


if __name__ == "__main__":
    main()
