#!/usr/bin/env python3
"""Speculation over llama.cpp's RPC backend: the target on an rpc-server, the draft here.

The target runs on one rpc-server on this machine (loopback) behind a proxy that holds every chunk of data a set
one-way delay in each direction (default 0, 0.5, 2 and 10 ms; `tc netem` in a network namespace is the usual way,
but this machine's kernel has no netem qdisc, so the delay is added in user space, and the proxy is in the path at
0 ms too). First, in this process, the network's cost of one decode: target decodes of 1 and K+1 rows at the end
of a prompt, locally and over the proxy at each delay, interleaved, medians. Then `edgespec bench` runs locally and
over the proxy at each delay, one process each, `--rounds` times with the settings interleaved (noise here is
slow drift as much as jitter), each from no profile, or with `--tune S` from the one `edgespec tune` wrote for
that setting first (each setting has its own endpoint, so its own profile). It prints, per setting, plain
ms/token and each mode's speed-up over plain in the same run (the median over rounds, and each round's).

`--one-process` runs every setting in this one process instead, item by item: an engine per setting (locally, and
per delay over its own rpc-server, an rpc-server serving one client, behind its own proxy), every prompt measured
in every setting before the next prompt, the settings' order rotated. A slow spell of the machine (this one's F16
step drifts between about 85 and 130 ms over minutes) then falls on every setting alike, where one process per
setting meets it in one setting only; the cost is memory: the target's weights once per rpc-server (F16 1.5B: 3.6
GB each). Each round starts every setting's drafting policies anew, as a new process would.

    bench/rpc.py --config memory --modes plain,draft,draft:4 [--delays 0,0.5,2,10] [--rounds 2] [-- bench options]
    bench/rpc.py --target MODEL --modes plain,lookup      (no draft: prompt lookup alone)
    bench/rpc.py --target T.gguf --draft D.gguf ...       (any pair)
    bench/rpc.py --config memory --one-process --delays 0,0.5,2 ...   (all settings in one process, prompt by prompt)

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
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pairs  # noqa: E402

SERVER = Path(sys.prefix) / "bin" / "rpc-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DelayProxy:
    """127.0.0.1:port -> upstream, every chunk held `delay` seconds in each direction, order kept. rate (bytes a
    second, 0: unlimited): each direction is also a link of that speed, a chunk leaving once the ones before it have
    (its size / rate after the later of its arrival and their end), then `delay` on its way. `bytes` counts what
    it passed each way ("up": to the server)."""

    def __init__(self, upstream: int, delay: float, rate: float = 0.0) -> None:
        self.port, self.upstream, self.delay, self.rate = free_port(), upstream, delay, rate
        self.bytes = {"up": 0, "down": 0}
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
        await asyncio.gather(self._pump(reader, up_writer, "up"), self._pump(up_reader, writer, "down"))

    async def _pump(self, reader, writer, way: str) -> None:
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
        free = 0.0  # when this direction's link has sent what it was given
        while True:
            data = await reader.read(1 << 20)
            self.bytes[way] += len(data)
            now = time.perf_counter()
            if self.rate and data:
                free = max(now, free) + len(data) / self.rate
                now = free
            queue.put_nowait((now + self.delay, data or None))
            if not data:
                break
        await sender


def _spin(value: str) -> str:
    if value != "default" and not value.isdigit():
        raise argparse.ArgumentTypeError(f"a spin count (digits) or 'default', not {value!r}")
    return value


def _pair(args) -> tuple[Path, Path | None]:
    """The target and draft the options name (--target alone: no draft, prompt lookup only)."""
    return (Path(args.target), None) if args.target and not args.draft else pairs.pair_of(args)


def run_edgespec(args, command: list[str], rpc: str | None) -> None:
    """Run `edgespec COMMAND` on the pair (profiles: $EDGESPEC_PROFILES, this run's own directory)."""
    target, draft = _pair(args)
    cmd = [sys.executable, "-m", "edgespec", command[0], "-m", str(target), *(["-d", str(draft)] if draft else []),
           "--threads", str(args.threads), *command[1:],
           *(["--rpc", rpc, *(["--output-here"] if args.output_here else [])] if rpc else [])]
    print("#", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def bench(args, extra: list[str], rpc: str | None, out: Path) -> dict:
    run_edgespec(args, ["bench", "--modes", args.modes, "--json", str(out), *extra], rpc)
    return json.loads(out.read_text())


def time_decodes(settings: list[tuple[str, object, Callable[[], None] | None]], rows: int, reps: int = 9) -> dict:
    """Median seconds of a target decode of 1 and `rows` rows after a 200-token prompt, per setting (name, engine,
    and what to do before each timing: a proxy's delay set, or None), the settings interleaved so drift falls on all
    alike; name -> {"1": s, "rows": s}."""
    import statistics

    engines = {id(e): e for _, e, _ in settings}.values()
    prompt = next(iter(engines)).tokenize("The quick brown fox jumps over the lazy dog. " * 20)[:200]
    for e in engines:
        e.target.decode(prompt, [len(prompt) - 1])
        e.calibrate([1, rows])  # shapes allocated
    times: dict[str, list[dict]] = {}
    for _ in range(reps):
        for name, e, before in settings:
            if before is not None:
                before()
            times.setdefault(name, []).append(e.calibrate([1, rows]))
    return {name: {str(m): statistics.median(c[m] for c in cs) for m in (1, rows)} for name, cs in times.items()}


def network_cost(args, proxy: DelayProxy, delays: list[float], rows: int) -> dict:
    """time_decodes locally and over the one proxy at each delay (one engine over it, the delay changed between
    timings)."""
    import edgespec

    target = Path(args.target) if args.target else pairs.pair_of(args)[0]
    local = edgespec.Engine.load(target, n_ctx=1024, n_threads=args.threads)
    remote = edgespec.Engine.load(target, n_ctx=1024, n_threads=args.threads, rpc=[f"127.0.0.1:{proxy.port}"],
                                  output_here=args.output_here)

    def delay(d: float) -> Callable[[], None]:
        return lambda: setattr(proxy, "delay", d / 1000)
    try:
        return time_decodes([("local", local, None)] + [(f"rpc+{d:g}ms", remote, delay(d)) for d in delays], rows)
    finally:
        local.close(remember=False)
        remote.close(remember=False)


def main() -> None:

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pairs.add_model_args(ap)
    ap.add_argument("--modes", default="plain,draft,draft:4")
    ap.add_argument("--delays", default="0,0.5,2,10", help="one-way delays in ms to add (0: loopback through the proxy)")
    ap.add_argument("--mbit", type=float, default=0.0, help="also make each direction of every link this fast, in "
                    "Mbit/s (default 0: loopback's own speed); each decode's logits and graph cross it (rpc_rows.py)")
    ap.add_argument("--output-here", action="store_true", help="keep the target's output layer on this machine over "
                    "each link (edgespec --output-here): a decode brings back hidden states, not logits")
    ap.add_argument("--rounds", type=int, default=2, help="times each setting runs, interleaved (medians reported)")
    ap.add_argument("--json", dest="json_path", help="write every run's figures here")
    ap.add_argument("--summary", metavar="JSON", help="print the table of a saved --json file, run nothing")
    ap.add_argument("--tune", type=int, metavar="SECONDS", help="first run `edgespec tune --seconds SECONDS` in each "
                    "setting, so every bench starts from its own profile (default: none, as on a new machine)")
    ap.add_argument("--one-process", action="store_true", help="every setting in this process, prompt by prompt "
                    "(an rpc-server and an engine per delay: the target's memory once per delay)")
    ap.add_argument("--spin", type=_spin, metavar="COUNT|default",
                    help="GOMP_SPINCOUNT for the rpc-server and every edgespec process of the run, local ones too "
                         "(default: $GOMP_SPINCOUNT if set, else 10000; 'default': libgomp's own). Both ends share "
                         "this machine's cores, and libgomp's idle threads spin about 3 ms after each parallel region "
                         "by default, on the cores the other end is computing on; two hosts do not share cores")
    args, extra = ap.parse_known_args()
    spin = args.spin or os.environ.get("GOMP_SPINCOUNT") or "10000"
    if spin != "default" and os.environ.get("GOMP_SPINCOUNT") != spin and not args.summary:
        os.environ["GOMP_SPINCOUNT"] = spin  # libgomp reads it once, when loaded (pairs loads llama.cpp): start again
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.summary:
        saved = json.loads(Path(args.summary).read_text())
        return summary(saved["runs"], saved["network_s"], saved["modes"])
    extra = [x for x in extra if x != "--"]
    if not SERVER.exists():
        sys.exit(f"no {SERVER}: run scripts/build-rpc-server.sh")
    delays = [float(x) for x in args.delays.split(",")]
    modes = [m for m in args.modes.split(",") if m != "plain"]
    rows = 1 + max([int(m.split(":")[1].split("@")[0]) for m in modes if ":" in m] or [4])
    if args.one_process:
        return one_process(args, extra, delays, modes, rows)
    server, port = start_server(args.threads)
    runs: dict[str, list[dict]] = {}
    try:
        time.sleep(1.0)
        proxy = DelayProxy(port, 0.0, args.mbit * 1e6 / 8)
        net = network_cost(args, proxy, delays, rows)
        show_network(net, rows)
        # a proxy (an endpoint, so a profile) per delay, as each link would be its own host
        rate = args.mbit * 1e6 / 8
        endpoints = {"local": None,
                     **{f"rpc+{d:g}ms": f"127.0.0.1:{DelayProxy(port, d / 1000, rate).port}" for d in delays}}
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["EDGESPEC_PROFILES"] = str(Path(tmp) / "profiles")  # this run's own: none, or tuned here
            if args.tune:
                for name, endpoint in endpoints.items():
                    run_edgespec(args, ["tune", "--seconds", str(args.tune)], endpoint)
            for r in range(args.rounds):
                for name, endpoint in endpoints.items():
                    runs.setdefault(name, []).append(bench(args, extra, endpoint, Path(tmp) / f"{name}-{r}.json"))
    finally:
        server.kill()

    save(args, modes, net, runs)
    summary(runs, net, modes)


def save(args, modes: list[str], net: dict, runs: dict) -> None:
    """--json: every run's figures, with the command, versions, build and machine that produced them."""
    if not args.json_path:
        return
    from edgespec import report

    Path(args.json_path).write_text(json.dumps(
        {**report.provenance(" ".join(["bench/rpc.py", *sys.argv[1:]])), "modes": modes,
         "one_process": args.one_process, "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", "default"),
         "network_s": net, "runs": runs}, indent=1))


def show_network(net: dict, rows: int) -> None:
    """The table of a one-row and a `rows`-row decode's seconds per setting, and what the link adds."""
    print(f"\nnetwork cost of one decode (median of 9, interleaved; T(1) / T({rows}) rows, ms):", flush=True)
    for name, t in net.items():
        r = str(rows)
        extra_ms = "" if name == "local" else (f"   +{1000 * (t['1'] - net['local']['1']):.1f} / "
                                                f"+{1000 * (t[r] - net['local'][r]):.1f} over local")
        print(f"  {name:<12}{1000 * t['1']:8.1f} /{1000 * t[r]:7.1f}{extra_ms}", flush=True)


def start_server(threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    server = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", str(threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return server, port


def _bench_options(extra: list[str]) -> argparse.Namespace:
    """The `edgespec bench` options that pick prompts, for the settings measured in this process."""
    ap = argparse.ArgumentParser(prog="bench/rpc.py --one-process ... --")
    ap.add_argument("--workload")
    pairs.add_prompt_args(ap)
    ap.add_argument("--ctx-size", "-c", type=int, default=4096)
    return ap.parse_args(extra)


def one_process(args, extra: list[str], delays: list[float], modes: list[str], rows: int) -> None:
    """Every setting in this process, prompt by prompt (the module's docstring says why); the same summary."""
    import edgespec
    from edgespec import benchmark, workloads

    opts = _bench_options(extra)
    items = workloads.select(workloads.read_jsonl(opts.workload) if opts.workload else workloads.builtin(),
                             opts.category, opts.limit, opts.skip)
    target, draft = _pair(args)
    all_modes = ["plain", *modes]
    servers, engines = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EDGESPEC_PROFILES"] = str(Path(tmp) / "profiles")  # this run's own: none, or tuned here
        try:
            endpoints: dict[str, str | None] = {"local": None}
            for d in delays:  # an rpc-server per setting (one serves one client), behind its own proxy
                server, port = start_server(args.threads)
                servers.append(server)
                time.sleep(1.0)
                endpoints[f"rpc+{d:g}ms"] = f"127.0.0.1:{DelayProxy(port, d / 1000, args.mbit * 1e6 / 8).port}"
            if args.tune:
                for endpoint in endpoints.values():
                    run_edgespec(args, ["tune", "--seconds", str(args.tune)], endpoint)
            for name, endpoint in endpoints.items():
                print(f"# loading {name}", flush=True)
                engines[name] = edgespec.Engine.load(target, draft, n_ctx=opts.ctx_size, n_threads=args.threads,
                                                     rpc=[endpoint] if endpoint else (),
                                                     output_here=args.output_here and bool(endpoint))
            net = time_decodes([(name, e, None) for name, e in engines.items()], rows)  # each link its own engine
            show_network(net, rows)
            runs: dict[str, list[dict]] = {}
            names = list(engines)
            for r in range(args.rounds):
                sessions = {name: benchmark.Session(e, all_modes, list(dict.fromkeys(it.category for it in items)),
                                                    opts.max_tokens) for name, e in engines.items()}
                for i, it in enumerate(items):
                    turn = (i + r) % len(names)
                    for name in [*names[turn:], *names[:turn]]:
                        results = sessions[name].measure(it, 0, i + r)
                        if results is not None:
                            print(f"[round {r + 1}/{args.rounds}, {i + 1}/{len(items)}] {name}: "
                                  f"{benchmark.progress_line(it, results)}", flush=True)
                for name, session in sessions.items():
                    rep = session.finish()
                    runs.setdefault(name, []).append({"rows": rep.rows(), "verify_curve": rep.verify_curve,
                                                      "divergences": rep.divergences})
                    for note in rep.divergences:
                        print(f"{name}: {note}", flush=True)
        finally:
            for e in engines.values():
                e.close(remember=False)
            for server in servers:
                server.kill()
    save(args, modes, net, runs)
    summary(runs, net, modes)


def summary(runs: dict[str, list[dict]], net: dict, modes: list[str]) -> None:
    """Per setting: plain ms/token and each mode's speed-up over plain (the median over rounds, each round's), and
    the lowest category (of the per-category medians over rounds); then what the local run predicts for each link:
    a round that crosses it once, each plain step once."""
    import statistics

    from edgespec.intervals import speedup_interval

    def speedups(name: str, mode: str, category: str = "overall") -> list[float]:
        return [run["rows"][mode][category]["speedup"] for run in runs[name]]

    def interval(name: str, mode: str) -> list[float] | None:  # (runs saved before intervals: None)
        items = [[x for run in runs[name] for x in run["rows"][m]["overall"].get("items", [])] for m in ("plain", mode)]
        return speedup_interval(*items) if all(items) else None

    print(f"\n{'setting':<11}{'plain ms/tok':>13}{'net/decode':>12}" + "".join(f"  {m:<52}" for m in modes))
    for name in runs:
        plain = statistics.median(run["rows"]["plain"]["overall"]["ms_per_token"] for run in runs[name])
        add = "-" if name == "local" else f"{1000 * (net[name]['1'] - net['local']['1']):.1f} ms"
        cells = []
        for m in modes:
            each = speedups(name, m)
            cats = [c for c in runs[name][0]["rows"][m] if c != "overall"]
            low = min(cats, key=lambda c: statistics.median(speedups(name, m, c)))
            span = interval(name, m)
            cells.append(f"{statistics.median(each):.2f}x " + (f"[{span[0]:.2f}-{span[1]:.2f}] " if span else "")
                         + f"({' '.join(f'{x:.2f}' for x in each)}; "
                         f"low {statistics.median(speedups(name, m, low)):.2f} {low})")
        print(f"{name:<11}{plain:>13.1f}{add:>12}" + "".join(f"  {c:<52}" for c in cells))
    print("(speed-up over plain in the same process: the median over rounds, [its 95% interval with the prompts drawn "
          "again, the rounds as repeats], each round's, and the category lowest by its median; net/decode: a one-row "
          "decode over the proxy less one here)")
    if "local" not in runs:
        return
    # Each plain step pays the link's cost once, and so does each round, which yields E tokens: with the local run's
    # plain step T, round R (its ms/token x E) and the link's n, (T + n) E / (R + n). It grows with n toward E.
    print("\npredicted from the local run, each mode drafting over the link as it did here (plain step T + n, round "
          "R + n, n the link's cost of a decode; measured in brackets: an adaptive mode that drafts longer over the "
          "link can beat it):")
    print(f"{'setting':<11}" + "".join(f"  {m:<22}" for m in modes))
    for name in runs:
        n = 0.0 if name == "local" else 1000 * (net[name]["1"] - net["local"]["1"])
        cells = []
        for m in modes:
            each = []  # each local round's own prediction (at n = 0: its own speed-up), then their median
            for run in runs["local"]:
                t, o = run["rows"]["plain"]["overall"]["ms_per_token"], run["rows"][m]["overall"]
                e = o["tokens_per_round"]
                each.append((t + n) * e / (o["ms_per_token"] * e + n))
            cells.append(f"{statistics.median(each):.2f}x ({statistics.median(speedups(name, m)):.2f}x)")
        print(f"{name:<11}" + "".join(f"  {c:<22}" for c in cells))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
