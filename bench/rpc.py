#!/usr/bin/env python3
"""Speculation over llama.cpp's RPC backend: the target on an rpc-server, the draft here.

For each added one-way delay (default 0, 0.5 and 2 ms) it runs `edgespec bench --rpc` with the target on one
rpc-server on this machine (loopback) behind a proxy that holds every chunk of data that long in each direction,
and once with the target local, each a separate process, one after the other. It prints, per setting, plain
ms/token, each mode's speed-up over plain in the same run, and the network's cost per decode (plain over RPC
minus plain locally). `tc netem` in a network namespace is the usual way to add latency; this machine's kernel has
no netem qdisc, so the delay is added in user space (the proxy's own overhead is inside the 0 ms figure).

    bench/rpc.py --config memory --modes plain,draft,draft:4 [--delays 0,0.5,2] [-- bench options]
    bench/rpc.py --target MODEL --modes plain,lookup      (no draft: prompt lookup alone)

Run it alone: the rpc-server computes on the same cores as everything else.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402

SERVER = Path(sys.prefix) / "bin" / "rpc-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DelayProxy:
    """127.0.0.1:port -> upstream, every chunk held `delay` seconds in each direction, order kept."""

    def __init__(self, upstream: int, delay: float) -> None:
        self.port, self.upstream, self.delay = free_port(), upstream, delay
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_until_complete(server.serve_forever())

    async def _serve(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        for s in (writer, up_writer):
            s.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, reader, writer) -> None:
        queue: asyncio.Queue = asyncio.Queue()

        async def send():
            while True:
                due, data = await queue.get()
                if data is None:
                    writer.close()
                    return
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        while True:
            data = await reader.read(1 << 20)
            queue.put_nowait((time.perf_counter() + self.delay, data or None))
            if not data:
                break
        await sender


def bench(args, extra: list[str], rpc: str | None, out: Path) -> dict:
    target, draft = (Path(args.target), None) if args.target and not args.draft else pairs.pair_of(args)
    cmd = [sys.executable, "-m", "edgespec", "bench", "-m", str(target), *(["-d", str(draft)] if draft else []),
           "--threads", str(args.threads), "--modes", args.modes, "--json", str(out), *extra]
    if rpc:
        cmd += ["--rpc", rpc]
    print("#", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pairs.add_model_args(ap)
    ap.add_argument("--modes", default="plain,draft,draft:4")
    ap.add_argument("--delays", default="0,0.5,2", help="one-way delays in ms to add (0: loopback through the proxy)")
    ap.add_argument("--json", dest="json_path", help="write every run's figures here")
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if not SERVER.exists():
        sys.exit(f"no {SERVER}: run scripts/build-rpc-server.sh")
    port = free_port()
    server = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", str(args.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = {}
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as tmp:
            runs["local"] = bench(args, extra, None, Path(tmp) / "local.json")
            for d in (float(x) for x in args.delays.split(",")):
                proxy = DelayProxy(port, d / 1000)
                runs[f"rpc+{d:g}ms"] = bench(args, extra, f"127.0.0.1:{proxy.port}", Path(tmp) / f"rpc{d}.json")
    finally:
        server.kill()
    modes = [m for m in args.modes.split(",") if m != "plain"]
    print(f"\n{'setting':<14}{'plain ms/tok':>13}{'network/decode':>16}" + "".join(f"{m:>12}" for m in modes))
    local_ms = runs["local"]["rows"]["plain"]["overall"]["ms_per_token"]
    for name, data in runs.items():
        rows = data["rows"]
        plain = rows["plain"]["overall"]["ms_per_token"]
        net = "-" if name == "local" else f"{plain - local_ms:.1f} ms"
        print(f"{name:<14}{plain:>13.1f}{net:>16}" + "".join(f"{rows[m]['overall']['speedup']:>11.2f}x" for m in modes))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"command": " ".join(sys.argv), "runs": runs}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
