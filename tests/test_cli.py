"""The command line end to end, as a user runs it (a subprocess, real output streams, exit codes)."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from edgespec import default_model


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], input=stdin, capture_output=True,
                          text=True, timeout=120)


def test_generate_json_speculative_equals_no_spec(tiny_pair):
    t, d = tiny_pair
    common = ["generate", "-m", t, "--prompt", "Once upon a time", "-n", "40", "-t", "0", "--json"]
    spec = run(*common, "--draft", d, "--draft-max", "4", "--fixed")
    plain = run(*common, "--draft", d, "--no-spec")
    assert spec.returncode == 0 and plain.returncode == 0, spec.stderr
    a, b = json.loads(spec.stdout), json.loads(plain.stdout)
    assert a["tokens"] == b["tokens"] and a["text"] == b["text"] and len(a["tokens"]) == 40
    assert a["finish_reason"] == "length"
    s = a["stats"]
    for key in ["n_rounds", "n_drafted", "n_accepted", "acceptance_rate", "mean_accepted_length",
                "accept_by_position", "tokens_per_s", "ms_per_token"]:
        assert key in s
    assert set(s["phase_s"]) == {"draft", "prepare", "verify", "accept"}
    assert s["n_drafted"] > 0 and b["stats"]["n_drafted"] == 0


def test_prompt_from_stdin_or_a_file_and_streamed_text(tiny_pair, tmp_path):
    r = run("generate", "-m", tiny_pair[0], "-d", tiny_pair[1], "--fixed", "-p", "-", "-n", "10", "-t", "0",
            stdin="Hello world")
    j = run("generate", "-m", tiny_pair[0], "-p", "Hello world", "-n", "10", "-t", "0", "--json")
    assert r.returncode == 0
    assert r.stdout == json.loads(j.stdout)["text"] + "\n"
    assert "tok/s" in r.stderr and "acceptance" in r.stderr
    (tmp_path / "prompt.txt").write_text("Hello world")
    f = run("generate", "-m", tiny_pair[0], "-f", tmp_path / "prompt.txt", "-n", "10", "-t", "0")
    assert f.returncode == 0 and f.stdout == r.stdout
    dash = run("generate", "-m", tiny_pair[0], "-f", "-", "-n", "10", "-t", "0", stdin="Hello world")
    assert dash.returncode == 0 and dash.stdout == r.stdout  # -f - reads standard input, as -p - does


def test_more_threads_than_cpus_is_noted_and_the_default_follows_the_cpus_given(tiny_pair, monkeypatch, tmp_path):
    from edgespec.backend.llama import default_threads
    from edgespec.profile import usable_cpus

    n = usable_cpus()
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "-n", "3", "-t", "0", "--threads", n + 1, "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)["tokens"]) == 3  # said, not refused
    assert f"--threads {n + 1} is more than the {n} CPUs" in r.stderr
    assert "more than" not in run("generate", "-m", tiny_pair[0], "-p", "hi", "-n", "1", "--threads", n).stderr
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # a container given 2 of a host's 64 CPUs
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert usable_cpus() == 2 and default_threads() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    quota = tmp_path / "cpu.max"
    for text, cpus in (("300000 100000\n", 3), ("150000 100000\n", 2), ("max 100000\n", 64), ("junk", 64)):
        quota.write_text(text)  # a container's quota (docker --cpus 3): cgroup v2's cpu.max
        assert usable_cpus(str(quota)) == cpus, text


def test_chat_flag_uses_the_models_template(tiny_pair):
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "--chat", "--system", "be brief", "-n", "5", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["stats"]["n_prompt"] > 15


@pytest.mark.parametrize("args,message", [
    (["-m", "/nonexistent.gguf"], "edgespec: error: model file not found: /nonexistent.gguf"),
    (["-m", "{t}", "-d", "{renamed}"], "edgespec: error: draft {renamed} cannot draft for target {t}: token 100"),
    (["-m", "{t}", "-c", "256", "-p", "x" * 300], "edgespec: error: the prompt is 300 tokens"),
])
def test_user_errors_are_one_line_and_exit_1(tiny_dir, tiny_pair, args, message):
    import tiny_models

    renamed = tiny_dir / "renamed-cli.gguf"
    if not renamed.exists():
        tiny_models.write(renamed, tiny_models.weights(0), rename={100: "zz"})
    subs = {"t": tiny_pair[0], "renamed": renamed}
    args = [a.format(**subs) for a in args]
    r = run("generate", *(["-p", "hi"] if "-p" not in args else []), *args)
    assert r.returncode == 1
    assert r.stderr.startswith(message.format(**subs)) and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_option_value_is_a_usage_error(tiny_pair):
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "--temperature", "-1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for args in (["generate", "-p", "hi", "--tree-width", "5"], ["serve", "--tree-width", "2"]):
        r = run(*args, "-m", tiny_pair[0])
        assert r.returncode == 2 and "--tree-width" in r.stderr and "Traceback" not in r.stderr, r.stderr
    # generate's and chat's options the server has no use for: said, not ignored
    for flag in (["--fixed"], ["--draft-p-min", "0.8"], ["--stop", "x"], ["--draft-ctx-size", "512"]):
        r = run("serve", "-m", tiny_pair[0], *flag)
        assert r.returncode == 2 and f"{flag[0]} is for generate and chat" in r.stderr and \
            r.stderr.count("\n") == 1, r.stderr


def test_llama_cpps_spellings_of_the_options_mean_the_same(tiny_pair):
    t, d = tiny_pair
    ours = run("generate", "-m", t, "-d", d, "-p", "Once", "-n", "12", "-t", "0.7", "--seed", "5", "--json")
    theirs = run("generate", "-m", t, "-md", d, "-p", "Once", "--n-predict", "12", "--temp", "0.7", "-s", "5", "--json")
    assert ours.returncode == theirs.returncode == 0
    assert json.loads(ours.stdout)["tokens"] == json.loads(theirs.stdout)["tokens"]
    hot = run("generate", "-m", t, "-p", "Once", "-n", "2", "-t", "8")  # (llama.cpp's -t is its thread count)
    assert hot.returncode == 0 and "a temperature of 8 samples close to at random" in hot.stderr


def test_the_target_model_may_be_the_first_argument(tiny_pair, tmp_path):
    """`edgespec chat MODEL`, as `vllm serve MODEL` and `ollama run MODEL` take it: -m's value, above EDGESPEC_MODEL
    and the settings file; a different -m beside it is a usage error, one line."""
    import os

    t, d = tiny_pair
    common = ["-d", d, "-p", "Once", "-n", "8", "-t", "0", "--json"]
    flag, first = run("generate", "-m", t, *common), run("generate", t, *common)
    assert flag.returncode == first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["tokens"] == json.loads(flag.stdout)["tokens"]
    same = run("generate", t, "-m", t, *common)
    assert same.returncode == 0 and json.loads(same.stdout)["tokens"] == json.loads(flag.stdout)["tokens"]
    (tmp_path / "settings.toml").write_text('model = "/nonexistent-too.gguf"\n')
    for where in ({"EDGESPEC_MODEL": "/nonexistent.gguf"}, {"EDGESPEC_CONFIG": str(tmp_path / "settings.toml")}):
        over = subprocess.run([sys.executable, "-m", "edgespec", "generate", t, *common], capture_output=True,
                              text=True, timeout=120, env={**os.environ, **where})
        assert over.returncode == 0 and json.loads(over.stdout)["tokens"] == json.loads(flag.stdout)["tokens"], where
    two = run("generate", t, "-m", d, "-p", "Once")
    assert two.returncode == 2 and f"two target models: {t} and -m {d}; give one" in two.stderr and \
        two.stderr.count("\n") == 1, two.stderr
    missing = run("tune", "/nonexistent.gguf")
    assert missing.returncode == 1 and "model file not found: /nonexistent.gguf" in missing.stderr
    for command in ("generate", "chat", "serve", "bench", "tune"):
        assert f"Usage: edgespec {command} [OPTIONS] [MODEL]" in run(command, "--help").stdout


def test_generate_with_trees_equals_plain(tiny_pair):
    t, d = tiny_pair
    common = ["generate", "-m", t, "--prompt", "ab ac ad ab ac ad ab ae ab", "-n", "30", "-t", "0", "--json"]
    trees = run(*common, "--draft", d, "--lookup", "--tree-width", "3")
    plain = run(*common, "--no-spec")
    assert trees.returncode == 0 and plain.returncode == 0, trees.stderr
    assert json.loads(trees.stdout)["tokens"] == json.loads(plain.stdout)["tokens"]


def test_quantize_writes_a_copy_that_drafts_and_never_overwrites(tiny_pair, tmp_path):
    """`edgespec quantize SOURCE DEST`: llama.cpp's quantize API (Q4_0 by default, the format a CPU draft steps
    fastest in); the copy pairs and drafts, and the output stays the target's. DEST is never overwritten, and a run
    that fails leaves no file."""
    t, d = tiny_pair
    dest = tmp_path / "draft-q4_0.gguf"
    r = run("quantize", d, dest)
    assert r.returncode == 0 and dest.exists() and r.stdout.startswith(f"{dest}: ") and "(Q4_0)" in r.stderr
    assert dest.stat().st_size < d.stat().st_size
    common = ["-m", t, "-p", "Once upon a time", "-n", "16", "-t", "0", "--json"]
    drafted, plain = run("generate", *common, "-d", dest, "--fixed"), run("generate", *common, "--no-spec")
    assert drafted.returncode == plain.returncode == 0, drafted.stderr
    a, b = json.loads(drafted.stdout), json.loads(plain.stdout)
    assert a["tokens"] == b["tokens"] and a["stats"]["n_drafted"] > 0
    before = dest.read_bytes()
    again = run("quantize", d, dest, "--type", "q8_0")
    assert again.returncode == 1 and "exists; remove it or name another file" in again.stderr and \
        again.stderr.count("\n") == 1 and dest.read_bytes() == before
    bad = run("quantize", d, tmp_path / "x.gguf", "--type", "q3")
    assert bad.returncode == 2 and "--type" in bad.stderr and not (tmp_path / "x.gguf").exists()
    missing = run("quantize", "/nonexistent.gguf", tmp_path / "y.gguf")
    assert missing.returncode == 1 and "model file not found: /nonexistent.gguf" in missing.stderr
    nowhere = run("quantize", d, tmp_path / "no" / "z.gguf")
    assert nowhere.returncode == 1 and f"there is no folder {tmp_path / 'no'}" in nowhere.stderr and \
        nowhere.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft-q4_0.gguf"]  # (no .part left behind)


def test_quantize_interrupted_leaves_no_file(tiny_pair, tmp_path, monkeypatch):
    """Ctrl-C lands when llama.cpp's quantize call returns (it cannot be stopped inside): the part it wrote goes,
    and DEST is never made."""
    from edgespec import models_cli
    from edgespec.backend import llama

    def interrupted(src, dst, ftype, threads=None):
        Path(dst).write_bytes(b"GGUF part")
        raise KeyboardInterrupt
    monkeypatch.setattr(llama, "quantize", interrupted)
    with pytest.raises((KeyboardInterrupt, click.exceptions.Abort)):  # (click's own main says Abort)
        models_cli.quantize_cmd.main([str(tiny_pair[1]), str(tmp_path / "q.gguf")], standalone_mode=False)
    assert list(tmp_path.iterdir()) == []


def test_help_and_version():
    assert "Examples:" in run("--help").stdout
    helps = [run(command, "--help").stdout for command in ("generate", "chat", "serve", "bench")]
    assert "--draft-max" in helps[0]
    assert all("None" not in text for text in helps)  # (click shows an unbounded range as "x<=None")
    assert run("--version").stdout.startswith("edgespec, version")


@pytest.mark.realmodel
def test_ctrl_c_keeps_what_was_generated():
    model = default_model.path()
    proc = subprocess.Popen([sys.executable, "-m", "edgespec", "generate", "-m", str(model), "-p", "1, 2, 3, 4, 5, 6, 7,",
                             "-n", "3000", "-t", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(5)
    assert proc.poll() is None, "finished before the interrupt: pick a longer generation"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert data["finish_reason"] == "interrupted" and len(data["tokens"]) > 5 and data["text"]
    assert "Traceback" not in err


def test_a_long_prompts_reading_is_shown_on_a_terminal_and_erased(monkeypatch):
    import io

    from edgespec.progress import PromptProgress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term, piped = Terminal(), io.StringIO()
    for out in (term, piped):
        p = PromptProgress(out)
        p(512, 1400, 0)
        p(1024, 1400, 0)
        p(1400, 1400, 0)
    assert piped.getvalue() == ""  # nothing where standard error is not a terminal
    shown = term.getvalue()
    assert "reading the prompt: 512/1,400 tokens (36%)" in shown and "1,024/1,400 tokens (73%)" in shown
    assert shown.endswith("\r\033[K")  # erased before the reply
    quiet = Terminal()
    PromptProgress(quiet)(30, 30, 0)  # a prompt read in one batch: nothing to show
    assert quiet.getvalue() == ""


def test_ctrl_c_while_a_long_prompt_is_read_erases_the_reading_line(monkeypatch):
    """Interrupted before the first token (a pasted file's reading takes seconds on a CPU), generate leaves no
    half-drawn progress line behind: the line is erased, then the interrupt goes on (exit 130 in the CLI)."""
    import io

    from edgespec import cli
    from edgespec.sampling import GREEDY

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    class Reading:  # an engine interrupted mid-prompt
        notes = []

        def stream(self, tokens, prompt_progress, **kw):
            prompt_progress(512, 1400, 0)
            raise KeyboardInterrupt
            yield

    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    with pytest.raises(KeyboardInterrupt):
        cli._run(Reading(), [1, 2, 3], GREEDY, 16, [], False)
    shown = term.getvalue()
    assert "reading the prompt: 512/1,400" in shown and shown.endswith("\r\033[K")
