"""Model pairs as data (models/presets.json) and what `--model` may name: a path, a preset, or REPO:FILE."""
from __future__ import annotations

import json
from importlib import resources
from dataclasses import dataclass
from pathlib import Path

from .errors import EdgespecError

# models/presets.json in the source tree; pyproject.toml installs it inside the package as edgespec/models/, so a
# wheel carries it (importlib.resources finds it in either place).
PRESETS_FILE = resources.files("edgespec.models").joinpath("presets.json")


@dataclass(frozen=True)
class ModelRef:
    repo: str
    file: str
    sha256: str | None = None
    size_mb: int | None = None


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    license: str
    target: ModelRef
    draft: ModelRef | None
    lookup: bool
    verified: str


def _ref(d: dict | None) -> ModelRef | None:
    if d is None:
        return None
    return ModelRef(d["repo"], d["file"], d.get("sha256"), d.get("size_mb"))


def load_presets(path=PRESETS_FILE) -> list[Preset]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise EdgespecError(f"presets file not found: {path} (a broken install: reinstall edgespec)") from None
    return [Preset(p["name"], p["description"], p["license"], _ref(p["target"]), _ref(p.get("draft")),
                   bool(p.get("lookup")), p.get("verified", "")) for p in data["presets"]]


def find(name: str) -> Preset | None:
    return next((p for p in load_presets() if p.name == name), None)


def parse_repo_file(spec: str) -> ModelRef | None:
    """'owner/repo:file.gguf' -> ModelRef; anything else -> None."""
    repo, sep, file = spec.partition(":")
    if sep and repo.count("/") == 1 and file.endswith(".gguf") and not Path(spec).exists():
        return ModelRef(repo, file)
    return None
