"""Defaults from the settings file and EDGESPEC_* variables; flags win; `edgespec config` says which is which."""
import json
import os
import subprocess
import sys


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


def test_unknown_setting_is_reported(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("temprature = 0.3\n")
    r = run("config", env={"EDGESPEC_CONFIG": str(cfg)})
    assert r.returncode == 2 and "unknown settings" in r.stderr and "temprature" in r.stderr


def test_models_lists_presets_and_check_shows_both_models(tiny_pair):
    out = run("models").stdout
    for name in ("smollm2-135m", "qwen2.5-coder-1.5b", "qwen2.5-7b", "llama3.2-3b"):
        assert name in out
    r = run("check", *tiny_pair)
    assert r.returncode == 0 and "vocab size" in r.stdout and "ok: the draft can draft" in r.stdout
