#!/usr/bin/env python3
"""Text by text, from saved files (measures nothing, so it may run beside anything):

    # where mode B was more than 3% slower or faster than mode A, from an `edgespec bench` or `bench/replay.py run`
    # --json file (the first repeat's seconds and tokens per prompt)
    .venv/bin/python bench/texts.py compare bench/results/replay-runs/unseen-memory-bound-303c329.json \
        --modes draft,hybrid
    # how often a draft's token passes at the start of an answer against later, from replay recordings (the draft's
    # greedy prediction at each position of the target's greedy text): its first token (the one after the target's
    # first), and what a first round of K tokens yields against rounds later in the text
    .venv/bin/python bench/texts.py openings bench/results/replay-memory.json bench/results/replay-heldout2-memory.json
    # prompt lookup's first token against the draft's own choice, from replay recordings: at every answer position
    # where lookup (as the engine builds it, the recording's control tokens included) has a match, how often the
    # target's token is lookup's and the draft's, where the two agree and where they differ, overall and by category
    .venv/bin/python bench/texts.py agreement bench/results/replay-memory.json
    # before a new set of prompts is used as unseen: each of its prompts that is close to one in the earlier sets
    # (the built-in workload, and the files given), by difflib's ratio over their openings and over their endings
    .venv/bin/python bench/texts.py similar bench/heldout3.jsonl --against bench/heldout.jsonl bench/heldout2.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys


def compare(path: str, modes: str, by: float) -> None:
    rows = json.load(open(path))["rows"]
    a, b = modes.split(",")
    if a not in rows or b not in rows:
        sys.exit(f"texts.py: {path} has the modes {', '.join(rows)}")
    category = {tuple(item): cat for cat, row in rows[b].items() if cat != "overall"
                for item in row["items"][0]}
    pairs = list(zip(rows[a]["overall"]["items"][0], rows[b]["overall"]["items"][0]))
    ratios = [(ta / na) / (tb / nb) for (ta, na), (tb, nb) in pairs]  # B's speed over A's, text by text
    slower = sum(r < 1 / (1 + by) for r in ratios)
    faster = sum(r > 1 + by for r in ratios)
    print(f"{b} against {a}, {len(ratios)} texts: more than {by:.0%} slower on {slower}, faster on {faster}")
    worst = sorted(range(len(ratios)), key=lambda i: ratios[i])[:10]
    for i in worst:
        (ta, na), (tb, nb) = pairs[i]
        print(f"  text {i + 1:3d} {category.get(tuple(pairs[i][1]), '?'):15s} {nb:3d} tokens: {b} {ratios[i]:.2f}x "
              f"{a} ({1000 * ta / na:.1f} against {1000 * tb / nb:.1f} ms/token)")


def run_length(text: dict, start: int, k: int) -> int:
    """Tokens a round of k drafted from answer position `start` would pass (greedy: while the draft's prediction is
    the target's token)."""
    p, tokens, draft = text["n_prompt"], text["tokens"], text["draft"]
    n = 0
    while n < k and start + n < len(draft) and draft[start + n] == tokens[p + start + n]:
        n += 1
    return n


def openings(paths: list[str], k: int) -> None:
    for path in paths:
        texts = json.load(open(path))["texts"]
        first = [run_length(t, 1, 1) for t in texts if len(t["draft"]) > 1]
        later = [run_length(t, i, 1) for t in texts for i in range(2, len(t["draft"]))]
        round1 = [run_length(t, 1, k) for t in texts if len(t["draft"]) > k + 2]
        rounds = [run_length(t, i, k) for t in texts for i in range(2, len(t["draft"]) - k)]
        print(f"{path}: the answer's second token (the draft's first) passes {sum(first) / len(first):.2f}, "
              f"later ones {sum(later) / len(later):.2f}; a first round of {k} yields {sum(round1) / len(round1):.2f}, "
              f"later rounds {sum(rounds) / len(rounds):.2f} ({len(texts)} texts)")


def agreement(paths: list[str]) -> None:
    import numpy as np

    from edgespec.proposers import PromptLookupProposer
    from edgespec.sampling import GREEDY

    rng = np.random.default_rng(0)
    for path in paths:
        data = json.load(open(path))
        counts: dict[tuple[str, bool], list[int]] = {}  # (category, agree) -> [matches, lookup's right, draft's right]
        for t in data["texts"]:
            p, tokens, draft = t["n_prompt"], t["tokens"], t["draft"]
            lookup = PromptLookupProposer(control=data.get("vocab", {}).get("control", ()))
            lookup.begin(tokens[:p])
            for i in range(p, min(len(tokens), p + len(draft))):
                guess = lookup.propose(tokens[:i], 4, GREEDY, rng).tokens
                if not guess:
                    continue
                mine = draft[i - p]
                for cat in ("all", t["category"]):
                    c = counts.setdefault((cat, guess[0] == mine), [0, 0, 0])
                    c[0] += 1
                    c[1] += guess[0] == tokens[i]
                    c[2] += mine == tokens[i]
        print(f"{path} ({len(data['texts'])} texts): where lookup has a match, the target's token is")
        for cat in dict.fromkeys(c for c, _ in counts):
            line = [f"{'agree' if agree else 'differ'} {n} times: lookup's {a / n:.2f}, the draft's {b / n:.2f}"
                    for agree in (True, False) if (cat, agree) in counts
                    for n, a, b in [counts[cat, agree]]]
            print(f"  {cat:15s} " + "; ".join(line))


def _text(item) -> str:
    return item.prompt if item.prompt is not None else json.dumps(item.messages)


def similar(path: str, against: list[str], above: float) -> None:
    """Each prompt of `path` whose likeness to a prompt of the built-in workload or of `against` is over `above`:
    difflib's ratio over their first 200 characters or over their last 300, whichever is higher (a passage shared
    under another question shows at the end, a question asked again at the start)."""
    import difflib

    from edgespec.workloads import builtin, read_jsonl

    def likeness(a: str, b: str) -> float:
        return max(difflib.SequenceMatcher(None, a[:200], b[:200]).ratio(),
                   difflib.SequenceMatcher(None, a[-300:], b[-300:]).ratio())

    earlier = [_text(i) for i in builtin()] + [_text(i) for f in against for i in read_jsonl(f)]
    new = [_text(i) for i in read_jsonl(path)]
    close = 0
    for text in new:
        r, best = max((likeness(text, e), e) for e in earlier)
        if r > above:
            close += 1
            print(f"{r:.2f}  {text[:60]!r}\n      {best[:60]!r}")
    print(f"{close} of {len(new)} prompts over {above} against {len(earlier)} earlier ones")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("compare")
    c.add_argument("run")
    c.add_argument("--modes", required=True, help="A,B")
    c.add_argument("--by", type=float, default=0.03)
    o = sub.add_parser("openings")
    o.add_argument("recordings", nargs="+")
    o.add_argument("-k", type=int, default=4)
    g = sub.add_parser("agreement")
    g.add_argument("recordings", nargs="+")
    s = sub.add_parser("similar")
    s.add_argument("prompts")
    s.add_argument("--against", nargs="*", default=[])
    s.add_argument("--above", type=float, default=0.7)
    args = ap.parse_args()
    try:
        if args.what == "compare":
            compare(args.run, args.modes, args.by)
        elif args.what == "openings":
            openings(args.recordings, args.k)
        elif args.what == "similar":
            similar(args.prompts, args.against, args.above)
        else:
            agreement(args.recordings)
    except (OSError, ValueError) as e:
        sys.exit(f"texts.py: cannot read it: {e}")
    except KeyError as e:  # a recording given to compare, a run to openings or agreement
        sys.exit(f"texts.py: not the file it reads (no {e}): compare takes a run's --json, openings and agreement a "
                 "recording")


if __name__ == "__main__":
    main()
