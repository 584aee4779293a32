"""Serving benchmark: per-request time to first token and ms/token (p50, p95) and aggregate tokens/s at several
levels of concurrency, over the OpenAI HTTP API, for

  edgespec serve   with each request's speculation `off`, `auto` (the server's measured choice) and `on` (the
                   draft model at a fixed K);
  llama-server     built from the vendored llama.cpp (bench/build-llama-tools.sh llama-server), with the same pair
                   (-md, --spec-type draft-simple) and with no draft, when its binary is there;
  llama-cpp-python's server (`python -m llama_cpp.server`, the same build edgespec uses) with no draft and with
                   its prompt-lookup decoding (it has no draft-model speculation), when its packages are there
                   (see LCP_SERVER_DEPS below).

Same prompts (edgespec/workloads.json, single-turn), greedy, same max tokens; each variant on a fresh server of its own, nothing
else running on the machine; each level runs --repeat times, each run with a system line of its own (no run finds
the prompts of the one before in a cache). With --together the servers of the variants compared are up at once
and their runs alternate (request by request at one client), so the machine's slow minutes fall on all alike; use
it for the ratios that matter (edgespec auto against off). Outputs are compared with edgespec's `off` run
(lossless check). Prints a table; writes bench/results/serve-<config>.json (or --out).

    .venv/bin/python bench/serve.py --config compute --variants edgespec:off,edgespec:auto --together --repeat 2
    .venv/bin/python bench/serve.py --config compute --repeat 1      # every variant, one server at a time
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
LLAMA_SERVER = ROOT / "build" / "llama-tools" / "bin" / "llama-server"
# llama-cpp-python's own server: its extra's packages installed apart, so edgespec's environment stays as set up:
#   .venv/bin/pip install --target build/lcp-server-deps 'fastapi>=0.100' 'pydantic-settings>=2.0.1' \
#       'sse-starlette>=1.6.1' 'starlette-context>=0.3.6,<0.4' PyYAML
LCP_SERVER_DEPS = ROOT / "build" / "lcp-server-deps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv: list[str], url: str, timeout: float = 600, env: dict | None = None,
          ready: str = "/health") -> subprocess.Popen:
    """Start a server; return once `ready` answers 200 (llama-cpp-python's has no /health: it listens once loaded).
    Its log goes to a file: a pipe nobody reads fills up and stops a chatty server (llama.cpp's load log) dead."""
    log = tempfile.NamedTemporaryFile(prefix="serve-bench-", suffix=".log", delete=False)
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env)
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{argv[0]} exited: {Path(log.name).read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(url + ready, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{argv[0]} did not come up in {timeout:.0f} s (its log: {log.name})")


def one(url: str, prompt: str, max_tokens: int, extra: dict, system: str = "You are a helpful assistant.") -> dict:
    """One streamed chat request: time to first token, generation time, tokens, text (or the error, when the
    server dropped it: llama-cpp-python's server does under concurrent streams)."""
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    t0 = time.perf_counter()
    first, text, n = None, [], None
    try:
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
    except httpx.HTTPError as e:
        return {"ttft": time.perf_counter() - t0, "ms_per_token": float("nan"), "tokens": len(text),
                "text": "".join(text), "error": f"{type(e).__name__}: {e}"}
    end = time.perf_counter()
    first = first or end
    n = n if n is not None else len(text)
    return {"ttft": first - t0, "ms_per_token": 1000 * (end - first) / max(n - 1, 1), "tokens": n, "text": "".join(text)}


def rounds(url: str) -> dict:
    """edgespec's sequence rounds by why they drafted or not, and the share of step time spent deciding (from
    /metrics, so far in the server's life)."""
    out, seconds = {}, {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith('edgespec_rounds_total{reason="'):
            out[line.split('"')[1]] = int(float(line.rsplit(" ", 1)[1]))
        for name in ("step", "decide"):
            if line.startswith(f"edgespec_{name}_seconds_total "):
                seconds[name] = float(line.rsplit(" ", 1)[1])
    if seconds.get("step"):
        out["decide_share"] = round(seconds.get("decide", 0.0) / seconds["step"], 4)
    return out


def level(url: str, prompts: list[str], concurrency: int, max_tokens: int, extra: dict, session: str) -> list[dict]:
    """All prompts, `concurrency` clients at once (each takes the next prompt when its last answer is done); each
    answer's numbers, and the wall time of the whole level in the first."""
    results: dict[int, dict] = {}
    todo = list(enumerate(prompts))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i, p = todo.pop(0)
            # a system line of this run's own: no run finds the prompts of the one before in a cache
            results[i] = one(url, p, max_tokens, extra, f"You are a helpful assistant (session {session}).")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    rs = [results[i] for i in range(len(prompts))]
    rs[0]["wall"] = wall
    return rs


def summary(runs: list[list[dict]], concurrency: int) -> dict:
    """Repeats of one level pooled: percentiles over every answer, tokens/s as all tokens over all wall time."""
    rs = [r for run in runs for r in run]

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    ok = [r for r in rs if "error" not in r] or rs
    ttft, mspt = [r["ttft"] * 1000 for r in ok], [r["ms_per_token"] for r in ok]
    wall = sum(run[0]["wall"] for run in runs)
    return {"concurrency": concurrency, "ttft_p50": statistics.median(ttft), "ttft_p95": pct(ttft, 0.95),
            "ms_per_token_p50": statistics.median(mspt), "ms_per_token_p95": pct(mspt, 0.95),
            "tokens": sum(r["tokens"] for r in rs), "seconds": wall, "repeats": len(runs),
            "failed": sum("error" in r for r in rs),
            "tokens_per_s": sum(r["tokens"] for r in rs) / wall,
            "tokens_per_s_each": [sum(r["tokens"] for r in run) / run[0]["wall"] for run in runs],
            "texts": [r["text"] for r in runs[0]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=["compute", "memory"], default="compute",
                        help="compute: the Q4_K_M target; memory: its F16 copy (written on first use)")
    parser.add_argument("--levels", default="1,2,4,8")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each level per variant")
    parser.add_argument("--together", action="store_true",
                        help="all variants' servers up at once, their runs alternated (compare few variants)")
    parser.add_argument("--draft-max", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-llama-server", action="store_true")
    parser.add_argument("--variants", help="only these, e.g. edgespec:off,edgespec:auto (default: all)")
    parser.add_argument("--out", help="results file (default bench/results/serve-CONFIG.json)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every answer runs to --max-tokens (llama-server's ignore_eos): equal lengths, so a "
                             "near-tie that ends one answer early does not change a level's tail")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    sys.path.insert(0, str(ROOT / "bench"))
    from pairs import load_work, models_for  # noqa: E402

    prompts = [w["prompt"] for w in load_work(limit=args.prompts)][: args.prompts]  # categories interleaved
    folder = Path(os.environ.get("EDGESPEC_BENCH_MODELS") or Path.home() / ".cache" / "edgespec-bench")
    target, draft = models_for(args.config, folder)
    parallel = max(levels)

    def edgespec(port):
        return [str(ROOT / ".venv" / "bin" / "edgespec"), "serve", "-m", str(target), "-d", str(draft), "--port",
                str(port), "--parallel", str(parallel), "-c", "2048", "-k", str(args.draft_max), "--threads",
                str(args.threads)]

    def mode(m):
        return {"speculative": {"mode": m}}

    # Each variant: (server, variant, argv for a port, request fields); a fresh server process each.
    variants = [("edgespec", v, edgespec, mode(m)) for v, m in (("off", "off"), ("auto", "auto"), ("on", "draft"))]
    if LLAMA_SERVER.exists() and not args.no_llama_server:
        def llama(with_draft):
            def argv(port):
                cmd = [str(LLAMA_SERVER), "-m", str(target), "-np", str(parallel), "-c", str(2048 * parallel), "-t",
                       str(args.threads), "--host", "127.0.0.1", "--port", str(port)]
                if with_draft:
                    cmd += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max",
                            str(args.draft_max), "-td", str(args.threads)]
                return cmd
            return argv

        variants += [("llama-server", "no draft", llama(False), {}), ("llama-server", "draft", llama(True), {})]
    if LCP_SERVER_DEPS.exists() and not args.no_llama_server:
        def lcp(lookup):
            def argv(port):
                cmd = [str(ROOT / ".venv" / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(target),
                       "--n_ctx", "2048", "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
                       "--host", "127.0.0.1", "--port", str(port)]
                if lookup:
                    cmd += ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens",
                            str(args.draft_max)]
                return cmd
            return argv

        variants += [("llama-cpp-py", "no draft", lcp(False), {}), ("llama-cpp-py", "lookup", lcp(True), {})]
    if args.variants:
        keep = args.variants.split(",")
        variants = [v for v in variants if f"{v[0]}:{v[1]}" in keep]
    if args.ignore_eos:
        variants = [(n, v, a, {**extra, "ignore_eos": True}) for n, v, a, extra in variants]
    # --together: every variant's server up at once (idle ones wait without computing), the variants alternated
    # request by request at one client and level by level above, so a slow minute of the machine falls on all
    # alike. Otherwise one server at a time.
    groups = [variants] if args.together else [[v] for v in variants]
    table, reference = [], {}
    for group in groups:
        procs, urls = [], []
        try:
            for name, variant, make, extra in group:
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                lcp_ = name == "llama-cpp-py"
                procs.append(start(make(port), url, ready="/v1/models" if lcp_ else "/health",
                                   env=dict(os.environ, PYTHONPATH=str(LCP_SERVER_DEPS)) if lcp_ else None))
                urls.append(url)
                one(url, "Say hello.", 8, extra)  # warm: first decode shapes, calibration (not in the set)
            for c in levels:
                runs: list[list] = [[] for _ in group]
                for rep in range(args.repeat):
                    # the same system line for every variant of a run (each has its own server, so no cache
                    # holds another's prompts), a new one per run
                    if c == 1:
                        done: list[list] = [[] for _ in group]
                        for i, p in enumerate(prompts):
                            for j in [(i + k) % len(group) for k in range(len(group))]:
                                done[j] += level(urls[j], [p], 1, args.max_tokens, group[j][3], f"1.{rep}.{i}")
                        for j, rs in enumerate(done):
                            rs[0]["wall"] = sum(r.pop("wall") for r in rs)
                            runs[j].append(rs)
                        continue
                    for j in [(rep + k) % len(group) for k in range(len(group))]:
                        runs[j].append(level(urls[j], prompts, c, args.max_tokens, group[j][3], f"{c}.{rep}"))
                for (name, variant, _, _), url, rs in zip(group, urls, runs):
                    r = summary(rs, c)
                    r.update(server=name, variant=variant)
                    if name == "edgespec" and variant == "off":
                        reference[c] = r["texts"]
                    same = sum(a == b for a, b in zip(r["texts"], reference.get(c, r["texts"])))
                    r["identical_to_off"] = same
                    if name == "edgespec":  # why rounds drafted or not, so far in this server's life
                        r["rounds"] = rounds(url)
                    table.append(r)
                    each = "/".join(f"{x:.1f}" for x in r["tokens_per_s_each"])
                    print(f"{name:<13}{variant:<9} c={c}  ttft p50 {r['ttft_p50']:7.0f} ms  p95 {r['ttft_p95']:7.0f}  "
                          f"ms/token p50 {r['ms_per_token_p50']:6.1f} p95 {r['ms_per_token_p95']:6.1f}  "
                          f"{r['tokens_per_s']:6.1f} tok/s ({each})  identical to edgespec off: {same}/{len(prompts)}"
                          + (f"  FAILED requests: {r['failed']}" if r["failed"] else "")
                          + (f"  rounds so far: {r['rounds']}" if "rounds" in r else ""), flush=True)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=60)
    base = {r["concurrency"]: r for r in table if r["server"] == "edgespec" and r["variant"] == "off"}
    print("\naggregate tokens/s relative to edgespec with speculation off, same run (pooled over the repeats; with "
          "--together also the median of each repeat's ratio to off's run beside it):")
    for r in table:
        if r["concurrency"] in base:
            b = base[r["concurrency"]]
            r["vs_off"] = r["tokens_per_s"] / b["tokens_per_s"]
            pairs = [x / y for x, y in zip(r["tokens_per_s_each"], b["tokens_per_s_each"])]
            r["vs_off_paired_median"] = statistics.median(pairs)
            paired = (f"  paired median {r['vs_off_paired_median']:.2f}x ({', '.join(f'{x:.2f}' for x in pairs)})"
                      if args.together and len(pairs) > 1 else "")
            print(f"  {r['server']:<13}{r['variant']:<9} c={r['concurrency']}: {r['vs_off']:.2f}x{paired}")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"serve-{args.config}.json"
    out.write_text(json.dumps({"command": " ".join(sys.argv), "levels": table}, indent=1) + "\n")
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
