"""Time to first token of `Engine.stream` in a fresh process, with and without the draft model, the profile folder
empty at the start (so the first process with a draft measures the verify curve and the next one loads it).

    .venv/bin/python bench/ttft.py --config memory      # F16 target; --config compute for the Q4_K_M one

Each line is a new process: no draft, then a draft (the first: it measures the verify curve after the first token),
then --repeats pairs (alternating order) of a draft process that loads the profile and one without a draft; the
last line gives the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pairs import add_model_args, pair_of  # noqa: E402

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
    print(f"{'draft' if draft else 'no draft':<9} time to first token {ttft:6.3f} s  verify curve: {e.costs_from or '-'}")
    e.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--repeats", type=int, default=5, help="pairs of processes with a profile, and without a draft")
    ap.add_argument("--one", choices=["draft", "none"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    target, draft = pair_of(args)
    if args.one:
        return one(str(target), str(draft) if args.one == "draft" else None, args.threads)
    from edgespec.report import provenance

    info = provenance(" ".join([".venv/bin/python", *sys.argv]))
    print(f"{info['command']}  ({info['date']}; edgespec {info['edgespec']}; {info['build'].split(' | ')[0]}; "
          f"{info['machine']['cpu']}, {info['machine']['cores']} cores)")
    env = dict(os.environ, EDGESPEC_PROFILES=tempfile.mkdtemp(prefix="edgespec-ttft-"))
    # The first two read the files cold and measure the curve; then pairs in alternating order.
    order = ["none", "draft"] + [w for i in range(args.repeats) for w in (("draft", "none") if i % 2 else
                                                                          ("none", "draft"))]
    seen: dict[str, list[float]] = {"draft": [], "none": []}
    for i, which in enumerate(order):
        r = subprocess.run([sys.executable, __file__, "--target", str(target), "--draft", str(draft), "--threads",
                            str(args.threads), "--one", which], env=env, check=True, stderr=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, text=True)
        print(r.stdout.strip())
        if i >= 2:
            seen[which].append(float(r.stdout.split("time to first token")[1].split()[0]))
    if args.repeats:
        d, n = statistics.median(seen["draft"]), statistics.median(seen["none"])
        print(f"median over {args.repeats}: {d:.3f} s with a draft and its profile, {n:.3f} s without a draft "
              f"({d / n:.2f}x)")


if __name__ == "__main__":
    main()
