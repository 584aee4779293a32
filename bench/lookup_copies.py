"""How often prompt lookup's copy runs past the end of the turn it copies, per category of a replay recording: at
every position of every recorded answer, lookup's match (as the engine finds it, the chat template's headers aware)
and the text's next k tokens after it as they were copied before PromptLookupProposer._copy stopped at the copied
turn's end: how many such offers ran past a control token, the rows after it (never accepted: the generation ends
at an end of turn, and no answer goes on into the next header), and how many were right up to that token. And the
copied turn's closing (its last token before that end, which _copy offers only once such closings have passed:
Closings): of the offers that end at a turn's end, how many the answer followed up to the closing, and how many of
those the closing passed, per closing token.

    .venv/bin/python bench/lookup_copies.py bench/results/replay-memory-q4_0-draft.json [-k 8] [--vocab GGUF]

Reads the recording only (no model; --vocab: a model's vocabulary alone); a bad path or file is one line, exit 1.
Output: bench/results/lookup-copies.log."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgespec.proposers import PromptLookupProposer  # noqa: E402


def count(texts: list[dict], control: set[int], k: int) -> dict[str, Counter]:
    """Per category: offers, offers past a control token, rows after it, offers right up to it."""
    out: dict[str, Counter] = {}
    for text in texts:
        c = out.setdefault(text["category"], Counter())
        tokens, n_prompt = text["tokens"], text["n_prompt"]
        lookup = PromptLookupProposer(control=control)
        lookup.closings.offered = lambda closing: True  # (matches as they were before closings were learned)
        lookup.begin(tokens[:n_prompt])
        for i in range(n_prompt, len(tokens)):
            lookup.propose(tokens[:i], 0, None, None)  # (k = 0: only reads the text so far)
            _, n, end = lookup._match(k)
            if not n:
                continue
            raw = lookup._seq[end:end + k]  # as copied before the copy stopped at the turn's end
            c["offers"] += 1
            at = next((j for j, t in enumerate(raw) if t in control), None)
            if at is not None and at < len(raw) - 1:
                c["past"] += 1
                c["rows after"] += len(raw) - 1 - at
                c["right up to it"] += tokens[i:i + at + 1] == raw[:at + 1]
            if at and len(tokens) > i + at - 1 and tokens[i:i + at - 1] == raw[:at - 1]:
                closing = raw[at - 1]
                c[("reached", closing)] += 1
                c[("passed", closing)] += tokens[i + at - 1] == closing
    return out


def closings(counts: dict[str, Counter], piece) -> list[str]:
    """Per category, each closing token the answers reached: passed / reached."""
    lines = []
    for cat, c in sorted(counts.items()):
        reached = [k[1] for k in c if isinstance(k, tuple) and k[0] == "reached"]
        reached.sort(key=lambda t: -c["reached", t])
        if reached:
            lines.append(f"{cat:16} " + ", ".join(f"{piece(t)!r} {c['passed', t]}/{c['reached', t]}" for t in reached))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recording")
    ap.add_argument("-k", type=int, default=8, help="the offer's length (default 8, a round's)")
    ap.add_argument("--vocab", metavar="GGUF", help="the closing tokens as text, from this model's vocabulary")
    args = ap.parse_args()
    try:
        rec = json.loads(Path(args.recording).read_text())
        texts, control = rec["texts"], set(rec["vocab"].get("control") or ())
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"lookup_copies: cannot read {args.recording} as a replay recording ({e})")
    if not control:
        sys.exit(f"lookup_copies: {args.recording} records no control tokens (record it again: bench/replay.py record)")
    piece = str
    if args.vocab:
        from llama_cpp import Llama
        try:
            vocab = Llama(model_path=args.vocab, vocab_only=True, verbose=False)
        except (OSError, ValueError) as e:
            sys.exit(f"lookup_copies: cannot read {args.vocab}'s vocabulary ({e})")
        piece = lambda t: vocab.detokenize([t]).decode("utf-8", "replace")  # noqa: E731
    print(f"{args.recording}: lookup's {args.k}-token offers at every answer position; past: ran past a control token")
    print(f"{'category':16} {'offers':>7} {'past':>5} {'share':>6} {'rows after':>10} {'right up to it':>14}")
    total = Counter()
    counts = count(texts, control, args.k)
    for cat, c in sorted(counts.items()):
        total.update(c)
        print(f"{cat:16} {c['offers']:7} {c['past']:5} {c['past'] / max(c['offers'], 1):6.0%} {c['rows after']:10} "
              f"{c['right up to it']:14}")
    print(f"{'all':16} {total['offers']:7} {total['past']:5} {total['past'] / max(total['offers'], 1):6.0%} "
          f"{total['rows after']:10} {total['right up to it']:14}")
    print("\nthe copied turn's closing (its last token before the end), where the answer followed the copy up to it: "
          "passed/reached, by closing token")
    for line in closings(counts, piece):
        print(line)


if __name__ == "__main__":
    main()
