"""A benchmark's numbers for people: the tables `edgespec bench` prints, its JSON record, and its plot (matplotlib,
the optional `plot` extra)."""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from .benchmark import Report
from .intervals import speedup_interval
from .stats import PHASES


def tables(report: Report, rows: dict) -> str:
    cats = [c for c in [*report.categories, "overall"] if any(c in r for r in rows.values())]
    modes = list(rows)
    width = max(9, *(len(m) + 2 for m in modes))
    out = ["speedup over plain by category (plain ms/token / mode ms/token, median over repeats; plain: its "
           "ms/token)", f"{'category':<15}" + "".join(f"{m:>{width}}" for m in modes)]
    for c in cats:
        cells = [(f"{rows[m][c]['ms_per_token']:.1f}ms" if m == "plain" else f"{rows[m][c]['speedup']:.2f}x")
                 if c in rows[m] else "-" for m in modes]
        out.append(f"{c:<15}" + "".join(f"{x:>{width}}" for x in cells))
    out += _intervals(rows)
    out += _end_to_end(rows, cats, modes, width)
    out += ["", "overall, per mode",
            f"{'mode':<10}{'ms/tok':>8}{'speedup':>8}{'same':>7}{'accept':>7}{'acc/rnd':>8}{'tok/rnd':>8}"
            + "".join(f"{p[:6]:>8}" for p in PHASES) + f"{'py':>6}{'TTFT':>8}{'e2e t/s':>8}  acceptance by position"]
    for mode, by_cat in rows.items():
        r = by_cat.get("overall")
        if r is None:
            continue
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        pos = " ".join(f"{a:.2f}" for a in r["acceptance_by_position"][:8])
        out.append(f"{mode:<10}{r['ms_per_token']:>8.1f}{r['speedup']:>7.2f}x{r['same_as_plain']:>3}/"
                   f"{r['prompts']:<3}{acc:>7}{r['mean_accepted_length']:>8.2f}{r['tokens_per_round']:>8.2f}"
                   + "".join(f"{r['phase_ms_per_round'][p]:>8.1f}" for p in PHASES)
                   + f"{100 * r['python_share']:>5.1f}%{r['ttft_ms']:>6.0f}ms{r['end_to_end_tok_s']:>8.1f}  {pos}")
    trees = {m: r["overall"] for m, r in rows.items() if r.get("overall", {}).get("tree_rounds")}
    if trees:
        out += ["", "verification trees: " + ", ".join(
            f"{m} {r['tree_rounds']} of {r['rounds']} rounds" + (f" ({r['branch_rounds']} with a drafted branch)"
                                                                 if r.get("branch_rounds") else "")
            for m, r in trees.items())]
    out += _against_parts(rows, cats)
    curve = report.verify_curve
    if curve:
        one = curve[min(curve)]
        out += ["", "verify cost T_v(m) / T_v(1), T_v(1) = " + f"{1000 * one:.1f} ms: "
                + "  ".join(f"{m}:{t / one:.2f}" for m, t in sorted(curve.items()))]
    out += ["(phases: ms per round; py: share of round time outside llama.cpp; TTFT: median time to first token "
            "from a cold cache; e2e t/s: tokens per second including reading the prompt; same: greedy output "
            "identical to plain's; acceptance by position: of the rounds that drafted position i, the share where it "
            f"passed) peak memory {report.peak_rss_mb:.0f} MiB"]
    return "\n".join(out)


def _intervals(rows: dict) -> list[str]:
    """The overall speedup's 95% interval per mode, where there were enough prompts (intervals.speedup_interval)."""
    cells = [f"{m} {r['overall']['speedup_interval'][0]:.2f}-{r['overall']['speedup_interval'][1]:.2f}x"
             for m, r in rows.items() if m != "plain" and (r.get("overall") or {}).get("speedup_interval")]
    return [f"overall, 95% interval with the prompts drawn again (paired bootstrap): {', '.join(cells)}"] if cells \
        else []


def _end_to_end(rows: dict, cats: list[str], modes: list[str], width: int) -> list[str]:
    """Per category: each mode's tokens per second from the request to its last token (prompt reading included,
    a draft model's as well as the target's) over plain's; plain: its tokens per second. The per-token table leaves
    the prompt out: a draft model that reads a prompt it then drafts little on gains there and loses here."""
    if not all("end_to_end_tok_s" in r for by_cat in rows.values() for r in by_cat.values()) or "plain" not in rows:
        return []  # (a run saved before these were kept per category)
    out = ["", "end to end by category (tokens per second with the prompt's reading, over plain's; plain: its tokens "
           "per second)", f"{'category':<15}" + "".join(f"{m:>{width}}" for m in modes)]
    for c in cats:
        plain = rows["plain"].get(c, {}).get("end_to_end_tok_s")
        cells = [("-" if c not in rows[m] or not plain else f"{plain:.1f}t/s" if m == "plain" else
                  f"{rows[m][c]['end_to_end_tok_s'] / plain:.2f}x") for m in modes]
        out.append(f"{c:<15}" + "".join(f"{x:>{width}}" for x in cells))
    return out


def _against_parts(rows: dict, cats: list[str]) -> list[str]:
    """Per category: the adaptive draft model over its best fixed K, and the hybrid over the better of its parts,
    each with its 95% interval over prompts where the run kept them (intervals.speedup_interval, of the adaptive
    mode's speed against that part's); and the hybrid over the better of its parts end to end (no interval: the
    prompts' own end-to-end times are not kept)."""
    fixed = [m for m in rows if m.startswith("draft:")]
    columns = {}
    if "draft" in rows and fixed:
        columns["draft / best draft:K"] = ("draft", fixed, "speedup")
    if {"hybrid", "draft", "lookup"} <= set(rows):
        columns["hybrid / better of draft, lookup"] = ("hybrid", ["draft", "lookup"], "speedup")
        if all("end_to_end_tok_s" in rows[m][c] for m in ("hybrid", "draft", "lookup") for c in cats
               if c in rows[m]):
            columns["hybrid / better, end to end"] = ("hybrid", ["draft", "lookup"], "end_to_end_tok_s")
    if not columns:
        return []

    def cell(c: str, mode: str, parts: list[str], figure: str) -> str:
        best = max(parts, key=lambda m: rows[m][c][figure])
        text = f"{rows[mode][c][figure] / rows[best][c][figure]:.2f}"
        if figure != "speedup":
            return text
        mine, theirs = rows[mode][c].get("items"), rows[best][c].get("items")
        span = speedup_interval(theirs, mine) if mine and theirs else None
        return text + (f" [{span[0]:.2f}-{span[1]:.2f}]" if span else "")

    lines = [f"{c:<15}" + "".join(f"{cell(c, *how):>34}" for how in columns.values())
             for c in cats if all(c in r for r in rows.values())]
    spans = "; [its 95% interval over prompts]" if any("[" in line for line in lines) else ""  # (a run saved before)
    return ["", f"adaptive against its parts (a ratio of speedups; >= 1.00: at least as fast{spans})",
            f"{'category':<15}" + "".join(f"{name:>34}" for name in columns), *lines]


def provenance(command: str | None = None) -> dict:
    """What produced a result: the command, date, edgespec and llama.cpp versions and build, the machine."""
    from . import __version__
    from .backend import system_info
    from .profile import cpu

    command = command or (" ".join(["edgespec", *sys.argv[1:]]) if sys.argv else "edgespec bench")
    return {"command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "edgespec": __version__,
            "build": system_info(), "python": platform.python_version(),
            "machine": {"cpu": cpu(), "cores": os.cpu_count(), "system": platform.platform()}}


def record(report: Report, rows: dict, settings: dict) -> dict:
    """The JSON a run leaves behind: what produced it (command, versions, machine, date) and every figure."""
    return {**provenance(), "settings": settings, "verify_curve_s": {str(m): t for m, t in sorted(report.verify_curve.items())},
            "peak_rss_mb": report.peak_rss_mb, "rows": rows, "divergences": report.divergences,
            "skipped": report.skipped, "interrupted": report.interrupted}


def from_record(data: dict) -> tuple[Report, dict]:
    """A saved run (`record`'s JSON) as the report and rows its tables and plot are drawn from, measuring nothing."""
    rows = data["rows"]
    if not isinstance(rows, dict) or not rows or not all(isinstance(r, dict) and "overall" in r for r in rows.values()):
        raise ValueError("no measured modes")
    cats = [c for c in next(iter(rows.values())) if c != "overall"]
    rep = Report(modes=list(rows), categories=cats,
                 verify_curve={int(m): float(t) for m, t in data.get("verify_curve_s", {}).items()},
                 peak_rss_mb=data.get("peak_rss_mb", 0.0), divergences=data.get("divergences", []),
                 skipped=data.get("skipped", []), interrupted=data.get("interrupted", False))
    return rep, rows


def plot(report: Report, rows: dict, path: str | os.PathLike, title: str = "") -> None:
    """Three panels: speedup by category, acceptance by draft position, the verify curve T_v(m)/T_v(1)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from .errors import EdgespecError

        raise EdgespecError("--plot needs matplotlib: pip install 'edgespec[plot]'") from None
    modes = [m for m in rows if m != "plain"]
    cats = [c for c in [*report.categories, "overall"] if any(c in rows[m] for m in modes)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [3, 1.2, 1.2]})
    ax = axes[0]
    w = 0.8 / max(1, len(modes))
    for j, m in enumerate(modes):
        xs = [i + (j - (len(modes) - 1) / 2) * w for i in range(len(cats))]
        ax.bar(xs, [rows[m].get(c, {}).get("speedup", 0) for c in cats], w, label=m)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(cats)), cats, rotation=35, ha="right")
    ax.set_ylabel("speedup over plain")
    ax.legend(fontsize=8, ncol=2)
    ax = axes[1]
    for m in modes:  # a_i as the cost model has it: of the rounds that tested position i (all before it passed)
        r = rows[m]["overall"]
        pos = [a / t for a, t in zip(r["accepted_by_position"], r["tested_by_position"]) if t]
        if pos:
            ax.plot(range(1, len(pos) + 1), pos, marker="o", ms=3, label=m)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance (given the ones before passed)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax = axes[2]
    curve = sorted(report.verify_curve.items())
    if curve:
        ax.plot([m for m, _ in curve], [t / curve[0][1] for _, t in curve], marker="o", ms=3)
        ax.plot([m for m, _ in curve], [m for m, _ in curve], ls=":", color="grey", label="m x one row")
    ax.set_xlabel("rows in one target decode (m)")
    ax.set_ylabel("T_v(m) / T_v(1)")
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
