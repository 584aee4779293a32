"""Time to first token of `Engine.stream` in a fresh process, with and without the draft model, the profile folder
empty at the start (so the first process with a draft measures the verify curve and the next one loads it).

    .venv/bin/python bench/ttft.py --config memory      # F16 target; --config compute for the Q4_K_M one

Each line is a new process: no draft, draft (first: measures), draft (loads the profile), no draft again.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from run import add_model_args, pair_of  # noqa: E402

PROMPT = "Write a Python function that reverses a linked list."


def one(target: str, draft: str | None, threads: int) -> None:
    import edgespec

    e = edgespec.Engine.load(target, draft=draft, n_threads=threads, n_ctx=2048)
    tokens = e.tokenize(PROMPT, chat_format=True)
    t0 = time.perf_counter()
    stream = e.stream(tokens, max_tokens=16)
    next(stream)
    ttft = time.perf_counter() - t0
    for _ in stream:
        pass
    print(f"{'draft' if draft else 'no draft':<9} time to first token {ttft:5.2f} s  verify curve: {e.costs_from or '-'}")
    e.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--one", choices=["draft", "none"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    target, draft = pair_of(args)
    if args.one:
        return one(str(target), str(draft) if args.one == "draft" else None, args.threads)
    env = dict(os.environ, EDGESPEC_PROFILES=tempfile.mkdtemp(prefix="edgespec-ttft-"))
    for which in ("none", "draft", "draft", "none"):
        subprocess.run([sys.executable, __file__, "--target", str(target), "--draft", str(draft), "--threads",
                        str(args.threads), "--one", which], env=env, check=True, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
