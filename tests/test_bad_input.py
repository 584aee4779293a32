"""The bad-input corpus: what a hostile new user types, as a subprocess of the real CLI. Each case asserts the exit
code (README: 1 could not do it, 2 bad option / setting, 130 Ctrl-C, 143 SIGTERM), one line on stderr that says
what is wrong and what to do, no traceback, and that nothing the user had is lost."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

import tiny_models


@dataclass
class Case:
    name: str
    args: list  # placeholders: {t} target, {d} draft, {tmp} a scratch folder, {...} files made by `files`
    rc: int
    says: str  # a regex the one line on stderr must match (what is wrong, and what to do)
    stdin: str | bytes | None = None
    env: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # name -> bytes or str written under tmp, or a callable(tmp)
    keeps: Callable | None = None  # asserts that what the user had is still there


def _corpus() -> list[Case]:
    gen = ["generate", "-m", "{t}", "-p", "hi", "-n", "4"]
    chat = ["chat", "-m", "{t}", "-n", "6", "-t", "0"]
    good_save = json.dumps({"messages": [{"role": "user", "content": "keep me"},
                                         {"role": "assistant", "content": "kept"}]})
    cases = [
        # model and draft files
        Case("missing model", ["generate", "-m", "{tmp}/nope.gguf", "-p", "hi"], 1,
             r"model file not found: .*nope\.gguf \(not a file, a preset from `edgespec models`, or REPO:FILE\)"),
        Case("model is a directory", ["generate", "-m", "{tmp}", "-p", "hi"], 1, r"is a directory.*name the \.gguf"),
        Case("model is text", ["generate", "-m", "{txt}", "-p", "hi"], 1, r"not a GGUF model file.*\.gguf files",
             files={"txt": "hello"}),
        Case("model is empty", ["generate", "-m", "{empty}", "-p", "hi"], 1, r"not a GGUF model file",
             files={"empty": b""}),
        Case("model is truncated", ["generate", "-m", "{cut}", "-p", "hi"], 1,
             r"llama.cpp could not load .*cut.dat: error loading model: .* model is corrupted or incomplete",
             files={"cut": lambda tmp, t: Path(t).read_bytes()[: os.path.getsize(t) // 2]}),
        Case("model header only", ["generate", "-m", "{hdr}", "-p", "hi"], 1, r"llama.cpp could not load",
             files={"hdr": b"GGUF" + b"\0" * 100}),
        Case("draft missing", [*gen, "-d", "{tmp}/nodraft.gguf"], 1, r"model file not found: .*nodraft"),
        Case("draft is text", [*gen, "-d", "{txt}"], 1, r"not a GGUF model file", files={"txt": "x"}),
        Case("draft is a directory", [*gen, "-d", "{tmp}"], 1, r"is a directory"),
        Case("unknown preset", ["generate", "-m", "qwen9-mega", "-p", "hi"], 1,
             r"not a file, a preset from `edgespec models`, or REPO:FILE"),
        Case("hub file offline", ["generate", "-m", "nobody/none-GGUF:none.gguf", "-p", "hi"], 1,
             r"not in the local cache and the hub cannot be reached", env={"HF_HUB_OFFLINE": "1"}),
        Case("check: missing target", ["check", "{tmp}/nope.gguf", "{d}"], 1, r"model file not found"),
        Case("check: text draft", ["check", "{t}", "{txt}"], 1, r"not a GGUF model file", files={"txt": "x"}),
        Case("check: directory", ["check", "{tmp}", "{d}"], 1, r"is a directory"),
        Case("KV cache type edgespec does not keep", [*gen, "-ctk", "q4_0"], 2,
             r"Invalid value for '--cache-type-k'.*use one of f16, f32, q8_0"),
        Case("q8_0 cache on heads of 16 values", [*gen, "-ctv", "q8_0"], 2,
             r"a q8_0 V cache needs attention heads of a multiple of 32 values; .*hold 16 \(use f16\)"),
        Case("chat-format typo", [*chat, "--chat-format", "chatm"], 2,
             r"--chat-format 'chatm' is neither a file nor a template name llama.cpp knows \(.*chatml"),
        Case("chat-format not UTF-8", [*chat, "--chat-format", "{bin}"], 2, r"cannot read the chat template",
             files={"bin": b"\xff\xfe{{ x }}"}),
        # pairs
        Case("draft of another vocabulary", [*gen, "-d", "{renamed}"], 1,
             r"draft .* cannot draft for target .*: token 100 differs",
             files={"renamed": lambda tmp, t: tiny_models.write(tmp / "r.gguf", tiny_models.weights(0),
                                                                rename={100: "zz"}).read_bytes()}),
        Case("draft with another end token", [*gen, "-d", "{eos}"], 1, r"BOS/EOS handling differs: eos id",
             files={"eos": lambda tmp, t: tiny_models.write(tmp / "e.gguf", tiny_models.weights(0),
                                                            eos=5).read_bytes()}),
        Case("check: pair that cannot pair", ["check", "{t}", "{renamed}"], 1, r"cannot pair: token 100 differs",
             files={"renamed": lambda tmp, t: tiny_models.write(tmp / "r.gguf", tiny_models.weights(0),
                                                                rename={100: "zz"}).read_bytes()}),
        # flags
        Case("temperature nan", [*gen, "-t", "nan"], 2, r"--temperature.*nan is not a finite number.*--help"),
        Case("temperature inf", [*gen, "-t", "inf"], 2, r"inf is not a finite number"),
        Case("temperature negative", [*gen, "-t", "-1"], 2, r"--temperature.*-1.*range"),
        Case("top-p negative", [*gen, "--top-p", "-0.5"], 2, r"--top-p"),
        Case("top-p above one", [*gen, "--top-p", "1.5"], 2, r"--top-p"),
        Case("top-p nan", [*gen, "--top-p", "nan"], 2, r"not a finite number"),
        Case("min-p negative", [*gen, "--min-p", "-0.1"], 2, r"--min-p"),
        Case("top-k negative", [*gen, "--top-k", "-3"], 2, r"--top-k"),
        Case("max-tokens negative", [*gen, "-n", "-5"], 2, r"--max-tokens"),
        Case("seed below -1", [*gen, "--seed", "-2"], 2, r"--seed.*-2"),
        Case("seed not a number", [*gen, "--seed", "abc"], 2, r"--seed.*'abc' is not a valid integer"),
        Case("draft-max negative", [*gen, "-k", "-1"], 2, r"--draft-max"),
        Case("draft-p-min above one", [*gen, "--draft-p-min", "2"], 2, r"--draft-p-min"),
        Case("ctx-size zero", [*gen, "-c", "0"], 2, r"--ctx-size"),
        Case("threads zero", [*gen, "--threads", "0"], 2, r"--threads"),
        Case("gpu-layers not a number", [*gen, "--gpu-layers", "all"], 2, r"--gpu-layers"),
        Case("misspelled flag", [*gen, "--temprature", "0.3"], 2,
             r"No such option '--temprature'. \(?Did you mean .*'--temperature'"),
        Case("misspelled command", ["generat", "-p", "hi"], 2, r"No such command 'generat'.*generate"),
        Case("missing prompt", ["generate", "-m", "{t}"], 2, r"Missing option '--prompt'.*--help"),
        Case("system without chat", [*gen, "--system", "be brief"], 2, r"--system needs --chat"),
        # constraints and penalties
        Case("grammar with an undefined rule", [*gen, "--grammar-file", "{g}"], 2, r"invalid grammar: .*",
             files={"g": 'root ::= "a" missing\n'}),
        Case("grammar file missing", [*gen, "--grammar-file", "{tmp}/none.gbnf"], 2, r"cannot read the grammar"),
        Case("schema not JSON", [*gen, "--json-schema", "{{'type': 'object'}}"], 2, r"the JSON schema is not valid JSON"),
        Case("schema file missing", [*gen, "--json-schema", "{tmp}/schema.json"], 2,
             r"--json-schema.*no file .*schema\.json \(give a schema file, or the schema itself"),
        Case("schema not an object", [*gen, "--json-schema", "{s}"], 2, r"a JSON schema must be a JSON object",
             files={"s": "[1, 2]"}),
        Case("two constraints", [*gen, "--json-object", "--json-schema", '{{"type": "object"}}'], 2,
             r"--json-schema and --json-object cannot be combined"),
        Case("logit bias not ID=BIAS", [*gen, "--logit-bias", "e=3"], 2, r"--logit-bias.*'e=3' is not ID=BIAS"),
        Case("repeat penalty zero", [*gen, "--repeat-penalty", "0"], 2, r"--repeat-penalty"),
        # prompts
        Case("prompt longer than the context", ["generate", "-m", "{t}", "-c", "256", "-p", "x" * 300], 1,
             r"the prompt is 300 tokens but the context holds 256; use a larger --ctx-size"),
        Case("empty prompt", ["generate", "-m", "{t}", "-p", ""], 1, r"the prompt is empty; give some text"),
        Case("stdin not UTF-8", ["generate", "-m", "{t}", "-p", "-"], 2,
             r"the prompt is not UTF-8 text .*iconv", stdin=b"caf\xe9 au lait"),
        Case("argument not UTF-8", ["generate", "-m", "{t}", "-p", b"caf\xe9"], 2, r"the prompt is not UTF-8 text"),
        Case("prompt file missing", ["generate", "-m", "{t}", "-f", "{tmp}/none.txt"], 2,
             r"cannot read the prompt file .*none\.txt: No such file"),
        Case("prompt file not UTF-8", ["generate", "-m", "{t}", "-f", "{bin}"], 2, r"cannot read the prompt file",
             files={"bin": b"caf\xe9"}),
        Case("prompt file and -p", ["generate", "-m", "{t}", "-f", "{p}", "-p", "hi"], 2,
             r"give the prompt once: -p TEXT, -p - \(standard input\) or -f FILE", files={"p": "hi"}),
        Case("chat with a model without a template", ["generate", "-m", "{notmpl}", "-p", "hi", "--chat"], 1,
             r"has no chat template in its metadata; run without --chat, or give one with --chat-format",
             files={"notmpl": lambda tmp, t: tiny_models.write(tmp / "n.gguf", tiny_models.weights(0),
                                                               chat_template=None).read_bytes()}),
        Case("template refuses a system message", [*gen, "--chat", "--system", "be brief"], 1,
             r"the chat template refused the conversation: System role not supported",
             files={"t": lambda tmp, t: tiny_models.write(tmp / "ns.gguf", tiny_models.weights(0),
                                                          chat_template=tiny_models.NO_SYSTEM).read_bytes()}),
        # settings
        Case("misspelled setting", [*gen], 2, r"unknown settings in .*: temprature \(did you mean temperature\?\)",
             files={"cfg": "temprature = 0.3\n"}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("setting of the wrong type", [*gen], 2, r"cfg.dat: temperature = \"hot\": 'hot' is not a valid float",
             files={"cfg": 'temperature = "hot"\n'}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("setting out of range", [*gen], 2, r": top_p = 5: 5.* range",
             files={"cfg": "top_p = 5\n"}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("settings file not UTF-8", [*gen], 2, r"not UTF-8 text .*save it as UTF-8",
             files={"cfg": b"temperature = 0.3 # caf\xe9\n"}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("settings file not TOML", [*gen], 2, r"cannot read settings file",
             files={"cfg": "temperature = [\n"}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("EDGESPEC_CONFIG is a directory", [*gen], 2, r"is a directory; point EDGESPEC_CONFIG at a TOML file",
             env={"EDGESPEC_CONFIG": "{tmp}"}),
        Case("EDGESPEC_CONFIG is missing", [*gen], 2, r"is missing; point EDGESPEC_CONFIG at a TOML file",
             env={"EDGESPEC_CONFIG": "{tmp}/none.toml"}),
        Case("env temperature nan", [*gen], 2, r"env var: 'EDGESPEC_TEMPERATURE'.*not a finite number",
             env={"EDGESPEC_TEMPERATURE": "nan"}),
        Case("env ctx-size not a number", [*gen], 2, r"EDGESPEC_CTX_SIZE.*'big' is not a valid integer",
             env={"EDGESPEC_CTX_SIZE": "big"}),
        Case("env stop not a JSON list", [*gen], 2, r"EDGESPEC_STOP.*not a JSON list of strings",
             env={"EDGESPEC_STOP": "[1, 2"}),
        Case("config with a bad setting", ["config"], 2, r"cfg.dat: ctx_size = \"lots\": 'lots' is not a valid integer",
             files={"cfg": 'ctx_size = "lots"\n'}, env={"EDGESPEC_CONFIG": "{cfg}"}),
        Case("unknown setting in a list", ["config"], 2, r"unknown settings .*prompt",
             files={"cfg": 'prompt = "hi"\n'}, env={"EDGESPEC_CONFIG": "{cfg}"}),
    ]
    # chat commands, piped: the session reports and goes on; nothing saved is lost
    chat_cases = [
        ("/load of a missing file", "/load {tmp}/none.json", r"cannot read .*none\.json.*not loaded", {}),
        ("/load of a file that is not JSON", "/load {txt}", r"is not a saved chat .*not loaded", {"txt": "hello"}),
        ("/load of messages of the wrong types", "/load {bad}", r"message 1 is not a chat message.*not loaded",
         {"bad": json.dumps({"messages": [{"role": 5, "content": ["x"]}]})}),
        ("/load of an unknown role", "/load {bad}", r"message 2 is not a chat message",
         {"bad": json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]})}),
        ("/load of a late system message", "/load {bad}", r"message 2 is a system message; only the first",
         {"bad": json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]})}),
        ("/load of a list", "/load {bad}", r"is not a saved chat", {"bad": "[1, 2]"}),
        ("/save to a directory", "/save {tmp}", r"cannot write .*nothing was changed", {}),
        ("/save into a missing folder", "/save {tmp}/no/such/c.json", r"cannot write .*No such file", {}),
        ("/save without a file", "/save", r"usage: /save FILE", {}),
        ("unknown slash command", "/sav x", r"unknown command /sav; /help lists them", {}),
        ("a line that is not UTF-8", b"caf\xe9", r"not valid UTF-8 text; not sent", {}),
        ("a message longer than the context", "x" * 600, r"more than the 256-token context; use --ctx-size; not sent",
         {}),
    ]
    for name, line, says, files in chat_cases:
        script = (line if isinstance(line, bytes) else line.encode()) + b"\nhello\n/save {tmp}/good.json\n"
        cases.append(Case(f"chat: {name}", [*chat, "-c", "256"], 0, says, stdin=script,
                          files={"good.json": good_save, **files}, keeps=_chat_went_on))
    cases.append(Case("chat: template refuses the system prompt", [*chat, "--system", "be brief"], 0,
                      r"error: the chat template refused the conversation: System role not supported \(not sent\)",
                      stdin=b"hi\n/system\nhello\n/save {tmp}/good.json\n", keeps=_chat_went_on,
                      files={"good.json": good_save,
                             "t": lambda tmp, t: tiny_models.write(tmp / "ns.gguf", tiny_models.weights(0),
                                                                   chat_template=tiny_models.NO_SYSTEM).read_bytes()}))
    cases.append(Case("chat: /save that fails keeps the previous save", [*chat], 0, r"cannot write .*nothing was "
                      r"changed", stdin=b"hello " * 30 + b"\n/save {tmp}/good.json\n", files={"good.json": good_save},
                      env={"FSIZE": "64"}, keeps=_previous_save_intact))
    return cases


def _chat_went_on(tmp: Path, r) -> None:
    msgs = json.loads((tmp / "good.json").read_text())["messages"]
    assert msgs[-2] == {"role": "user", "content": "hello"} and msgs[-1]["role"] == "assistant", msgs


def _previous_save_intact(tmp: Path, r) -> None:
    assert json.loads((tmp / "good.json").read_text())["messages"][0]["content"] == "keep me"
    assert not [p for p in tmp.iterdir() if p.name.startswith(".good.json.")]  # no temporary file left behind


CORPUS = _corpus()


def run_cli(args, stdin=None, env=None, timeout=120):
    """The CLI as a subprocess; env FSIZE=N caps the size of files it may write (a full disk, in effect)."""
    env = {**os.environ, "EDGESPEC_CONFIG": "", **(env or {})}
    limit = int(env.pop("FSIZE", 0))

    def cap_file_size():
        if limit:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "edgespec", *args], input=stdin, capture_output=True, env=env,
                          timeout=timeout, preexec_fn=cap_file_size)


def _fill(value, subs):
    if isinstance(value, bytes):
        for k, v in subs.items():
            value = value.replace(b"{" + k.encode() + b"}", str(v).encode())
        return value
    return value.format(**subs) if isinstance(value, str) else value


def test_the_corpus_is_broad():
    kinds = {c.name.split(":")[0] if ":" in c.name else "other" for c in CORPUS}
    assert len(CORPUS) >= 60 and {"chat", "check"} <= kinds


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_bad_input(case: Case, tiny_pair, tmp_path):
    subs = {"t": tiny_pair[0], "d": tiny_pair[1], "tmp": tmp_path}
    for name, content in case.files.items():
        if callable(content):
            content = content(tmp_path, tiny_pair[0])
        path = tmp_path / (name if "." in name else f"{name}.dat")
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        subs[name] = path
    args = [_fill(a, subs) for a in case.args]
    env = {k: _fill(v, subs) for k, v in case.env.items()}
    stdin = _fill(case.stdin.encode() if isinstance(case.stdin, str) else case.stdin, subs)
    r = run_cli(args, stdin=stdin, env=env)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == case.rc, err
    assert "Traceback" not in err and "GGML_ASSERT" not in err
    if case.rc == 0:
        assert re.search(case.says, err), err
    else:
        assert err.count("\n") == 1 and err.startswith("edgespec: error: "), err
        assert re.search(case.says, err), err
    if case.keeps is not None:
        case.keeps(tmp_path, r)
