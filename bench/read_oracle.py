"""How much of the hybrid's shortfall against its better part is the choice of which texts its draft model reads.

A hybrid whose draft model does not read a text's prompt runs that text as prompt lookup alone; one that reads it
runs lookup and the draft model together. An oracle that knew, for each text, which of the two is faster is the
most any rule for reading (edgespec/reading.py) could reach; where even it trails the better of the draft model
alone and lookup alone in a category, what is left is how the two share rounds (the chain's plan), not the reading.

    .venv/bin/python bench/read_oracle.py bench/results/replay-memory.json --tune --skip 1
    .venv/bin/python bench/read_oracle.py bench/results/replay-memory.json --tune --skip 1 --verify-slope 0.12 \
        --target-scale 1.35

The arguments are `bench/replay.py run`'s (-n 64 unless given). Two replays: the usual one (plain, the draft model,
lookup, the hybrid), and plain and the hybrid with its draft model reading every prompt (Reading.reading_pays
answering yes, in that replay's process only). Per category, per generated token, each against plain in the same
replay: the draft model, lookup, the hybrid as it decides, the hybrid reading always, the better of never and always
reading over the whole category (by_cat: a rule that knew each prompt's category), and the oracle (each text the
faster of lookup's and the always-reading hybrid's); then how many categories each of the last four has within 2%
of the better of the draft model and lookup. About 10 s; the figures are exact for the replay's costs.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPLAY = Path(__file__).with_name("replay.py")


def _replay(args: list[str], out: Path, always_read: bool) -> dict:
    modes = ["--modes", "plain,hybrid"] if always_read else ["--modes", "plain,draft,lookup,hybrid"]
    argv = [str(REPLAY), "run", *args, *modes, "--json", str(out)]
    code = ("import runpy, sys\n"
            "from edgespec.reading import Reading\n"
            + ("Reading.reading_pays = lambda self, *a, **k: True\n" if always_read else "")
            + f"sys.argv = {argv!r}\n"
            f"runpy.run_path({str(REPLAY)!r}, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode:  # replay.py's own one-line complaint (a bad argument, a missing recording), not a traceback
        lines = r.stderr.strip().splitlines()
        sys.exit(f"read_oracle.py: the replay failed: {lines[-1] if lines else f'exit {r.returncode}'}")
    return json.loads(out.read_text())["rows"]


def _speedup(plain: list, items: list) -> float:
    t_plain = sum(t for t, _ in plain) / sum(n for _, n in plain)
    return t_plain / (sum(t for t, _ in items) / sum(n for _, n in items))


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        sys.exit(__doc__)
    if "-n" not in args and "--max-tokens" not in args:
        args += ["-n", "64"]
    with tempfile.TemporaryDirectory() as tmp:
        usual = _replay(args, Path(tmp, "usual.json"), False)
        always = _replay(args, Path(tmp, "always.json"), True)
    names = ("hybrid", "always", "by_cat", "oracle")
    within = dict.fromkeys(names, 0)
    print(f"bench/read_oracle.py {' '.join(args)}")
    print(f"{'category':16}{'draft':>8}{'lookup':>8}{'hybrid':>8}{'always':>8}{'by_cat':>8}{'oracle':>8}   "
          "hybrid / always / by_cat / oracle against the better part")
    categories = [c for c in usual["plain"] if c != "overall"]
    for cat in categories:
        plain = usual["plain"][cat]["items"][0]
        draft, lookup, hybrid = (usual[m][cat]["items"][0] for m in ("draft", "lookup", "hybrid"))
        reads = always["hybrid"][cat]["items"][0]
        oracle = [min(a, b, key=lambda x: x[0] / max(x[1], 1)) for a, b in zip(lookup, reads)]  # (no tokens: no division)
        s = {m: _speedup(plain, x) for m, x in (("draft", draft), ("lookup", lookup), ("hybrid", hybrid),
                                                ("always", reads), ("oracle", oracle))}
        s["by_cat"] = max(s["lookup"], s["always"])
        better = max(s["draft"], s["lookup"])
        ratios = [s[m] / better for m in names]
        for m, r in zip(names, ratios):
            within[m] += r >= 0.98
        print(f"{cat:16}" + "".join(f"{s[m]:7.2f}x" for m in ("draft", "lookup", *names))
              + "   " + " / ".join(f"{r:.2f}" for r in ratios))
    print("within 2% of the better part: " + ", ".join(f"{m} {within[m]} of {len(categories)}" for m in names))


if __name__ == "__main__":
    main()
