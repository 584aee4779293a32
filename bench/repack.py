"""Why a Q4_K target over an rpc-server is slower than here even on loopback: the decode's own cost with the
weights in the file's layout (as an rpc-server computes from them: it is sent plain buffers) against this CPU's
repacked layout (llama.cpp's default where it has kernels for it). Target decodes of 1 and K+1 rows after a
200-token prompt: locally repacked, locally not (`Model(repack=False)`, llama.cpp's --no-repack), and over a
loopback rpc-server this script starts; interleaved, medians. Run it alone (bench/results/repack.log).

    .venv/bin/python bench/repack.py -m ~/.cache/edgespec-bench/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
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


def decode_ms(ctx, prompt: list[int], rows: int) -> float:
    """One decode of `rows` rows at the end of the prompt, its logits read (so it has finished, over a server
    too), the cache put back."""
    t0 = time.perf_counter()
    ctx.decode(prompt[-1:] * rows, range(rows))
    ms = 1000 * (time.perf_counter() - t0)
    ctx.truncate(len(prompt))
    return ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=5, help="the verify's rows besides one (K+1)")
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    from edgespec.backend import Context, Model

    if not SERVER.exists():
        sys.exit(f"{SERVER} is missing: run scripts/build-rpc-server.sh (or EDGESPEC_RPC=1 scripts/setup.sh)")
    port = free_port()
    server = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", str(args.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        settings = {"repacked": dict(), "file layout": dict(repack=False), "rpc-server": dict(rpc=[f"127.0.0.1:{port}"])}
        contexts = {}
        for name, kw in settings.items():
            model = Model(args.model, **kw)
            contexts[name] = Context(model, n_ctx=1024, n_threads=args.threads)
        prompt = contexts["repacked"].model.tokenize("The quick brown fox jumps over the lazy dog. " * 20)[:200]
        for ctx in contexts.values():
            ctx.decode(prompt, [len(prompt) - 1])
            for rows in (1, args.rows):  # each shape once before timing (over a server the first is slow)
                decode_ms(ctx, prompt, rows)
        times: dict[str, dict[int, list[float]]] = {n: {1: [], args.rows: []} for n in contexts}
        for _ in range(args.reps):
            for name, ctx in contexts.items():
                for rows in (1, args.rows):
                    times[name][rows].append(decode_ms(ctx, prompt, rows))
        print(f"{Path(args.model).name}, {args.threads} threads, decode after a {len(prompt)}-token prompt, median of "
              f"{args.reps} (interleaved), ms:")
        base = {r: statistics.median(t) for r, t in times["repacked"].items()}
        for name, by_rows in times.items():
            med = {r: statistics.median(t) for r, t in by_rows.items()}
            print(f"  {name:<12} 1 row {med[1]:7.1f} ({med[1] / base[1]:.2f}x)   {args.rows} rows {med[args.rows]:7.1f} "
                  f"({med[args.rows] / base[args.rows]:.2f}x)")
        for ctx in contexts.values():
            ctx.close()
            ctx.model.close()
    finally:
        server.kill()


if __name__ == "__main__":
    main()
