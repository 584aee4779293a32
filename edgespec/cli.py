"""Command line: parse, build configs, iterate the engine's events, render. No decoding logic lives here; how the
process ends (exit codes, signals) is exits.py's."""
from __future__ import annotations

import json
import os
import sys

import click

from . import __version__
from .errors import Terminated
from .options import (ENGINE_PARAMS, chosen, note_context, note_gpu_layers, note_template, text_arg, chat_template,
                      choose_models, constraint_of, constraint_options, engine_options, kv_cache_of, load_engine,
                      model_argument, read_text, sampling_of)
from .progress import PromptProgress

EXAMPLES = """
\b
Examples:
  edgespec chat                                   # the embedded SmolLM2-135M, prompt-lookup drafting
  edgespec chat -m qwen-1.5b.gguf -d qwen-0.5b.gguf --system "Answer briefly."
  edgespec generate --prompt "Write a haiku about caches" --chat
  edgespec generate -m qwen-1.5b.gguf -d qwen-0.5b.gguf -t 0 -p - --json < prompt.txt
  edgespec generate -m qwen-1.5b.gguf --lookup -p - < edit-this-code.txt
  edgespec generate -m qwen-1.5b.gguf --no-spec -p "def fib(n):"
  edgespec serve qwen-1.5b.gguf -d qwen-0.5b.gguf  # the target may come first, without -m
"""


def main(argv: list[str] | None = None) -> None:
    """The `edgespec` command (exits.py turns whatever stops it into one line and an exit code)."""
    from .exits import run

    run(cli, argv, Interrupted)


SETTABLE_CHAT_OPTIONS = ("system", "chat_format", "no_color")


class Interrupted(BaseException):
    """Ctrl-C inside a command, carried past click (which would print a blank line and "Aborted!")."""


class Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted from None


RUNTIME_COMMANDS = ("generate", "chat", "serve", "check", "pull", "models", "quantize", "bench", "tune")


def _load_runtime() -> None:
    """llama.cpp, numpy and huggingface-hub, imported with Ctrl-C held until they are in (see held_interrupts)."""
    from .exits import held_interrupts

    with held_interrupts():
        from . import backend, batch, engine, hub  # noqa: F401


@click.group(cls=Group, epilog=EXAMPLES)
@click.version_option(__version__, prog_name="edgespec")
@click.pass_context
def cli(ctx) -> None:
    """Lossless speculative decoding for local GGUF models: a small draft model (or a lookup in the prompt)
    proposes, the large target verifies several tokens in one pass, and the output is exactly what the target
    alone would write.

    Defaults come from ~/.config/edgespec/config.toml (or $EDGESPEC_CONFIG), then EDGESPEC_* variables, then
    flags; `edgespec config` shows what is in effect.

    \b
    Exit codes: 0 done, 1 error (file, model, download, context, output),
    2 bad option / settings file / EDGESPEC_* variable, 130 Ctrl-C, 143 SIGTERM.
    """
    from .settings import load_config

    if ctx.invoked_subcommand in RUNTIME_COMMANDS:
        _load_runtime()
    if ctx.invoked_subcommand not in ("generate", "chat", "serve", "config"):
        return  # the other commands read no settings: a broken file must not lock them out
    config = load_config(settable_options())
    serve_config = {k: v for k, v in config.items() if k not in SETTABLE_CHAT_OPTIONS}
    ctx.default_map = {"generate": config, "chat": config, "serve": serve_config, "config": config}


def settable_options() -> dict[str, click.Parameter]:
    """What the settings file may set: the engine options and chat's own, by name."""
    engine = {p.name for p in ENGINE_PARAMS}
    return {p.name: p for p in [*generate.params, *chat.params]
            if p.name in engine or p.name in SETTABLE_CHAT_OPTIONS}


@cli.command(epilog=EXAMPLES)
@engine_options
@click.option("--prompt", "-p", help="Prompt text, or - to read it from standard input.")
@click.option("--file", "-f", "prompt_file", metavar="FILE",
              help="Read the prompt from this file (llama.cpp's -f); - reads standard input.")
@click.option("--chat", "use_chat", is_flag=True,
              help="Wrap the prompt in the model's own chat template (its text stays text: never control tokens).")
@click.option("--system", help="System message (with --chat).")
@click.option("--suffix", help="Fill in the middle: the text after the gap, the prompt being the text before it "
                               "(a model with FIM tokens: Qwen2.5-Coder, CodeLlama, StarCoder2...).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: text, tokens, finish_reason, stats.")
@constraint_options
@model_argument
def generate(prompt, prompt_file, use_chat, system, suffix, as_json, grammar_file, json_schema, json_object,
             **opts) -> None:
    """Generate one completion and exit.

    Without --chat the prompt is the model's input as written: text such as <|im_end|> in it is that control
    token, as in llama.cpp. With --chat it is a message, and always literal text."""
    if (prompt is None) == (prompt_file is None):
        raise click.UsageError("give the prompt once: -p TEXT, -p - (standard input) or -f FILE" if prompt_file
                               else "Missing option '--prompt' / '-p' (the prompt; or -f FILE to read it from a file)")
    if prompt_file is not None and prompt_file != "-":
        prompt = read_text(prompt_file, "prompt file")
    elif "-" in (prompt, prompt_file):
        prompt = sys.stdin.read()
    prompt = text_arg(prompt, "the prompt")
    if system is not None:
        system = text_arg(system, "--system")
    if suffix is not None:
        suffix = text_arg(suffix, "--suffix")
        if use_chat:
            raise click.UsageError("--suffix frames raw text (fill in the middle); it does not go with --chat")
    if system is not None and not use_chat:
        from click.core import ParameterSource

        if click.get_current_context().get_parameter_source("system") == ParameterSource.COMMANDLINE:
            raise click.UsageError("--system needs --chat (a system message is part of the chat template)")
        system = None  # a default for chat, from the settings: no part of a raw prompt
    sampling = sampling_of(opts)
    constraint = constraint_of(grammar_file, json_schema, json_object)
    engine = load_engine(opts)
    if use_chat:
        note_template(engine.model)
    tokens = engine.tokenize(prompt, chat_format=use_chat, system=system, suffix=suffix)
    _run(engine, tokens, sampling, 256 if opts["max_tokens"] is None else opts["max_tokens"], opts["stop"], as_json,
         constraint)


def _run(engine, tokens, sampling, max_tokens, stop, as_json, constraint=None) -> None:
    text, ids, result = [], [], None
    reading = PromptProgress()
    try:
        for r in engine.stream(tokens, max_tokens=max_tokens, sampling=sampling, stop=stop, constraint=constraint,
                               prompt_progress=reading):
            text.append(r.text)
            if r.token is not None:
                ids.append(r.token)
            if not as_json and r.text:
                click.echo(r.text, nl=False)
            result = r.result
    except (KeyboardInterrupt, Terminated) as e:
        # Keep what was generated: finish the line (or the JSON) and say it was stopped.
        reading.clear()
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated"
        if as_json:
            click.echo(json.dumps({"text": "".join(text), "tokens": ids, "finish_reason": why, "stats": None}))
        else:
            click.echo("")
        raise
    finally:
        reading.clear()  # (before the error's line, where one follows)
    for note in engine.notes:
        click.echo(f"edgespec: note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
        return
    click.echo("")
    click.echo("edgespec: " + result.stats.summary() + f", finish: {result.finish_reason}", err=True)


@cli.command(epilog=EXAMPLES)
@engine_options
@click.option("--system", help="System prompt.")
@click.option("--chat-format", metavar="TEMPLATE",
              help="Chat template to use instead of the model's: a Jinja file, or a name llama.cpp knows (chatml, "
                   "llama3, gemma, ...).")
@click.option("--no-color", is_flag=True, help="Do not colour drafted tokens (off anyway when not a terminal).")
@constraint_options
@model_argument
def chat(system, chat_format, no_color, grammar_file, json_schema, json_object, **opts) -> None:
    """Chat with a model in a terminal; with piped input, one message per line.

    \b
    Slash commands: /stats /reset /system TEXT /save FILE /load FILE /help /exit
    Ctrl-C stops a reply (what was written stays); Ctrl-C at the prompt twice, or Ctrl-D, exits.
    SIGTERM or a closed terminal saves an unsaved conversation under ~/.cache/edgespec/chats.
    """
    from .repl import Repl

    template = chat_template(chat_format)
    if system is not None:
        system = text_arg(system, "--system")
    sampling = sampling_of(opts)
    constraint = constraint_of(grammar_file, json_schema, json_object)
    engine = load_engine(opts)
    note_template(engine.model, template)
    color = not no_color and sys.stdout.isatty()
    Repl(engine, sampling, 1024 if opts["max_tokens"] is None else opts["max_tokens"], opts["stop"], system,
         template, color, constraint).run()


@cli.command()
@engine_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--parallel", "-np", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Sequences served at once (continuous batching); more requests wait in line.")
@click.option("--api-key", envvar="EDGESPEC_API_KEY", help="Require Authorization: Bearer KEY.")
@click.option("--alias", metavar="NAME", help="The model's name in /v1/models and Ollama's /api/tags (default: "
                                              "its file's name).")
@click.option("--no-request-log", "quiet", is_flag=True,
              help="No line on stderr per request (by default each prints who asked, the status, and what it made).")
@click.option("--allow-origin", "origins", multiple=True, metavar="ORIGIN",
              help="Let web pages from ORIGIN (e.g. http://localhost:3000; * for any) call the API from a browser "
                   "(CORS; repeatable). Default: none, so no web page you visit can read answers from it.")
@click.option("--no-webui", "no_webui", is_flag=True,
              help="No chat page at / for a browser (by default one is there: the conversation kept in the browser).")
@model_argument
def serve(host, port, parallel, api_key, alias, quiet, origins, no_webui, **opts) -> None:
    """An OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models,
    /health, /metrics), with Anthropic's /v1/messages (Claude Code), Ollama's /api/chat, /api/generate and /api/tags
    (Open WebUI, Continue, Zed), and llama-server's /completion, /infill (editors' fill in the middle), /tokenize,
    /detokenize and /props.

    \b
    Each request may ask for "speculative": {"mode": "auto"|"off"|"draft"|"lookup"|"hybrid", "draft_max": K};
    auto drafts where the measured costs say the whole batch gets faster for it. Ctrl-C or SIGTERM stops it:
    running requests get their final chunk, exit 0.
    """
    from click.core import ParameterSource

    from .batch import BatchEngine
    from .listening import loopback
    from .server import ServerState, serve as run_server

    if opts["tree_width"] > 1:
        raise click.UsageError("--tree-width is for generate and chat; the server's batches verify chains")
    for name, why in (("fixed", "the server's batches draft by measured cost; a request may ask for "
                                "\"speculative\": {\"draft_max\": K}"),
                      ("draft_p_min", "the server's batches draft by measured cost"),
                      ("stop", "a request gives its own \"stop\""),
                      ("draft_ctx_size", "the server's draft holds each sequence's context")):
        if click.get_current_context().get_parameter_source(name) == ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--{name.replace('_', '-')} is for generate and chat ({why})")
    model, draft, lookup, _ = choose_models(opts)
    if not api_key and not loopback(host):
        click.echo(f"edgespec: note: listening on {host} without --api-key: anyone who can reach this machine "
                   "can use the model", err=True)
    if alias is not None and not alias.strip():
        raise click.BadParameter("the model's name cannot be empty", param_hint="--alias")
    state = ServerState(model_id=alias or os.path.basename(model), defaults=sampling_of(opts), api_key=api_key,
                        origins=tuple(origins), log=None if quiet else lambda line: click.echo(line, err=True),
                        webui=not no_webui, max_tokens=opts["max_tokens"])

    def load():
        return BatchEngine(model, draft, parallel=parallel, n_ctx=opts["ctx_size"], n_threads=opts["threads"],
                           n_gpu_layers=opts["gpu_layers"], draft_n_gpu_layers=opts["draft_gpu_layers"],
                           draft_n_threads=opts["draft_threads"], lookup=lookup, draft_max=opts["draft_max"],
                           rpc=opts["rpc"], draft_rpc=opts["draft_rpc"], tensor_split=opts["tensor_split"],
                           output_here=opts["output_here"], kv_cache=kv_cache_of(opts))

    ctx_chosen = chosen("ctx_size")  # (read here: ready() runs outside click's context)

    def ready(engine, port):
        note_context(engine.target.n_ctx, opts["ctx_size"], engine.model.n_ctx_train if ctx_chosen else 0)
        note_gpu_layers(opts)
        note_template(engine.model)
        click.echo(f"edgespec: serving {state.model_id} on http://{host}:{port}/v1 ({parallel} sequences; "
                   f"speculation {engine.auto}); Anthropic's and Ollama's clients: http://{host}:{port}"
                   f"{'' if no_webui else f'; a chat page for a browser: http://{host}:{port}/'}; Ctrl-C stops", err=True)

    run_server(state, load, host, port, ready)


@cli.command("config")
@engine_options
@click.pass_context
def config_cmd(ctx, **opts) -> None:
    """Show the settings in effect for generate and chat, and where each comes from."""
    from click.core import ParameterSource

    from .settings import config_path, env_name

    click.echo(f"settings file: {config_path()} ({'found' if config_path().is_file() else 'none'})")
    for name, value in opts.items():
        source = {ParameterSource.COMMANDLINE: "flag", ParameterSource.ENVIRONMENT: f"env {env_name(name)}",
                  ParameterSource.DEFAULT_MAP: "settings file"}.get(ctx.get_parameter_source(name), "default")
        shown = "(the embedded default)" if name == "model" and value is None else value
        click.echo(f"  {name:<18} {shown!s:<28} {source}")


from .measure_cli import bench, tune  # noqa: E402  (the measuring commands live apart; registered here)
from .models_cli import check, fetch_default, models_cmd, pull, quantize_cmd  # noqa: E402  (so do the model files')

for command in (bench, tune, check, models_cmd, pull, quantize_cmd, fetch_default):
    cli.add_command(command)

if __name__ == "__main__":
    main()
