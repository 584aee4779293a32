"""Replay the drafting policies on recorded texts under recorded (or changed) costs: `edgespec bench` without the
machine's noise (edgespec/replay.py says how and what it cannot show).

    # once, alone on the machine: the pair's greedy texts, the draft's predictions, decode costs (F16: ~25 min)
    .venv/bin/python bench/replay.py record --config memory -n 128 -o bench/results/replay-memory.json
    .venv/bin/python bench/replay.py costs bench/results/replay-memory.json --config memory   # re-time (~4 min)
    # then, in seconds to minutes, as often as wanted: `edgespec tune`, then `edgespec bench` on the unseen prompts
    .venv/bin/python bench/replay.py run bench/results/replay-memory.json --tune --skip 1 -n 64
    .venv/bin/python bench/replay.py run F.json --noise 0.1 --latency-ms 2 --verify-slope 0.02 --fresh

`run` takes the options of `edgespec bench` that choose prompts and modes, and `--tune` runs `edgespec tune`'s
measurement (on the first prompt of each category, as the real one does) so the modes start from its profile;
`--noise S` multiplies each decode's cost by a seeded lognormal factor of spread S (a real run's timings are noisy:
the policies' estimates should be robust to it), drawn for that decode alone (the same decode costs the same in
every mode and in every version of the code, so two versions differ where they decode differently),
`--hiccups R` holds decodes up R times a second of decoding, each by an exponential delay of mean `--hiccup-ms H` (a
real machine's tail of slow timings, which the lognormal has not), `--latency-ms L` adds L to every target decode (a
target over rpc-servers), `--switch-ms W` W more to one whose shape (tokens, rows) is not the last one's (its graph
sent to the server again), `--verify-slope S` replaces the target's verify curve by T(1) x (1 + S(m - 1)) (S near
0: a memory-bound GPU or laptop), `--draft-slope S` does the same to the draft's decodes of several tokens (its
reading of what it skipped: on such a machine the draft is memory-bound too, where on this CPU it reads 8 tokens for
3.7 of its steps), `--target-scale X` makes
every target decode X times dearer against the same draft (this machine's F16 target has slow, memory-bound spells:
96 ms a step with T(5) = 1.5 T(1), against 70 ms and 2.1),
`--costs-from R` takes another recording's costs, `--draft-costs-from R` only its draft's (two drafts' recordings of
the same texts under one timing of the target). Times are virtual seconds: every figure is exact for the costs
given, and only for them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from edgespec import autotune, benchmark, report, workloads  # noqa: E402
from edgespec.errors import EdgespecError  # noqa: E402
from pairs import add_model_args, add_prompt_args, pair_of  # noqa: E402
from edgespec.recording import predict_again, record, retime  # noqa: E402
from edgespec.replay import Clock, Recording, virtual_time  # noqa: E402


def _progress(done: int, total: int, line: str) -> None:
    print(f"[{done}/{total}] {line}", file=sys.stderr)


def do_record(args) -> None:
    target, draft = pair_of(args)
    items = workloads.read_jsonl(args.workload) if args.workload else workloads.builtin()
    items = workloads.select(items, args.category or None, args.limit)
    print(f"recording {Path(target).name} + {Path(draft).name}: {len(items)} prompts, up to {args.max_tokens} "
          f"tokens (decode costs first: keep the machine otherwise idle)", file=sys.stderr)
    data = record(str(target), str(draft), items, args.max_tokens, args.threads, progress=_progress)
    data["provenance"] = report.provenance(" ".join(["bench/replay.py", *sys.argv[1:]]))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {args.output}", file=sys.stderr)


def do_costs(args) -> None:
    target, draft = pair_of(args)
    rec = Recording.load(args.recording)
    print(f"timing {Path(target).name} and {Path(draft).name} (keep the machine otherwise idle)", file=sys.stderr)
    data = retime(rec.data, str(target), str(draft), args.threads)
    data["provenance"] = {**(data.get("provenance") or {}),
                          "costs": report.provenance(" ".join(["bench/replay.py", *sys.argv[1:]]))}
    Path(args.recording).write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {args.recording}", file=sys.stderr)


def do_draft(args) -> None:
    rec = Recording.load(args.recording)
    print(f"predicting with {Path(args.draft).name} on {len(rec.data['texts'])} texts", file=sys.stderr)
    data = predict_again(rec.data, args.draft, args.threads, _progress)
    data["provenance"] = {**(data.get("provenance") or {}),
                          "draft": report.provenance(" ".join(["bench/replay.py", *sys.argv[1:]]))}
    Path(args.output or args.recording).write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {args.output or args.recording}", file=sys.stderr)


def _recording(args) -> Recording:
    rec = Recording.load(args.recording)
    if args.costs_from:
        rec.data = {**rec.data, "costs": Recording.load(args.costs_from).data["costs"]}
    if args.draft_costs_from:
        rec.data = {**rec.data, "costs": {**rec.data["costs"],
                                          "draft": Recording.load(args.draft_costs_from).data["costs"]["draft"]}}
    return rec


def _tuning(args, rec: Recording) -> Recording:
    """The recording `tune` runs on: this one, or with --tune-on another of the same pair (Recording.tuned_on)."""
    return rec.tuned_on(Recording.load(args.tune_on)) if args.tune_on else rec


def _tune(args, rec: Recording, engine):
    """`edgespec tune` on the replay's engine: on one built-in prompt of each category, or with --tune-workload on the
    tuning recording's prompts of those categories (`tune --workload`: a user's own kind of text)."""
    items = None
    if args.tune_workload:
        items = workloads.select(_tuning(args, rec).items(), args.tune_workload)
    return autotune.tune(engine, args.tune_seconds, 48, True, None, items=items)


def _items(rec: Recording, args) -> list:
    """The prompts a replay runs, as `edgespec bench` chooses them (categories interleaved), or with --blocks one
    category's after another's, in the order --category names them (else the recording's): a session that stays
    with one kind of text, where what the policies carry from text to text is that kind's."""
    items = workloads.select(rec.items(), args.category or None, args.limit, args.skip)
    if args.blocks:
        order = list(dict.fromkeys(args.category or [it.category for it in items]))
        items = sorted(items, key=lambda it: order.index(it.category))  # (stable: each category's own order)
    return items


def do_trace(args) -> None:
    from trace import trace

    rec = _recording(args)
    items = _items(rec, args)
    clock = Clock(args.noise, args.seed, hiccups=args.hiccups, hiccup_s=args.hiccup_ms / 1000)
    target, draft = rec.curves(args.latency_ms, args.verify_slope, args.target_scale, args.draft_slope,
                               args.switch_ms)
    with virtual_time(clock):
        if args.tune:
            engine = _tuning(args, rec).engine(clock, target, draft, draft_max=args.draft_max)  # (as tune's: no floor)
            _tune(args, rec, engine)
            engine.close(remember=False)
        engine = rec.engine(clock, target, draft, draft_max=args.draft_max, draft_p_min=args.draft_p_min)
        strategies = benchmark.Strategies(engine)
        modes = [m for m in args.modes.split(",") if m]

        def seed() -> None:  # the adaptive modes' policies start from tune's profile
            if args.tune:
                engine.use_profile([strategies.proposer(m) for m in modes if ":" not in m and m != "plain"],
                                   curve=False)

        def fresh() -> None:  # as bench --fresh: nothing learned on another text carries over
            strategies.by_mode.clear()
            seed()

        seed()
        engine.calibrate(range(1, 17))
        trace(engine, strategies, items, modes, args.max_tokens, fresh if args.fresh else None)
        engine.close(remember=False)


def do_run(args) -> dict:
    rec = _recording(args)
    if args.max_tokens > rec.max_tokens:
        sys.exit(f"replay.py: the recording holds {rec.max_tokens} tokens per text; use -n {rec.max_tokens} or less")
    items = _items(rec, args)
    modes = benchmark.parse_modes(args.modes, True)
    if any("@" in m for m in modes):
        sys.exit("replay.py: a replay verifies chains only (no @W modes)")
    clock = Clock(args.noise, args.seed, hiccups=args.hiccups, hiccup_s=args.hiccup_ms / 1000)
    target, draft = rec.curves(args.latency_ms, args.verify_slope, args.target_scale, args.draft_slope,
                               args.switch_ms)
    with virtual_time(clock):
        # edgespec tune has no confidence floor: it times the draft's rounds whole (a floor would cut its fixed-K
        # rounds short, and the profile would price K = 8 at the cost of the rounds the floor ended early)
        engine = _tuning(args, rec).engine(clock, target, draft, draft_max=args.draft_max)
        tuned = _tune(args, rec, engine) if args.tune else None
        engine.close(remember=False)
        # a new process, the profile on disk
        engine = rec.engine(clock, target, draft, draft_max=args.draft_max, draft_p_min=args.draft_p_min)

        def diverged(item, tokens, plain, other, mode):
            return f"{mode} on a {item.category} prompt: differs from plain (a replay never should)"

        rep = benchmark.run(engine, modes, items, args.max_tokens, args.repeats, _progress if args.verbose else None,
                            diverged, fresh=args.fresh)
        engine.close(remember=False)
    rows = rep.rows()
    costs = f"{'costs of ' + Path(args.costs_from).name if args.costs_from else 'recorded costs'}" + \
        (f", the draft's of {Path(args.draft_costs_from).name}" if args.draft_costs_from else "") + \
        (f" + noise {args.noise:g}" if args.noise else "") + \
        (f" + {args.hiccups:g} hold-ups a second of {args.hiccup_ms:g} ms (mean)" if args.hiccups else "") + \
        (f" + {args.latency_ms:g} ms a target decode" if args.latency_ms else "") + \
        (f" + {args.switch_ms:g} ms one of another shape" if args.switch_ms else "") + \
        (f", verify curve slope {args.verify_slope:g}" if args.verify_slope is not None else "") + \
        (f", draft curve slope {args.draft_slope:g}" if args.draft_slope is not None else "") + \
        (f", the target {args.target_scale:g}x slower" if args.target_scale != 1.0 else "")
    print(f"\nreplay of {rec.data['target']} + {rec.data['draft']} ({costs}), {args.max_tokens} tokens x "
          f"{len(items)} prompts x {args.repeats}" + (", fresh" if args.fresh else "")
          + (f", after tune ({tuned.decision or tuned.choice})" if tuned else ""))
    print(report.tables(rep, rows))
    for note in rep.divergences:
        print(note)
    settings = {**{k: v for k, v in vars(args).items() if k != "func"}, "modes": modes, "prompts": len(items)}
    out = {**report.provenance(" ".join(["bench/replay.py", *sys.argv[1:]])), "settings": settings,
           "recording": rec.data.get("provenance"), "rows": rows, "divergences": rep.divergences}
    if args.json:
        Path(args.json).write_text(json.dumps(out, separators=(",", ":")))
        print(f"wrote {args.json}", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(required=True)
    r = sub.add_parser("record", help="record a pair's texts, predictions and decode costs")
    add_model_args(r)
    r.add_argument("--workload", help="a JSONL workload (default: the built-in set)")
    r.add_argument("--category", action="append")
    r.add_argument("--limit", type=int)
    r.add_argument("--max-tokens", "-n", type=int, default=128)
    r.add_argument("--output", "-o", required=True)
    r.set_defaults(func=do_record)
    c = sub.add_parser("costs", help="time a recording's decode costs again (another day, other threads)")
    c.add_argument("recording")
    add_model_args(c)
    c.set_defaults(func=do_costs)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("recording")
    add_prompt_args(common)
    common.add_argument("--blocks", action="store_true", help="each category's prompts together, in the order "
                        "--category names them (else the recording's), not interleaved: a session of one kind of "
                        "text after another")
    common.add_argument("--draft-max", "-k", type=int, default=8)
    common.add_argument("--draft-p-min", type=float, default=0.0, help="as generate's (needs the draft's recorded "
                        "confidences)")
    common.add_argument("--tune", action="store_true", help="run edgespec tune's measurement first (its profile)")
    common.add_argument("--tune-on", metavar="RECORDING", help="with --tune: measure on another recording of the "
                        "same pair (the built-in prompts), under this one's costs; then the replay runs every prompt "
                        "of this one (no --skip needed)")
    common.add_argument("--tune-workload", metavar="CATEGORY", action="append", help="with --tune: measure on all "
                        "the tuning recording's prompts of this category (repeatable), as `tune --workload` on a "
                        "user's own kind of text, in place of one built-in prompt of each category")
    # (`edgespec tune`'s 110 s in all, less the ~10 s this machine takes to load the F16 pair)
    common.add_argument("--tune-seconds", type=float, default=100.0)
    common.add_argument("--noise", type=float, default=0.0)
    common.add_argument("--seed", type=int, default=0)
    common.add_argument("--hiccups", type=float, default=0.0, help="hold-ups per second of decoding (another "
                        "process's turn, a page fault), each an exponential delay of mean --hiccup-ms")
    common.add_argument("--hiccup-ms", type=float, default=20.0)
    common.add_argument("--latency-ms", type=float, default=0.0)
    common.add_argument("--switch-ms", type=float, default=0.0, help="added to a target decode of another shape "
                        "(tokens, rows) than the last (over an rpc-server: the graph sent again)")
    common.add_argument("--verify-slope", type=float)
    common.add_argument("--draft-slope", type=float, help="the draft's decodes of m tokens cost T_d(1) x (1 + S x "
                        "(m - 1)) up to 17 (a GPU, with --verify-slope)")
    common.add_argument("--target-scale", type=float, default=1.0)
    common.add_argument("--costs-from", metavar="RECORDING", help="the decode costs of another recording (its day, "
                        "its machine) for this one's texts")
    common.add_argument("--draft-costs-from", metavar="RECORDING", help="the draft's decode costs alone from another "
                        "recording (after --costs-from): two drafts' recordings judged under one target's costs")
    dr = sub.add_parser("draft", help="a recording's draft predictions and confidences made again (another draft, "
                        "or a recording made without confidences)")
    dr.add_argument("recording")
    dr.add_argument("--draft", required=True)
    dr.add_argument("--threads", type=int, default=2)
    dr.add_argument("--output", "-o", help="(default: the recording itself)")
    dr.set_defaults(func=do_draft)
    p = sub.add_parser("run", help="replay edgespec bench (and tune) on a recording", parents=[common])
    p.add_argument("--modes", default="plain,draft:4,draft,lookup,hybrid")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true", help="a line per prompt")
    p.set_defaults(func=do_run)
    t = sub.add_parser("trace", help="round by round, as bench/trace.py, on a recording", parents=[common])
    t.add_argument("--modes", default="plain,draft,lookup,hybrid")
    t.add_argument("--fresh", action="store_true", help="as run's: every prompt a new process's first")
    t.set_defaults(func=do_trace)
    args = ap.parse_args()
    negative = [f"--{k.replace('_', '-')}" for k in ("noise", "hiccups", "hiccup_ms", "latency_ms", "switch_ms")
                if getattr(args, k, 0.0) < 0]
    if negative:
        ap.error(f"{', '.join(negative)} must be 0 or more")
    if getattr(args, "tune_on", None) and not args.tune:
        ap.error("--tune-on RECORDING goes with --tune")
    if getattr(args, "tune_workload", None) and not args.tune:
        ap.error("--tune-workload CATEGORY goes with --tune")
    t0 = time.time()
    try:
        args.func(args)
    except EdgespecError as e:  # a file that is not a recording, a prompt not in it: one line
        print(f"replay.py: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"({time.time() - t0:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
