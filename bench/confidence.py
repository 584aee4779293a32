"""What a draft model's confidence (its top probability, recorded per position of the target's text) says, from a
replay recording with confidences (bench/replay.py record, or bench/replay.py draft for an older recording): how
often its token is the target's by confidence, and how often the next position's confidence is low after each.

    .venv/bin/python bench/confidence.py bench/results/replay-memory.json
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

PROSE = {"writing", "chat", "translate", "multiturn"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("recording")
    ap.add_argument("--low", type=float, default=0.6, help="a confidence under this counts as low")
    a = ap.parse_args()
    texts = json.load(open(a.recording))["texts"]
    if not all("draft_p" in t for t in texts):
        raise SystemExit(f"{a.recording} has no draft confidences: make them with bench/replay.py draft")
    passed, after = defaultdict(lambda: [0, 0]), {kind: defaultdict(lambda: [0, 0]) for kind in ("all", "prose")}
    for t in texts:
        out, p = t["tokens"][t["n_prompt"]:], t["draft_p"]
        for i, (tok, conf) in enumerate(zip(t["draft"], p[:len(out)])):
            b = passed[min(int(conf * 10), 9)]
            b[0], b[1] = b[0] + 1, b[1] + (tok == out[i])
        for i in range(min(len(p), len(out)) - 1):
            for kind in ("all", "prose") if t["category"] in PROSE else ("all",):
                b = after[kind][min(int(p[i] * 5), 4)]
                b[0], b[1] = b[0] + 1, b[1] + (p[i + 1] < a.low)
    print("the draft's token is the target's, by its confidence:")
    print("  " + "  ".join(f"{b / 10:.1f}-{(b + 1) / 10:.1f}: {k / n:.2f} (n={n})" for b, (n, k) in sorted(passed.items())))
    for kind, bins in after.items():
        print(f"the next position's confidence under {a.low}, by this one's ({kind} texts):")
        print("  " + "  ".join(f"{b / 5:.1f}-{(b + 1) / 5:.1f}: {k / n:.2f} (n={n})" for b, (n, k) in sorted(bins.items())))


if __name__ == "__main__":
    main()
