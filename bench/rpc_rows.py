#!/usr/bin/env python3
"""What crosses the link in a decode over llama.cpp's RPC backend, and what a verify row costs on a link of limited
speed.

Every decode brings back the logits of each row asked for, n_vocab x 4 bytes a row (192 KB at SmolLM2's 49,152-token
vocabulary, 594 KB at Qwen2.5's 151,936), and a decode whose batch differs in shape from the one before it (a plain
step after a verify, a verify of another length) first sends the server its whole compute graph again: llama.cpp's
RPC client reuses only the last graph. On loopback both are nearly free; on a real link they are not.

The script starts an rpc-server on this machine and reaches it through bench/rpc.py's proxy (a one-way delay and a
link speed in each direction). It counts the bytes each way of a decode of 1 and of --rows rows, repeated and after
the other shape, then times the same four decodes after a 200-token prompt here and over the link at each speed,
interleaved, medians.

    bench/rpc_rows.py -m MODEL.gguf [--rows 5] [--delay-ms 0.5] [--mbit 1000,0] [--output-here]  (0: no limit)

With --output-here, each link also carries an engine whose output layer stays here (edgespec's --output-here), so
that its decodes bring back a hidden state a row instead of the logits.

Run it alone: the rpc-servers compute on the same cores as everything else (libgomp's idle threads spin at most
10,000 times at both ends, as in bench/rpc.py; GOMP_SPINCOUNT set beforehand wins).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rpc import SERVER, DelayProxy, start_server  # noqa: E402


def traffic(engine, proxy: DelayProxy, rows: int) -> dict[str, tuple[float, float]]:
    """KB up and down of one decode: of 1 row and of `rows` rows, each repeated and after the other shape."""
    ctx = engine.target
    ctx.decode(list(range(1000, 1200)), [199])
    held = len(ctx.tokens)

    def one(m: int) -> tuple[float, float]:
        proxy.bytes.update(up=0, down=0)
        ctx.decode([2000] * m, range(m))
        time.sleep(0.05)  # (the proxy's last chunks)
        ctx.truncate(held)
        return proxy.bytes["up"] / 1024, proxy.bytes["down"] / 1024
    one(1), one(rows)
    out = {"1 row, after a decode of another shape": one(1), "1 row, repeated": one(1),
           f"{rows} rows, after a decode of another shape": one(rows), f"{rows} rows, repeated": one(rows)}
    ctx.truncate(0)
    return out


def shapes(settings, rows: int, reps: int = 9) -> dict[str, dict[str, float]]:
    """Median ms of a decode of 1 and of `rows` rows after a 200-token prompt, each repeated (the second of two
    alike) and right after a decode of the other shape, per (name, engine); the settings interleaved."""
    import statistics

    prompt = list(range(1000, 1200))
    held = {}
    for name, e in settings:
        e.target.decode(prompt, [len(prompt) - 1])
        held[name] = len(e.target.tokens)
    times: dict[str, dict[str, list[float]]] = {name: {} for name, _ in settings}

    def decode(name, e, m) -> float:
        t0 = time.perf_counter()
        e.target.decode([2000] * m, range(m))
        dt = time.perf_counter() - t0
        e.target.truncate(held[name])
        return 1000 * dt
    for _ in range(reps):
        for name, e in settings:
            decode(name, e, rows)
            times[name].setdefault("1 switched", []).append(decode(name, e, 1))
            times[name].setdefault("1 repeated", []).append(decode(name, e, 1))
            times[name].setdefault("rows switched", []).append(decode(name, e, rows))
            times[name].setdefault("rows repeated", []).append(decode(name, e, rows))
    for name, e in settings:
        e.target.truncate(0)
    return {name: {k: statistics.median(v) for k, v in d.items()} for name, d in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--rows", type=int, default=5, help="the verify's rows (default 5: K = 4)")
    ap.add_argument("--delay-ms", type=float, default=0.5, help="one-way delay of the link (default 0.5 ms)")
    ap.add_argument("--mbit", default="1000,0", help="link speeds in Mbit/s, comma-separated (0: no limit)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--output-here", action="store_true", help="also each link with the output layer kept here")
    a = ap.parse_args()
    if os.environ.get("GOMP_SPINCOUNT") is None:  # as bench/rpc.py --spin: idle threads at both ends spin briefly
        os.environ["GOMP_SPINCOUNT"] = "10000"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if not SERVER.exists():
        sys.exit(f"no {SERVER}: run scripts/build-rpc-server.sh")
    import edgespec

    speeds = [float(x) for x in a.mbit.split(",")]
    links = [(mbit, False) for mbit in speeds] + ([(mbit, True) for mbit in speeds] if a.output_here else [])
    servers = [start_server(a.threads) for _ in links]  # (an rpc-server serves one client)
    engines = []
    try:
        time.sleep(1.0)
        local = edgespec.Engine.load(a.model, n_ctx=1024, n_threads=a.threads)
        engines.append(local)
        proxies = [DelayProxy(port, a.delay_ms / 1000, mbit * 1e6 / 8) for (_, port), (mbit, _) in zip(servers, links)]
        remotes = [edgespec.Engine.load(a.model, n_ctx=1024, n_threads=a.threads, rpc=[f"127.0.0.1:{p.port}"],
                                        output_here=here) for p, (_, here) in zip(proxies, links)]
        engines += remotes
        n_vocab = local.target.model.n_vocab
        print(f"{Path(a.model).name}: a row's logits {n_vocab * 4 / 1024:.0f} KB; one-way delay {a.delay_ms:g} ms",
              flush=True)
        print("\nbytes of one decode over the link, KB up / down:", flush=True)
        for i in sorted({len(speeds) - 1, len(links) - 1}):
            if links[i][1]:
                print("  with the output layer here:", flush=True)
            for what, (up, down) in traffic(remotes[i], proxies[i], a.rows).items():
                print(f"  {what:<42}{up:9.1f} /{down:9.1f}", flush=True)
        names = [(f"{mbit:g} Mbit/s" if mbit else "no limit") + (", output here" if here else "")
                 for mbit, here in links]
        t = shapes([("here", local)] + list(zip(names, remotes)), a.rows)
        print(f"\ndecode time after a 200-token prompt, ms (median of 9, settings interleaved): of 1 and {a.rows} "
              f"rows, "
              f"each repeated and after a decode of the other shape", flush=True)
        for name, v in t.items():
            print(f"  {name:<28}T(1) {v['1 repeated']:6.1f}, after {a.rows} rows {v['1 switched']:6.1f}   "
                  f"T({a.rows}) {v['rows repeated']:6.1f}, after 1 row {v['rows switched']:6.1f}", flush=True)
    finally:
        for e in engines:
            e.close(remember=False)
        for server, _ in servers:
            server.kill()


if __name__ == "__main__":
    main()
