"""Defaults for the command line: flags win over EDGESPEC_* environment variables, which win over the settings
file (~/.config/edgespec/config.toml, or $EDGESPEC_CONFIG), which wins over the built-in defaults.

The file holds option names as keys, e.g.

    model = "qwen2.5-coder-1.5b"
    temperature = 0.2
    ctx_size = 8192
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import EdgespecError


def config_path() -> Path:
    if os.environ.get("EDGESPEC_CONFIG"):
        return Path(os.environ["EDGESPEC_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "edgespec" / "config.toml"


def env_name(option: str) -> str:
    return "EDGESPEC_" + option.upper()


def load_config(path: Path | None = None) -> dict:
    path = path or config_path()
    if not path.is_file():
        return {}
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise EdgespecError(f"reading {path} needs Python 3.11 or newer (tomllib); use EDGESPEC_* variables") from None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise EdgespecError(f"cannot read settings file {path}: {e}") from None
    return {k.replace("-", "_"): v for k, v in data.items()}
