"""The options generate, chat and serve share, and what they build: the models (presets, the default), the engine,
the sampling config and the output constraint. cli.py's commands only add their own flags and run."""
from __future__ import annotations

import math

import click

from . import default_model
from .errors import InvalidArgument


class Finite(click.FloatRange):
    """A float range that also refuses nan and inf (which a plain range lets through)."""

    def convert(self, value, param, ctx):
        value = super().convert(value, param, ctx)
        if not math.isfinite(value):
            self.fail(f"{value} is not a finite number", param, ctx)
        return value

    def _describe_range(self) -> str:
        """Help text: click describes an open range as "x<=None"."""
        return "finite" if self.min is None and self.max is None else super()._describe_range()


class ListOption(click.Option):
    """A repeatable option whose EDGESPEC_* variable holds one value as it is (spaces kept) or a JSON list."""

    def value_from_envvar(self, ctx):
        from .settings import split_list

        raw = self.resolve_envvar_value(ctx)
        return None if raw is None else split_list(raw)

    def type_cast_value(self, ctx, value):
        return super().type_cast_value(ctx, [value] if isinstance(value, str) else value)


def _option(*decls, **kw):
    """A shared option whose default can also come from EDGESPEC_<NAME> or the settings file."""
    from .settings import env_name

    name = next(d for d in decls if d.startswith("--"))[2:].replace("-", "_")
    if kw.get("multiple"):
        kw["cls"] = ListOption
    return click.option(*decls, envvar=env_name(name), show_envvar=True, **kw)


def model_argument(f):
    """A command's target model as its first argument too, as `vllm serve MODEL` and `ollama run MODEL` take it:
    `edgespec chat MODEL` is `edgespec chat -m MODEL` (a file, a preset, or REPO:FILE). It stands where -m would,
    above EDGESPEC_MODEL and the settings file; given with a different -m it is a usage error (exit 2)."""
    import functools

    @functools.wraps(f)
    def command(*args, model_arg=None, **opts):
        if model_arg is not None:
            from click.core import ParameterSource

            given = click.get_current_context().get_parameter_source("model") == ParameterSource.COMMANDLINE
            if given and opts["model"] != model_arg:
                raise click.UsageError(f"two target models: {model_arg} and -m {opts['model']}; give one")
            opts["model"] = model_arg
        return f(*args, **opts)
    return click.argument("model_arg", metavar="[MODEL]", required=False)(command)


def note_threads(ctx, param, value):
    """More threads than the CPUs this process may use is said (llama.cpp's threads spin while they wait, so every
    step waits on threads that have no CPU: on 2 CPUs, 64 threads took 196 ms a token against 7 with 2)."""
    from .profile import usable_cpus

    if value is not None and value > (n := usable_cpus()):
        click.echo(f"edgespec: note: --{param.name.replace('_', '-')} {value} is more than the {n} CPUs this process "
                   f"may use; extra threads spin against each other and slow every step (default: physical cores)",
                   err=True)
    return value


def note_temperature(ctx, param, value):
    """A temperature past 2 is said: it samples close to at random, and llama.cpp's users type -t for threads."""
    if value is not None and value > 2:
        click.echo(f"edgespec: note: a temperature of {value:g} samples close to at random (-t is the temperature "
                   f"here; the CPU threads are --threads)", err=True)
    return value


def _split(ctx, param, value):
    if value is None:
        return ()
    try:
        parts = tuple(float(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(f"takes proportions such as 3,1, got {value!r}") from None
    if any(not math.isfinite(p) or p < 0 for p in parts) or not sum(parts) > 0:
        raise click.BadParameter(f"takes non-negative proportions, not all zero, such as 3,1, got {value!r}")
    return parts


def _endpoints(ctx, param, value):
    from .backend import rpc

    try:
        return tuple(rpc.parse(value)) if value else ()
    except InvalidArgument as e:
        raise click.BadParameter(str(e)) from None


RPC_OPTIONS = [
    _option("--rpc", metavar="HOST:PORT[,...]", callback=_endpoints,
            help="Split the target over these rpc-servers (llama.cpp's RPC backend; all its layers there unless "
                 "--gpu-layers says otherwise). Not secured: loopback or a trusted network only."),
    _option("--draft-rpc", metavar="HOST:PORT[,...]", callback=_endpoints,
            help="The draft's rpc-servers (default: the draft runs on this machine)."),
    _option("--tensor-split", metavar="P,P,...", callback=_split,
            help="Proportions of the target's layers per device: the --rpc servers in order, then local GPUs."),
    _option("--output-here", is_flag=True,
            help="With --rpc: keep the target's output layer on this machine, so each decode brings back a hidden "
                 "state a row, not the logits (n_vocab floats); worth it on a slow link, costs the output matmul "
                 "here."),
]


def _kv_type(ctx, param, value):
    from .backend.model import kv_types

    try:
        return kv_types(value)[0]
    except InvalidArgument as e:
        raise click.BadParameter(str(e)) from None


CACHE_OPTIONS = [  # the KV caches' number type (llama.cpp's --cache-type-k/-v), for the target's and the draft's
    _option("--cache-type-k", "-ctk", default="f16", show_default=True, callback=_kv_type, metavar="TYPE",
            help="The KV caches' K type: f16, f32 or q8_0, which halves its memory (a longer context, more "
                 "--parallel sequences)."),
    _option("--cache-type-v", "-ctv", default="f16", show_default=True, callback=_kv_type, metavar="TYPE",
            help="The KV caches' V type: f16, f32 or q8_0 (q8_0 needs flash attention, which llama.cpp turns on "
                 "where it can)."),
]


def kv_cache_of(opts: dict) -> tuple[str, str]:
    return opts["cache_type_k"], opts["cache_type_v"]


ENGINE_OPTIONS = [
    _option("--model", "-m", metavar="GGUF", help="Target model: a file, a preset, or REPO:FILE; or give it as MODEL, "
            "the first argument. Default: the embedded SmolLM2-135M-Instruct."),
    _option("--draft", "-d", "--model-draft", "-md", metavar="GGUF",
            help="Draft model (same vocabulary as the target)."),
    _option("--lookup", is_flag=True,
                 help="Prompt-lookup drafting (copies from the prompt and the text so far; no model). "
                      "With --draft: the hybrid, lookup first and the draft model for the rest."),
    _option("--no-spec", is_flag=True, help="Plain decoding with the target alone (the baseline)."),
    _option("--max-tokens", "-n", "--n-predict", default=None, type=click.IntRange(min=0),
                 help="Most tokens to generate (generate: 256; chat: 1024 per reply; serve: per request that "
                      "sets no limit, default up to the context)."),
    _option("--temperature", "-t", "--temp", default=0.8, show_default=True, type=Finite(min=0),
            callback=note_temperature, help="0 = greedy, identical to the target alone token for token."),
    _option("--top-k", default=40, show_default=True, type=click.IntRange(min=0), help="0 = off."),
    _option("--top-p", default=0.95, show_default=True, type=Finite(0, 1)),
    _option("--min-p", default=0.05, show_default=True, type=Finite(0, 1)),
    _option("--seed", "-s", type=click.IntRange(min=-1),
            help="Seed for sampling (reproducible runs); -1: a random one."),
    _option("--repeat-penalty", default=1.0, show_default=True, type=Finite(min=0, min_open=True),
            help="Divide the logits of tokens seen in the last --repeat-last-n tokens by this (1 = off)."),
    _option("--repeat-last-n", default=64, show_default=True, type=click.IntRange(min=0),
            help="Tokens the penalties look back over (prompt included)."),
    _option("--presence-penalty", default=0.0, show_default=True, type=Finite(),
            help="Subtract this from the logits of tokens seen in the window."),
    _option("--frequency-penalty", default=0.0, show_default=True, type=Finite(),
            help="Subtract this times the count of each token seen in the window."),
    _option("--logit-bias", multiple=True, metavar="ID=BIAS",
            help="Add BIAS to token ID's logit (repeatable; -inf bans the token)."),
    _option("--draft-max", "-k", default=8, show_default=True, type=click.IntRange(min=0),
                 help="Most tokens drafted per round; fewer (or none) when measured costs say that is faster."),
    _option("--fixed", is_flag=True, help="Draft exactly --draft-max tokens every round (no adaptive length)."),
    _option("--tree-width", default=1, show_default=True, type=click.IntRange(1, 4),
            help="Verification trees of up to this many branches: prompt lookup's several continuations, the draft "
                 "model's second choices as sibling leaves and a branch drafted after one where its confidence "
                 "splits, each verified only where measured costs say it pays (1: chains only)."),
    _option("--draft-p-min", default=0.0, show_default=True, type=Finite(0, 1),
                 help="Stop a draft when the draft model's top probability falls below this."),
    _option("--stop", multiple=True,
            help="Stop when this text appears (repeatable; EDGESPEC_STOP: one text, or a JSON list)."),
    _option("--ctx-size", "-c", default=4096, show_default=True, type=click.IntRange(min=1),
            help="Context in tokens (llama.cpp rounds it up to a multiple of 256)."),
    _option("--threads", type=click.IntRange(min=1), callback=note_threads,
            help="CPU threads (default: physical cores)."),
    _option("--draft-threads", type=click.IntRange(min=1), callback=note_threads,
            help="CPU threads for the draft (default: as --threads)."),
    _option("--draft-ctx-size", type=click.IntRange(min=1), help="Draft context (default: as --ctx-size)."),
    _option("--gpu-layers", "--n-gpu-layers", "-ngl", default=0, show_default=True, type=int,
            help="Target layers on the GPU (-1 = all; llama.cpp's names too)."),
    _option("--draft-gpu-layers", "--n-gpu-layers-draft", "-ngld", type=int,
            help="Draft layers on the GPU (default: as --gpu-layers)."),
    *RPC_OPTIONS,
    *CACHE_OPTIONS,
    _option("--verbose", is_flag=True, help="Show llama.cpp's own log."),
]


def engine_options(f):
    for option in reversed(ENGINE_OPTIONS):
        f = option(f)
    return f


ENGINE_PARAMS = engine_options(lambda **kw: None).__click_params__


def choose_models(opts: dict) -> tuple[str, str | None, bool, bool]:
    """(target path, draft path or None, prompt lookup, the default model?) from the shared options: the default
    model with prompt lookup when none is named; a preset brings its own draft and drafting."""
    from . import backend
    from .hub import cached_or_download, resolve

    backend.set_verbose(opts["verbose"])
    model, draft, lookup = opts["model"], opts["draft"], opts["lookup"]
    spec = not opts["no_spec"]
    default = model is None
    if default:
        model = str(default_model.path())
        lookup = lookup or not draft
    else:
        model, preset = resolve(model)
        if preset is not None and draft is None and spec:
            draft = preset.draft and cached_or_download(preset.draft)
            lookup = lookup or preset.lookup
    if draft is not None and spec:
        draft = resolve(str(draft))[0]
    return str(model), (str(draft) if draft and spec else None), bool(lookup and spec), default


def load_engine(opts: dict):
    """The engine the shared options describe."""
    from .engine import Engine

    model, draft, lookup, default = choose_models(opts)
    engine = Engine.load(model, draft, lookup=lookup, n_ctx=opts["ctx_size"],
                         n_threads=opts["threads"], n_gpu_layers=opts["gpu_layers"],
                         draft_n_ctx=opts["draft_ctx_size"], draft_n_gpu_layers=opts["draft_gpu_layers"],
                         draft_n_threads=opts["draft_threads"], draft_p_min=opts["draft_p_min"],
                         draft_max=opts["draft_max"], adaptive=not opts["fixed"], tree_width=opts["tree_width"],
                         rpc=opts["rpc"], draft_rpc=opts["draft_rpc"], tensor_split=opts["tensor_split"],
                         output_here=opts["output_here"], kv_cache=kv_cache_of(opts))
    if default:
        click.echo(f"edgespec: using the default model, {default_model.NAME}, {engine.drafting}; for a bigger one "
                   "pass --model (a file, a preset from `edgespec models`, or REPO:FILE)", err=True)
    note_context(engine.target.n_ctx, opts["ctx_size"], engine.model.n_ctx_train if chosen("ctx_size") else 0)
    note_gpu_layers(opts)
    return engine


def chosen(name: str) -> bool:
    """The option was set by the user (a flag, EDGESPEC_*, the settings file), not left at its default."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def note_gpu_layers(opts: dict) -> None:
    """--gpu-layers on a build with no GPU does nothing, silently in llama.cpp (its log even says the layers were
    offloaded): say so once, and where a GPU build comes from."""
    from .backend.rpc import local_devices

    asked = [f"--{name.replace('_', '-')}" for name in ("gpu_layers", "draft_gpu_layers") if opts.get(name)]
    if asked and not opts.get("rpc") and not opts.get("draft_rpc") and not local_devices():
        click.echo(f"edgespec: note: {' and '.join(asked)} {'has' if len(asked) == 1 else 'have'} no effect here: "
                   "this llama.cpp was built for the CPU alone (no GPU found); the README's GPU builds say how to "
                   "build for CUDA or Metal", err=True)


def note_template(model, template: str | None = None) -> None:
    """A chat template this renderer cannot run falls back to llama.cpp's (chat.tokenize): said once, not silently."""
    from .chat import template_note

    if (note := template_note(model, template)) is not None:
        click.echo(f"edgespec: note: {note}", err=True)


def note_context(got: int, asked: int, trained: int = 0) -> None:
    """What llama.cpp made of --ctx-size: rounded up, or (trained: the model's, when the user chose the size) past
    what the model was trained on."""
    if got != asked:
        click.echo(f"edgespec: note: the context holds {got} tokens (--ctx-size {asked}: llama.cpp rounds up to a "
                   "multiple of 256)", err=True)
    if 0 < trained < asked:
        click.echo(f"edgespec: note: --ctx-size {asked} is more than the model was trained on ({trained} tokens); "
                   "past that its text may degrade", err=True)


def sampling_of(opts: dict):
    from .sampling import SamplingConfig

    bias = []
    for item in opts.get("logit_bias") or ():
        token, _, value = item.partition("=")
        try:
            bias.append((int(token), float(value)))
        except ValueError:
            raise click.BadParameter(f"{item!r} is not ID=BIAS (e.g. 1234=-inf)", param_hint="--logit-bias") from None
    return SamplingConfig(opts["temperature"], opts["top_k"], opts["top_p"], opts["min_p"], opts["seed"],
                          repeat_penalty=opts["repeat_penalty"], repeat_last_n=opts["repeat_last_n"],
                          presence_penalty=opts["presence_penalty"], frequency_penalty=opts["frequency_penalty"],
                          logit_bias=tuple(bias))


def constraint_options(f):
    f = click.option("--json-object", is_flag=True, help="The output is a JSON object (any).")(f)
    f = click.option("--json-schema", metavar="SCHEMA",
                     help="The output is JSON valid under this schema: a file, or the schema itself.")(f)
    f = click.option("--grammar-file", metavar="FILE",
                     help="The output matches this grammar: GBNF (llama.cpp's format), or Lark if FILE ends .lark.")(f)
    return f


def constraint_of(grammar_file: str | None, json_schema: str | None, json_object: bool):
    """The constraint the options ask for (None: free text); a bad one is an error before any model loads."""
    from pathlib import Path

    from .constraints import Constraint

    given = [name for name, v in (("--grammar-file", grammar_file), ("--json-schema", json_schema),
                                  ("--json-object", json_object)) if v]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} cannot be combined: give one constraint")
    if json_object:
        constraint = Constraint.json_object()
    elif grammar_file is not None:
        kind = "lark" if grammar_file.endswith(".lark") else "gbnf"
        constraint = Constraint(kind, read_text(grammar_file, "grammar"))
    elif json_schema is not None:
        inline = json_schema.lstrip().startswith("{")
        if not inline and not Path(json_schema).exists() and (json_schema.endswith(".json") or "/" in json_schema):
            raise click.BadParameter(f"no file {json_schema} (give a schema file, or the schema itself: '{{...}}')",
                                     param_hint="'--json-schema'")  # a path mistyped, not JSON written wrong
        text = json_schema if inline or not Path(json_schema).exists() else read_text(json_schema, "JSON schema")
        constraint = Constraint("json_schema", text)
    else:
        return None
    constraint.grammar()  # a grammar or schema that does not parse: one line now, not after the model loads
    return constraint


def read_text(path: str, what: str) -> str:
    """A UTF-8 file the user named (a grammar, a schema, a prompt), or one line that says why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"cannot read the {what} {path}: {getattr(e, 'strerror', None) or e}") from None


def text_arg(value: str, where: str) -> str:
    """Text from the command line or a pipe must be UTF-8: say so, rather than tokenizing mangled bytes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"{where} is not UTF-8 text (an undecodable byte at character {e.start}); convert "
                              "it first, e.g. with iconv -t UTF-8") from None
    return value


def chat_template(value: str | None) -> str | None:
    """--chat-format: a Jinja file, a template name llama.cpp knows, or Jinja text itself; anything else (a
    mistyped name) is an error rather than a template that prints itself."""
    from pathlib import Path

    from .backend import builtin_templates

    if value is None:
        return None
    if Path(value).is_file():
        try:
            return Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgument(f"cannot read the chat template {value}: {getattr(e, 'strerror', None) or e}")
    names = builtin_templates()
    if value in names or "{{" in value or "{%" in value:
        return value
    raise InvalidArgument(f"--chat-format {value!r} is neither a file nor a template name llama.cpp knows "
                          f"({', '.join(sorted(names))})")
