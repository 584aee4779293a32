"""How well the draft model guesses the target's tokens when it reads only part of a prompt: its first HEAD tokens
and its last W, against the whole prompt. A study for the hybrid's reading verdict (edgespec/reading.py): on this
CPU a prompt's reading is what keeps the draft model out of a text, and a window costs a bounded number of tokens.

Along each recorded text (bench/replay.py's recordings: the target's greedy tokens), the draft model reads the
context in one batched decode, with every row's logits, and its greedy choice after each prefix is compared with the
target's next token. Both readings are made here, the same way, so that batched and one-token logits are not
compared. `--write OUT` also writes the recording with the window's predictions (and confidences) as its draft's,
for bench/replay.py to replay.

    .venv/bin/python bench/window_read.py REC [REC ...] --draft MODEL.gguf [--head 4] [--window 32,64,128]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys

import numpy as np


def _rows(llm, tokens: list[int], first: int) -> tuple[list[int], list[float]]:
    """The model's greedy next token and its probability after tokens[:i + 1], for i from `first` on."""
    llm.reset()
    llm.eval(tokens)
    scores = np.asarray(llm.scores[first:len(tokens)], dtype=np.float64)
    top = scores.argmax(axis=1)
    z = scores - scores.max(axis=1, keepdims=True)
    p = 1.0 / np.exp(z).sum(axis=1)
    return [int(t) for t in top], [round(float(x), 4) for x in p]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="+")
    ap.add_argument("--draft", required=True)
    ap.add_argument("--head", type=int, default=4)
    ap.add_argument("--window", default="32,64,128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", help="with one window: the recording with its predictions, to this path")
    args = ap.parse_args()
    try:
        windows = [int(w) for w in args.window.split(",")]
    except ValueError:
        ap.error(f"--window: whole numbers of tokens, comma-separated (not {args.window!r})")
    if any(w < 1 for w in windows) or args.head < 0:
        ap.error("--window takes 1 token or more, --head 0 or more")
    if args.write and (len(windows) != 1 or len(args.recordings) != 1):
        ap.error("--write takes one recording and one window")
    recordings = []
    for path in args.recordings:
        try:
            recordings.append(json.load(open(path)))
            recordings[-1]["texts"][0]["n_prompt"]
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            sys.exit(f"window_read.py: {path} is not a replay recording ({e!r})")
    import llama_cpp
    try:
        longest = max(len(t["tokens"]) for rec in recordings for t in rec["texts"])  # (a row per token held)
        llm = llama_cpp.Llama(args.draft, n_ctx=longest + 1, n_batch=512, logits_all=True, n_threads=args.threads,
                              verbose=False)
    except ValueError as e:
        sys.exit(f"window_read.py: cannot load the draft model: {e}")
    print(" ".join(sys.argv), flush=True)
    for path, rec in zip(args.recordings, recordings):
        hits: dict = collections.defaultdict(collections.Counter)
        for t in rec["texts"]:
            toks, n = t["tokens"], t["n_prompt"]
            answer = toks[n:]
            cat = t["category"]
            full, _ = _rows(llm, toks[:-1], n - 1)
            hits[cat]["full"] += sum(a == b for a, b in zip(full, answer))
            hits[cat]["n"] += len(answer)
            hits[cat]["texts"] += 1
            for w in windows:
                if n <= args.head + w:
                    guess = full
                else:
                    hits[cat][f"cut{w}"] += 1
                    ctx = toks[:args.head] + toks[n - w:-1]
                    guess, conf = _rows(llm, ctx, args.head + w - 1)
                    if args.write:
                        t["draft"], t["draft_p"] = guess, conf
                hits[cat][f"w{w}"] += sum(a == b for a, b in zip(guess, answer))
        print(f"\n{path}: the draft's greedy choice is the target's next token (share of answer tokens), reading "
              f"the whole prompt or its first {args.head} and last W tokens; cut: texts whose prompt the window cuts")
        print(f"{'category':16s} {'texts':>5s} {'full':>6s} " + " ".join(f"{'W=' + str(w):>7s} {'cut':>3s}"
                                                                        for w in windows))
        total = collections.Counter()
        for cat, h in hits.items():
            total.update(h)
            print(f"{cat:16s} {h['texts']:5d} {h['full'] / h['n']:6.3f} " +
                  " ".join(f"{h[f'w{w}'] / h['n']:7.3f} {h[f'cut{w}']:3d}" for w in windows))
        print(f"{'all':16s} {total['texts']:5d} {total['full'] / total['n']:6.3f} " +
              " ".join(f"{total[f'w{w}'] / total['n']:7.3f} {total[f'cut{w}']:3d}" for w in windows), flush=True)
        if args.write:
            rec.setdefault("provenance", {})["window"] = {"head": args.head, "window": windows[0],
                                                          "command": " ".join(sys.argv)}
            with open(args.write, "w") as f:
                json.dump(rec, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
