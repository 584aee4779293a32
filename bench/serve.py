"""Serving benchmark: per-request time to first token and ms/token (p50, p95) and aggregate tokens/s at several
levels of concurrency, over the OpenAI HTTP API, for

  edgespec serve   with each request's speculation `auto` (the server's measured choice), `on` (the draft model at
                   a fixed K) and `off`, one server process for all three;
  llama-server     built from the vendored llama.cpp (bench/build-llama-tools.sh llama-server), with the same pair
                   (-md, --spec-type draft-simple) and with no draft, when its binary is there.

Same prompts (bench/workloads.json), greedy, same max tokens; each server runs alone on the machine. Outputs are
compared with edgespec's `off` run (lossless check). Prints a table; writes bench/results/serve-<config>.json.

    .venv/bin/python bench/serve.py --config compute --levels 1,2,4 --prompts 8 --max-tokens 48
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
LLAMA_SERVER = ROOT / "build" / "llama-tools" / "bin" / "llama-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], url: str, timeout: float = 600) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{argv[0]} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{argv[0]} did not come up in {timeout:.0f} s")


def one(url: str, prompt: str, max_tokens: int, extra: dict, system: str = "You are a helpful assistant.") -> dict:
    """One streamed chat request: time to first token, generation time, tokens, text."""
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    t0 = time.perf_counter()
    first, text, n = None, [], None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    first = first or time.perf_counter()
                    text.append(piece)
    end = time.perf_counter()
    first = first or end
    n = n if n is not None else len(text)
    return {"ttft": first - t0, "ms_per_token": 1000 * (end - first) / max(n - 1, 1), "tokens": n, "text": "".join(text)}


def level(url: str, prompts: list[str], concurrency: int, max_tokens: int, extra: dict) -> dict:
    """All prompts, `concurrency` clients at once (each takes the next prompt when its last answer is done)."""
    results: dict[int, dict] = {}
    todo = list(enumerate(prompts))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i, p = todo.pop(0)
            # a system line of this level's own: no level finds the prompts of the one before in a cache
            results[i] = one(url, p, max_tokens, extra, f"You are a helpful assistant (session {concurrency}).")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rs = [results[i] for i in range(len(prompts))]

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    ttft, mspt = [r["ttft"] * 1000 for r in rs], [r["ms_per_token"] for r in rs]
    return {"concurrency": concurrency, "ttft_p50": statistics.median(ttft), "ttft_p95": pct(ttft, 0.95),
            "ms_per_token_p50": statistics.median(mspt), "ms_per_token_p95": pct(mspt, 0.95),
            "tokens": sum(r["tokens"] for r in rs), "seconds": wall,
            "tokens_per_s": sum(r["tokens"] for r in rs) / wall, "texts": [r["text"] for r in rs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["compute", "memory"], default="compute",
                        help="compute: the Q4_K_M target; memory: its F16 copy (written on first use)")
    parser.add_argument("--levels", default="1,2,4,8")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--draft-max", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-llama-server", action="store_true")
    parser.add_argument("--variants", help="only these, e.g. edgespec:off,edgespec:auto (default: all)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    sys.path.insert(0, str(ROOT / "bench"))
    from run import load_work, models_for  # noqa: E402

    prompts = [w["prompt"] for w in load_work(limit=args.prompts)][: args.prompts]  # categories interleaved
    folder = Path(os.environ.get("EDGESPEC_BENCH_MODELS") or Path.home() / ".cache" / "edgespec-bench")
    target, draft = models_for(args.config, folder)
    parallel = max(levels)
    # Every variant gets a server of its own, started fresh: no prompt cache carried from one variant to the next.
    def edgespec(port, mode):
        return ([str(ROOT / ".venv" / "bin" / "edgespec"), "serve", "-m", str(target), "-d", str(draft), "--port",
                 str(port), "--parallel", str(parallel), "-c", "2048", "-k", str(args.draft_max), "--threads",
                 str(args.threads)], {"speculative": {"mode": mode}})

    runs = [("edgespec", "off", lambda p: edgespec(p, "off")), ("edgespec", "on", lambda p: edgespec(p, "draft")),
            ("edgespec", "auto", lambda p: edgespec(p, "auto"))]
    if LLAMA_SERVER.exists() and not args.no_llama_server:
        def llama(port, with_draft):
            argv = [str(LLAMA_SERVER), "-m", str(target), "-np", str(parallel), "-c", str(2048 * parallel), "-t",
                    str(args.threads), "--host", "127.0.0.1", "--port", str(port)]
            if with_draft:
                argv += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.draft_max),
                         "-td", str(args.threads)]
            return argv, {}

        runs += [("llama-server", "no draft", lambda p: llama(p, False)), ("llama-server", "draft", lambda p: llama(p, True))]
    if args.variants:
        runs = [r for r in runs if f"{r[0]}:{r[1]}" in args.variants.split(",")]
    table, reference = [], {}
    for name, variant, make in runs:
        port = free_port()
        argv, extra = make(port)
        url = f"http://127.0.0.1:{port}"
        proc = start(argv, url)
        try:
            one(url, "Say hello.", 8, extra)  # warm: first decode shapes, calibration (a prompt not in the set)
            for c in levels:
                r = level(url, prompts, c, args.max_tokens, extra)
                r.update(server=name, variant=variant)
                if name == "edgespec" and variant == "off":
                    reference[c] = r["texts"]
                same = sum(a == b for a, b in zip(r["texts"], reference.get(c, r["texts"])))
                r["identical_to_off"] = same
                table.append(r)
                print(f"{name:<13}{variant:<9} c={c}  ttft p50 {r['ttft_p50']:7.0f} ms  p95 {r['ttft_p95']:7.0f}  "
                      f"ms/token p50 {r['ms_per_token_p50']:6.1f} p95 {r['ms_per_token_p95']:6.1f}  "
                      f"{r['tokens_per_s']:6.1f} tok/s  identical to edgespec off: {same}/{len(prompts)}", flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    base = {r["concurrency"]: r["tokens_per_s"] for r in table if r["server"] == "edgespec" and r["variant"] == "off"}
    print("\naggregate tokens/s relative to edgespec with speculation off, same run:")
    for r in table:
        print(f"  {r['server']:<13}{r['variant']:<9} c={r['concurrency']}: {r['tokens_per_s'] / base[r['concurrency']]:.2f}x")
    out = ROOT / "bench" / "results" / f"serve-{args.config}.json"
    out.write_text(json.dumps({"command": " ".join(sys.argv), "levels": table}, indent=1) + "\n")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
