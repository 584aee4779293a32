"""What this machine measured about a model, kept between processes: the verify curve T_v(m) (seconds for a target
decode of m rows), so a new process with a draft starts from it instead of timing the target again before its
first token.

One small versioned JSON file per (machine, llama.cpp build, model file, threads, GPU layers) in the user's cache
directory ($EDGESPEC_PROFILES, else $EDGESPEC_HOME/profiles, else ~/.cache/edgespec/profiles). A profile whose key
does not match exactly (another build or CPU flags, the model file replaced or touched, other threads) is never
read: it is a different measurement. The engine keeps timing every round, so a profile is a starting point that
the running averages move away from as soon as this run measures otherwise.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from pathlib import Path

VERSION = 1


def directory() -> Path:
    if os.environ.get("EDGESPEC_PROFILES"):
        return Path(os.environ["EDGESPEC_PROFILES"])
    from .default_model import home

    return home() / "profiles"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def key(model_path: str, n_threads: int, n_gpu_layers: int) -> dict:
    """Everything a timing depends on that can be named: the machine, the build, the file, the settings."""
    from .backend import system_info

    st = os.stat(model_path)
    return {"version": VERSION, "machine": platform.machine(), "cpu": _cpu(), "cores": os.cpu_count(),
            "build": system_info(),
            "model": os.path.realpath(model_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "threads": n_threads, "gpu_layers": n_gpu_layers}


def _path(k: dict) -> Path:
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:20]
    return directory() / f"{Path(k['model']).stem[:60]}-{digest}.json"


def load(k: dict) -> dict[int, float] | None:
    """The verify curve measured under exactly this key, or None (none, unreadable, or for another key)."""
    try:
        data = json.loads(_path(k).read_text(encoding="utf-8"))
        if data.get("key") != k:
            return None
        curve = {int(m): float(s) for m, s in data["verify_s"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return curve if len(curve) >= 2 and all(s > 0 for s in curve.values()) else None


def save(k: dict, verify_s: dict[int, float]) -> Path | None:
    """Write the curve atomically; None where the cache directory cannot be written (nothing else depends on it)."""
    path = _path(k)
    data = {"key": k, "verify_s": {str(m): s for m, s in sorted(verify_s.items())},
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:
        return None
    return path
