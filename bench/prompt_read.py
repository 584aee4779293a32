"""Where a prompt's time goes: plain generations after prompts of several lengths, locally and over a loopback
rpc-server this script starts, each line the prompt's time (stats.prompt_s), the first round's and the median of the
next ones. Before ef81f66 a prompt read over an rpc-server returned once it was sent and its work went to the first
round; before 43d9c38 the first round decoded the prompt's last token. Run it alone. An older revision: run this
file with PYTHONPATH set to a worktree of it (bench/results/prompt-read.log).

    .venv/bin/python bench/prompt_read.py -m ~/.cache/edgespec-bench/SmolLM2-135M-Instruct-f16.gguf
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("GOMP_SPINCOUNT", "10000")  # (before llama.cpp loads, at both ends, as bench/rpc.py does)
sys.path.insert(0, str(Path(__file__).parent))
from rpc import SERVER, free_port  # noqa: E402

WORDS = "The quick brown fox jumps over the lazy dog near the river bank at dawn. "


def run(model: str, where: str, lengths: list[int], threads: int) -> None:
    import edgespec

    e = edgespec.Engine.load(model, n_ctx=2048, n_threads=threads, rpc=[where] if where != "local" else ())
    try:
        text = e.tokenize(WORDS * 200)
        for n in lengths:
            r = e.generate(text[:n], max_tokens=12, speculative=False)
            times = [1000 * x.seconds for x in r.stats.rounds]
            print(f"{where:>16} prompt {n:5d} tokens: prompt_s {1000 * r.stats.prompt_s:7.1f} ms; rounds ms: first "
                  f"{times[0]:7.1f}, then median {statistics.median(times[1:]):6.1f}", flush=True)
    finally:
        e.close(remember=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--lengths", default="40,600,1200")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if not SERVER.exists():
        sys.exit(f"no {SERVER}: run scripts/build-rpc-server.sh")
    lengths = [int(x) for x in a.lengths.split(",")]
    port = free_port()
    server = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", str(a.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        run(a.model, "local", lengths, a.threads)
        run(a.model, f"127.0.0.1:{port}", lengths, a.threads)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
