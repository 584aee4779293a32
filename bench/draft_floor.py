"""A confidence floor (--draft-p-min, llama.cpp's rule: stop a draft where the draft model's top probability falls
under it) against plain decoding, on chat prompts of several kinds: ms per token plain and drafted with each floor,
interleaved prompt by prompt, in one process, each floor a fresh engine (no profile: EDGESPEC_PROFILES is a new
folder). A floor ends rounds at their first token, a draft step for nothing, which the engine prices from the rate
it sees (DraftLength.floor_rate). Run alone; about a minute per floor with the F16 1.5B target.

    .venv/bin/python bench/draft_floor.py -m TARGET.gguf -d DRAFT.gguf [--floors 0.5,0.9] [-n 64]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

PROMPTS = ["Write a short story about a lighthouse keeper who finds a message in a bottle.",
           "Translate into French: The weather was cold, so we stayed inside and read books all afternoon.",
           "Explain in a paragraph why the sky is blue.",
           "Write a Python function that returns the n-th Fibonacci number iteratively."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--draft", required=True)
    ap.add_argument("--floors", default="0.5,0.9")
    ap.add_argument("-n", type=int, default=64)
    a = ap.parse_args()
    os.environ["EDGESPEC_PROFILES"] = tempfile.mkdtemp()

    import subprocess
    import time

    import edgespec

    where = os.path.dirname(edgespec.__file__)
    rev = subprocess.run(["git", "-C", where, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    print(f"# bench/draft_floor.py {' '.join(sys.argv[1:])}   ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"edgespec {rev} from {where})")
    for floor in (float(f) for f in a.floors.split(",")):
        spent = {"plain": [0.0, 0], "draft": [0.0, 0]}
        with edgespec.Engine.load(a.model, draft=a.draft, n_threads=2, draft_p_min=floor) as e:
            for prompt in PROMPTS:
                tokens = e.tokenize(prompt, chat_format=True)
                for mode in spent:
                    r = e.generate(tokens, max_tokens=a.n, speculative=mode == "draft")
                    spent[mode][0] += sum(x.seconds for x in r.stats.rounds)
                    spent[mode][1] += len(r.tokens)
                    reasons = " ".join(f"{k}:{v}" for k, v in sorted(r.stats.rounds_by_reason.items()))
                    ms = 1000 * sum(x.seconds for x in r.stats.rounds) / len(r.tokens)
                    print(f"floor {floor:g}  {mode:<5} {ms:6.1f} ms/token  {prompt[:30]:<30}  {reasons}", flush=True)
        per = {m: s / n for m, (s, n) in spent.items()}
        print(f"floor {floor:g}: plain {1000 * per['plain']:.1f} ms/token, drafted {1000 * per['draft']:.1f}: "
              f"x{per['plain'] / per['draft']:.3f}", flush=True)


if __name__ == "__main__":
    main()
