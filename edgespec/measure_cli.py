"""`edgespec bench` and `edgespec tune`: the commands that measure this machine (parse, run, render; the
measuring itself is benchmark.py's and autotune.py's)."""
from __future__ import annotations

import sys
import threading
import time

import click

from .options import CACHE_OPTIONS, RPC_OPTIONS, kv_cache_of, model_argument, note_threads

MODEL_OPTIONS = [
    click.option("--model", "-m", metavar="GGUF", help="Target: a file, a preset, or REPO:FILE; or give it as "
                 "MODEL, the first argument (default: the embedded SmolLM2-135M)."),
    click.option("--draft", "-d", metavar="GGUF", help="Draft model (a preset brings its own)."),
    click.option("--threads", type=click.IntRange(min=1), callback=note_threads,
                 help="CPU threads (default: physical cores)."),
    click.option("--gpu-layers", default=0, show_default=True, type=int, help="Target layers on the GPU (-1: all)."),
    click.option("--draft-gpu-layers", type=int, help="Draft layers on the GPU (default: as --gpu-layers)."),
    click.option("--ctx-size", "-c", default=2048, show_default=True, type=click.IntRange(min=64)),
    click.option("--draft-max", "-k", default=8, show_default=True, type=click.IntRange(min=1),
                 help="Most tokens an adaptive mode drafts per round."),
    *RPC_OPTIONS,
    *CACHE_OPTIONS,
    click.option("--verbose", is_flag=True, help="Show llama.cpp's own log."),
]


def model_options(f):
    for option in reversed(MODEL_OPTIONS):
        f = option(f)
    return f


def _load(opts: dict, tree_width: int = 1):
    """The target and its draft (no lookup: the modes build their own proposers), and whether it is the default."""
    from .engine import Engine
    from .options import choose_models

    model, draft, _, default = choose_models({"model": opts["model"], "draft": opts["draft"], "lookup": False,
                                              "no_spec": False, "verbose": opts["verbose"]})
    engine = Engine.load(model, draft, n_ctx=opts["ctx_size"], n_threads=opts["threads"],
                         n_gpu_layers=opts["gpu_layers"], draft_n_gpu_layers=opts["draft_gpu_layers"],
                         draft_max=opts["draft_max"], tree_width=tree_width, rpc=opts["rpc"],
                         draft_rpc=opts["draft_rpc"], tensor_split=opts["tensor_split"],
                         output_here=opts["output_here"], kv_cache=kv_cache_of(opts))
    return engine, model, draft


def _progress(t0: float):
    def show(done: int, total: int, line: str) -> None:
        click.echo(f"[{done}/{total} {time.time() - t0:4.0f}s] {line}", err=True)
    return show


@click.command("bench")
@model_options
@click.option("--modes", help="Comma-separated: plain, draft, lookup, hybrid (chosen by measured cost), or draft:K, "
              "lookup:K, hybrid:K (exactly K per round); a suffix @W: with verification trees of up to W = 2..4 branches "
              "(lookup's several continuations, the draft model's second choices and a branch; draft:K@W a fixed "
              "shape; every mode then runs on a context made for trees). Default: plain,draft:2,draft:4,draft:8,"
              "draft,lookup,hybrid with a draft, else plain,lookup:4,lookup.")
@click.option("--workload", metavar="JSONL", help="Your prompts: one JSON object per line, {\"prompt\": TEXT} or "
              "{\"messages\": [{\"role\", \"content\"}, ...]}, with an optional \"category\". Default: the built-in "
              "set (13 categories, code and general language).")
@click.option("--category", "categories", multiple=True, help="Only this category (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N prompts of each category.")
@click.option("--skip", default=0, type=click.IntRange(min=0), help="Leave out the first N prompts of each "
              "category (`edgespec tune` measures on the first: --skip 1 runs on prompts it has not seen).")
@click.option("--fresh", is_flag=True, help="Start every prompt's drafting policies anew, from the profile only, as "
              "a new process does (one-shot `edgespec generate`): the figures of a first prompt.")
@click.option("--max-tokens", "-n", default=64, show_default=True, type=click.IntRange(min=1))
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(min=1),
              help="Run the whole set this many times; speedups are the median over repeats.")
@click.option("--json", "json_path", metavar="FILE", help="Also write every figure, the command, versions and "
              "machine here.")
@click.option("--plot", "plot_path", metavar="PNG", help="Also draw speedup by category, acceptance by position and "
              "the verify curve (needs matplotlib: pip install 'edgespec[plot]').")
@click.option("--from-json", "saved", metavar="FILE", help="Measure nothing: print the tables of a run saved with "
              "--json again (and with --plot draw its plot).")
@model_argument
def bench(modes, workload, categories, limit, skip, fresh, max_tokens, repeats, json_path, plot_path, saved,
          **opts) -> None:
    """Plain decoding against drafting strategies on a workload, on this machine, greedy.

    Modes run interleaved prompt by prompt, each from a cold cache; ms/token is sum(time) / sum(tokens); every
    speedup is over plain decoding measured in the same run; outputs are compared with plain's token for token.
    Run it alone: another busy process on the same cores changes every number."""
    import json
    from pathlib import Path

    from . import benchmark, report, workloads
    from .diagnostics import divergence

    if saved:
        from .errors import InvalidArgument
        if json_path:
            raise InvalidArgument("--from-json measures nothing, so there is nothing for --json to save")
        ctx = click.get_current_context()
        given = [p.opts[0] for p in ctx.command.params if p.name not in ("saved", "plot_path", "verbose")
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:  # (a filter or a setting silently ignored would show figures the user did not ask for)
            raise InvalidArgument(f"--from-json measures nothing, so {', '.join(given)} "
                                  f"{'does' if len(given) == 1 else 'do'} not apply: leave "
                                  f"{'it' if len(given) == 1 else 'them'} out, or measure again without --from-json")
        return _show_saved(saved, plot_path)
    items = workloads.read_jsonl(workload) if workload else workloads.builtin()
    items = workloads.select(items, categories, limit, skip)
    if plot_path:  # checked before anything is measured
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            from .errors import EdgespecError

            raise EdgespecError("--plot needs matplotlib: pip install 'edgespec[plot]'") from None
    trees = benchmark.MAX_TREE_WIDTH if modes and "@" in modes else 1  # (all modes share one context)
    engine, model, draft = _load(opts, trees)
    chosen = benchmark.parse_modes(modes or benchmark.default_modes(draft is not None), draft is not None)
    name = Path(model).name + (f" + {Path(draft).name}" if draft else "")
    click.echo(f"edgespec bench: {name}, {len(chosen)} modes x {len(items)} prompts x {repeats}, up to {max_tokens} "
               f"tokens, greedy, {engine.target.n_threads} threads", err=True)

    def diverged(item, tokens, plain, other, mode):
        d = divergence(engine.model, tokens, plain, other, opts["draft_max"], opts["threads"], trees="@" in mode)
        return f"{mode} on a {item.category} prompt: {d}"

    try:
        rep = benchmark.run(engine, chosen, items, max_tokens, repeats, _progress(time.time()), diverged, fresh=fresh)
    finally:
        engine.close(remember=False)
    rows = rep.rows()
    click.echo(f"\n{name}, {max_tokens} tokens x {len(items)} prompts x {repeats}" + (", fresh" if fresh else "")
               + (" (interrupted: the figures cover the prompts measured before Ctrl-C)" if rep.interrupted else ""))
    click.echo(report.tables(rep, rows))
    for note in rep.divergences:
        click.echo(note)
    for note in rep.skipped:
        click.echo(f"skipped: {note} (raise --ctx-size)")
    settings = {"model": model, "draft": draft, "modes": chosen, "max_tokens": max_tokens, "repeats": repeats,
                "prompts": len(items), "workload": workload or "built-in", "threads": engine.target.n_threads,
                "gpu_layers": opts["gpu_layers"], "draft_max": opts["draft_max"],
                "skip": skip, "fresh": fresh}
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(report.record(rep, rows, settings), indent=1))
        click.echo(f"edgespec: wrote {json_path}", err=True)
    if plot_path:
        report.plot(rep, rows, plot_path, f"{name}, {time.strftime('%Y-%m-%d')}")
        click.echo(f"edgespec: wrote {plot_path}", err=True)
    for note in engine.notes:
        click.echo(f"edgespec: note: {note}", err=True)
    if rep.interrupted:
        raise KeyboardInterrupt  # exit 130, after showing and saving what was measured


def _show_saved(path: str, plot_path: str | None) -> None:
    """A saved run's tables (and plot) again, from its --json record."""
    import json
    from pathlib import Path

    from . import report
    from .errors import InvalidArgument

    try:
        data = json.loads(Path(path).read_text())
        rep, rows = report.from_record(data)
        s = data["settings"]
        name = Path(s["model"]).name + (f" + {Path(s['draft']).name}" if s.get("draft") else "")
        head = f"{name}, {s['max_tokens']} tokens x {s['prompts']} prompts x {s['repeats']}" + (
            ", fresh" if s.get("fresh") else "")
        tables = report.tables(rep, rows)  # (before anything is shown: a record missing a figure is refused whole)
    except OSError as e:
        raise InvalidArgument(f"--from-json: cannot read {path}: {e.strerror or e}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError):  # (IndexError: items
        # not (s, n) pairs; ZeroDivisionError: a speed of 0, which no run writes)
        raise InvalidArgument(f"--from-json: {path} is not a file `edgespec bench --json` wrote") from None
    click.echo(f"{head} (saved {data.get('date', '?')} by `{data.get('command', '?')}`)")
    click.echo(tables)
    for note in rep.divergences:
        click.echo(note)
    if plot_path:
        report.plot(rep, rows, plot_path, f"{name}, {str(data.get('date', ''))[:10]}")
        click.echo(f"edgespec: wrote {plot_path}", err=True)


@click.command("tune")
@model_options
@click.option("--lookup/--no-lookup", default=True, show_default=True, help="Also measure prompt lookup.")
@click.option("--seconds", default=110, show_default=True, type=click.IntRange(min=5),
              help="The whole run, loading included, ends within about this: a prompt starts only where it is "
              "expected to end in time (one is always measured).")
@click.option("--max-tokens", "-n", default=48, show_default=True, type=click.IntRange(min=8))
@click.option("--workload", metavar="JSONL", help="Measure on your prompts (as `edgespec bench --workload` reads "
              "them; categories interleaved, as many as the time allows) rather than one built-in prompt of each "
              "category: the profile then starts every process from what your kind of text showed.")
@model_argument
def tune(lookup, seconds, max_tokens, workload, **opts) -> None:
    """Measure this machine with a model (and its draft) and keep it as the model's profile.

    Times the target's verify curve, runs plain decoding, the draft at K = 2, 4, 8 and prompt lookup on built-in
    prompts (or yours, --workload), prints the break-even rule in numbers and what the engine will do, and writes
    the profile that generate, chat and serve start from (so the first token comes without timing anything).
    Nothing is written if it is interrupted."""
    from pathlib import Path

    from . import autotune, workloads

    t0 = time.perf_counter()
    items = workloads.select(workloads.read_jsonl(workload)) if workload else None  # (read before the models load)
    engine, model, draft = _load(opts)
    name = Path(model).name + (f" + {Path(draft).name}" if draft else "")
    click.echo(f"edgespec tune: {name}, {engine.target.n_threads} threads, within about {seconds} s", err=True)
    bar = click.progressbar(length=seconds, label="measuring (seconds)", file=sys.stderr, show_eta=False,
                            show_percent=False, show_pos=True)
    ended, lock = threading.Event(), threading.Lock()

    def progress(*_) -> None:  # the bar counts seconds of the time asked for, once a second (a prompt takes a minute)
        with lock:
            bar.update(min(seconds, int(time.perf_counter() - t0)) - bar.pos)

    def tick() -> None:
        while not ended.wait(1.0):
            progress()

    ticker = threading.Thread(target=tick, daemon=True)
    try:
        with bar:
            progress()
            ticker.start()
            try:
                tuned = autotune.tune(engine, seconds - (time.perf_counter() - t0), max_tokens, lookup, progress,
                                      items=items)
            finally:  # (the bar stops before it is closed, on Ctrl-C too)
                ended.set()
                ticker.join()
            bar.update(seconds - bar.pos)
    finally:
        engine.close(remember=False)
        for note in engine.notes:
            click.echo(f"edgespec: note: {note}", err=True)
    _print_tuned(tuned, workload)


def _print_tuned(t, workload: str | None = None) -> None:
    curve = t.verify_s
    one = curve[1]
    click.echo("verify cost T_v(m), ms (x one row): " + "  ".join(f"{m}:{1000 * s:.0f} ({s / one:.2f})"
                                                                for m, s in sorted(curve.items())))
    if t.back_s:  # (over rpc-servers: a decode of another shape sends the graph again)
        click.echo("the way back, a plain step right after m rows (ms more; in T_v(K+1) below): " + "  ".join(
            f"{m}:{1000 * s:.1f}" for m, s in sorted(t.back_s.items())))
    n = t.rows["plain"]["overall"]["prompts"]
    kinds = ", ".join(c for c in t.rows["plain"] if c != "overall")
    more = ""
    if n < t.offered:
        more = f"; of {t.offered}, the rest left for want of time: a larger --seconds measures more" + \
            ("" if workload else " kinds of prompt")
    where = f" of {workload} (categories: {kinds}{more})" if workload else f", one per category ({kinds}{more})"
    click.echo(f"\nmeasured on {n} prompt{'s' if n != 1 else ''}{where}, greedy:")
    for mode, r in t.rows.items():
        o = r["overall"]
        acc = " ".join(f"{a:.2f}" for a in o["acceptance_by_position"][:8])
        extra = "" if mode == "plain" else f"  x{o['speedup']:.2f}  {o['mean_accepted_length']:.2f} accepted/round" \
            + (f"  acceptance by position {acc}" if acc else "")
        click.echo(f"  {mode:<9}{o['ms_per_token']:7.1f} ms/token{extra}")
    if t.unsteady:
        click.echo(f"note: {t.unsteady}")
    if t.draft_entry is not None:
        click.echo("\ndraft step costs T_d(K): " + "  ".join(
            f"K={k}: {1000 * s:.0f} ms" for k, s in sorted(t.draft_entry["draft_round_s"].items())))
        if "read_s" in t.draft_entry:
            click.echo(f"the draft reads a prompt at {1000 * t.draft_entry['read_s']:.1f} ms a token: a prompt is read "
                       "only where drafting is expected to save more over the tokens the answer may get")
        click.echo(f"break-even: a round of K drafts pays only while T_v(K+1) + T_d(K) < E[N_K] x T_plain "
                   f"(T_plain = {1000 * one:.1f} ms); draft budget = E[N_K] x T_plain - T_v(K+1)")
        click.echo(f"  {'K':>2} {'E[N_K]':>7} {'T_v(K+1)':>9} {'T_d(K)':>7} {'round':>7} {'limit':>7} "
                   f"{'budget':>7}  pays")
        for b in t.breakeven:
            click.echo(f"  {b.k:>2} {b.expected_tokens:>7.2f} {1000 * b.verify_s:>7.1f}ms {1000 * b.draft_s:>5.1f}ms "
                       f"{1000 * b.round_s:>5.1f}ms {1000 * b.limit_s:>5.1f}ms {1000 * b.draft_budget_s:>5.1f}ms  "
                       f"{'yes' if b.pays else 'no'}")
    best = t.choice
    verdict = "no speculation: plain decoding was fastest" if best == "plain" else \
        f"{best} ({t.measured['plain'] / t.measured[best]:.2f}x plain)"
    click.echo(f"\nfastest on this sample: {verdict}")
    if t.decision:
        click.echo(f"the engine will start with: {t.decision}")
    if t.lookup_decision:
        click.echo(f"{'and with ' if t.decision else 'the engine will start with: '}{t.lookup_decision}")
        if t.decision:
            click.echo("(the hybrid, draft model and prompt lookup together, plans each round between them by "
                       "expected time per token: lookup's continuation, the draft model's tokens, both, or a plain "
                       "step)")
    click.echo(f"profile: {t.path}" if t.path else "profile: not written (the cache directory is not writable)")
