"""Defaults for the command line: flags win over EDGESPEC_* environment variables, which win over the settings
file (~/.config/edgespec/config.toml, or $EDGESPEC_CONFIG), which wins over the built-in defaults.

The file holds option names as keys, e.g.

    model = "qwen2.5-coder-1.5b"
    temperature = 0.2
    ctx_size = 8192
    stop = ["\\n\\n", "User:"]

Every key and value is checked when the file is read, as the same flag would be: a misspelled key or a bad value
is an error naming the file, never ignored.
"""
from __future__ import annotations

import difflib
import json
import math
import os
from pathlib import Path
from typing import Mapping

import click

from .errors import EdgespecError


class SettingsError(EdgespecError):
    """The settings file or an EDGESPEC_* variable is wrong (the command line's exit code 2)."""


def config_path() -> Path:
    if os.environ.get("EDGESPEC_CONFIG"):
        return Path(os.environ["EDGESPEC_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "edgespec" / "config.toml"


def env_name(option: str) -> str:
    return "EDGESPEC_" + option.upper()


def load_config(options: Mapping[str, click.Parameter] | None = None, path: Path | None = None) -> dict:
    """The settings file as {option name: value}; with `options`, every key must name one of them and every
    value is converted (and checked) by that option's type."""
    path = path or config_path()
    if path.is_dir() or (os.environ.get("EDGESPEC_CONFIG") and not path.exists()):
        what = "a directory" if path.is_dir() else "missing"
        raise SettingsError(f"the settings file {path} is {what}; point EDGESPEC_CONFIG at a TOML file, or unset it")
    if not path.exists():
        return {}
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        raise SettingsError(f"reading {path} needs Python 3.11 or newer (tomllib); use EDGESPEC_* variables") from None
    try:
        text = path.read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except OSError as e:
        raise SettingsError(f"cannot read settings file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SettingsError(f"cannot read settings file {path}: not UTF-8 text (byte {e.start}); save it as "
                            "UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"cannot read settings file {path}: {e}") from None
    data = {k.replace("-", "_"): v for k, v in data.items()}
    if options is None:
        return data
    unknown = sorted(set(data) - set(options))
    if unknown:
        hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k, list(options), 1)) else k
                 for k in unknown]
        raise SettingsError(f"unknown settings in {path}: {', '.join(hints)}; "
                            "`edgespec generate --help` lists the options")
    ctx = click.Context(click.Command("settings"))
    for key, value in data.items():
        option = options[key]
        try:
            _check_shape(option, value)
            data[key] = option.type_cast_value(ctx, value)
        except click.BadParameter as e:
            raise SettingsError(f"{path}: {key} = {json.dumps(value, default=str)}: {e.message}") from None
    return data


def _check_shape(option: click.Parameter, value: object) -> None:
    """What TOML may hold for an option: true/false for a flag, a text or a list of texts for a repeatable one,
    one text or number otherwise."""
    if getattr(option, "is_flag", False):
        if not isinstance(value, bool):
            raise click.BadParameter("expected true or false")
    elif option.multiple:
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise click.BadParameter("expected a text or a list of texts")
    elif isinstance(value, (bool, list, dict)) or not isinstance(value, (str, int, float)):
        raise click.BadParameter(f"expected one {option.type.name} value")
    elif isinstance(value, float) and not math.isfinite(value):  # TOML's inf and nan: no option takes them
        raise click.BadParameter("expected a finite number")


def split_list(value: str) -> list[str]:
    """An EDGESPEC_* variable for a repeatable option (EDGESPEC_STOP): one value as it is, spaces and all, or
    several as a JSON list: EDGESPEC_STOP='["\\n\\n", "User:"]'."""
    if value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            items = None
        if isinstance(items, list) and all(isinstance(i, str) for i in items):
            return items
        raise click.BadParameter(f"{value!r} is not a JSON list of strings")
    return [value] if value else []
