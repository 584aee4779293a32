"""edgespec installed as a wheel (not editable) into a fresh virtual environment works as the editable install
does: the presets ship inside the package, and the CLI runs from the wheel, not from this checkout."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy, so the build leaves nothing in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("edgespec", "models"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist,
                    src], check=True, capture_output=True)
    wheel = next(dist.glob("edgespec-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel],
                   check=True, capture_output=True)
    # The dependencies (llama-cpp-python takes minutes to build) come from this environment, behind the fresh
    # one's own site-packages; this environment's editable edgespec is not on that path.
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv


def run(venv, *args, env=None):
    return subprocess.run([venv / "bin" / "edgespec", *map(str, args)], capture_output=True, text=True, timeout=120,
                          cwd=venv, env={**os.environ, "EDGESPEC_CONFIG": "", **(env or {})})


def test_the_wheel_carries_the_presets(wheel_venv):
    wheel, venv = wheel_venv
    names = zipfile.ZipFile(wheel).namelist()
    assert "edgespec/models/presets.json" in names and "edgespec/workloads.json" in names
    page = {"edgespec/web/index.html", "edgespec/web/chat.js", "edgespec/web/markdown.js"}  # (serve's chat page)
    assert page <= set(names)
    where = subprocess.run([venv / "bin" / "python", "-c", "import edgespec; print(edgespec.__file__)"],
                           capture_output=True, text=True, cwd=venv).stdout
    assert where.startswith(str(venv)), where  # the installed copy, not this checkout


def test_the_cli_from_the_wheel(wheel_venv, tiny_pair):
    _, venv = wheel_venv
    r = run(venv, "models")
    assert r.returncode == 0 and "qwen2.5-coder-1.5b" in r.stdout, r.stderr
    r = run(venv, "generate", "-m", tiny_pair[0], "-d", tiny_pair[1], "-p", "Hello", "-n", "5", "--json")
    assert r.returncode == 0 and '"finish_reason": "length"' in r.stdout, r.stderr
    r = run(venv, "bench", "-m", tiny_pair[0], "--category", "chat", "--limit", "1", "-n", "4")
    assert r.returncode == 0 and "lookup" in r.stdout, r.stderr  # the built-in workload ships with the wheel
    r = run(venv, "generate", "-m", "nobody/none-GGUF:none.gguf", "-p", "hi", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 1 and "not in the local cache" in r.stderr and "presets" not in r.stderr, r.stderr


@pytest.mark.realmodel
def test_the_default_models_preset_works_offline_from_the_wheel(wheel_venv):
    """`-m smollm2-135m` names the file `edgespec models` shows on disk: no hub needed."""
    from edgespec import default_model

    default_model.path()
    _, venv = wheel_venv
    listed = run(venv, "models", env={"HF_HUB_OFFLINE": "1"}).stdout
    assert f"on disk: {default_model.cache_dir() / default_model.FILE}" in listed
    r = run(venv, "generate", "-m", "smollm2-135m", "-p", "Hi", "-n", "3", "-t", "0", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
