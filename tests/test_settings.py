"""Defaults from the settings file and EDGESPEC_* variables; flags win; `edgespec config` says which is which."""
import json
import os
import subprocess
import sys

import pytest


def run(*args, env=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, input=stdin, timeout=120)


def test_precedence_flag_over_env_over_file_over_default(tmp_path, tiny_pair):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'model = "{tiny_pair[0]}"\ntemperature = 0.3\nctx-size = 512\nmax_tokens = 7\n')
    env = {"EDGESPEC_CONFIG": str(cfg), "EDGESPEC_TEMPERATURE": "0"}
    shown = run("config", env=env).stdout
    assert "temperature        0.0" in shown and "env EDGESPEC_TEMPERATURE" in shown
    assert "ctx_size           512" in shown and "settings file" in shown
    assert "top_k              40" in shown and "default" in shown
    out = json.loads(run("generate", "-p", "Hello", "--json", env=env).stdout)
    assert len(out["tokens"]) == 7  # model and max_tokens from the file
    out = json.loads(run("generate", "-p", "Hello", "--json", "-n", "3", env=env).stdout)
    assert len(out["tokens"]) == 3  # the flag wins


def test_a_broken_settings_file_is_one_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("temperature = [")
    r = run("config", env={"EDGESPEC_CONFIG": str(cfg)})
    assert r.returncode == 2 and r.stderr.startswith("edgespec: error: cannot read settings file")
    assert r.stderr.count("\n") == 1


def test_an_infinite_number_in_the_settings_file_is_one_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("top_k = inf\n")  # TOML allows inf and nan; no option takes them (found by hypothesis)
    r = run("config", env={"EDGESPEC_CONFIG": str(cfg)})
    assert r.returncode == 2 and "top_k = " in r.stderr and "finite" in r.stderr and r.stderr.count("\n") == 1


def test_unknown_setting_is_reported(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("temprature = 0.3\n")
    r = run("config", env={"EDGESPEC_CONFIG": str(cfg)})
    assert r.returncode == 2 and "unknown settings" in r.stderr and "temprature" in r.stderr


def test_models_lists_presets_and_check_shows_both_models(tiny_pair, fim_pair):
    out = run("models").stdout
    for name in ("smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-7b", "llama3.2-3b"):
        assert name in out
    r = run("check", *tiny_pair)
    assert r.returncode == 0 and "vocab size" in r.stdout and "ok: the draft can draft" in r.stdout
    rows = {line[:16].strip(): line[16:].split() for line in r.stdout.splitlines()}
    assert rows["trained context"] == ["32768", "32768"] and rows["fill in middle"] == ["no", "no"]
    assert rows["thinks aloud"] == ["no", "no"]
    assert rows["file"] == [str(p) for p in tiny_pair]  # (columns apart however long the paths)
    r = run("check", fim_pair[0], tiny_pair[1])
    assert "fill in middle  yes" in r.stdout and "cannot pair" in r.stderr


def test_a_stop_string_with_spaces_from_the_environment_and_a_list_from_the_file(tmp_path, tiny_pair):
    assert "('end of turn',)" in run("config", env={"EDGESPEC_STOP": "end of turn"}).stdout
    assert "('a b', '\\n\\n')" in run("config", env={"EDGESPEC_STOP": '["a b", "\\n\\n"]'}).stdout
    ref = json.loads(run("generate", "-m", tiny_pair[0], "-p", "Hello world", "-n", "40", "-t", "0", "--json").stdout)
    text = ref["text"]
    stop = text[10:13]
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"stop = [{json.dumps(stop)}, \"zz zz\"]\n")
    for env in ({"EDGESPEC_CONFIG": str(cfg)}, {"EDGESPEC_STOP": json.dumps(["zz zz", stop])}):
        r = run("generate", "-m", tiny_pair[0], "-p", "Hello world", "-n", "40", "-t", "0", "--json", env=env)
        assert json.loads(r.stdout)["text"] == text[: text.index(stop)], r.stderr


def test_config_names_flags_as_their_source(tmp_path):
    shown = run("config", "-t", "0.3", "--stop", "a b", env={"EDGESPEC_CONFIG": str(tmp_path / "none.toml")})
    assert shown.returncode == 2  # a missing EDGESPEC_CONFIG file is an error, not silence
    shown = run("config", "-t", "0.3", "--stop", "a b").stdout
    assert "temperature        0.3" in shown and "flag" in shown.split("temperature", 1)[1].splitlines()[0]
    assert "('a b',)" in shown


def test_settings_never_lock_out_the_commands_that_do_not_read_them(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("temprature = 3\n")
    r = run("models", env={"EDGESPEC_CONFIG": str(cfg)})
    assert r.returncode == 0 and "smollm2-135m" in r.stdout


def test_the_banner_says_what_drafts(tiny_pair):
    from edgespec import default_model

    default_model.path()
    for args, says in ((["--no-spec"], "without speculation"), ([], "with prompt-lookup drafting"),
                       (["-d", str(default_model.path())], "with a draft model")):
        r = run("generate", "-p", "hi", "-n", "2", *args)
        banner = r.stderr.splitlines()[0]
        assert r.returncode == 0 and says in banner and ("lookup" not in banner or "lookup" in says), r.stderr


def test_a_context_llama_cpp_rounds_up_is_said(tiny_pair):
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "-n", "2", "-c", "100")
    assert r.returncode == 0
    assert "note: the context holds 256 tokens (--ctx-size 100: llama.cpp rounds up" in r.stderr
    assert "trained on" not in r.stderr


def test_gpu_layers_on_a_build_without_a_gpu_are_said_to_do_nothing(tiny_pair):
    from edgespec.backend.rpc import local_devices

    if local_devices():
        pytest.skip("this build has a GPU")
    r = run("generate", "-m", tiny_pair[0], "-d", tiny_pair[1], "-p", "hi", "-n", "2", "-ngl", "99", "-ngld", "-1")
    assert r.returncode == 0
    assert "note: --gpu-layers and --draft-gpu-layers have no effect here: this llama.cpp was built for the CPU" \
        in r.stderr
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "-n", "2", "--n-gpu-layers", "0")  # (llama.cpp's name)
    assert r.returncode == 0 and "no effect" not in r.stderr


def test_a_context_past_what_the_model_was_trained_on_is_said(tiny_pair):
    r = run("generate", "-m", tiny_pair[0], "-p", "hi", "-n", "2", "-c", "40000")  # (the tiny models: 32768)
    assert r.returncode == 0
    assert "note: --ctx-size 40000 is more than the model was trained on (32768 tokens)" in r.stderr
