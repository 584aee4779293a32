"""Downloads from the Hugging Face hub with huggingface-hub: its cache, its progress bar, its resume on a dropped
connection, its offline mode (HF_HUB_OFFLINE=1). A checksum, where the preset has one, is checked after download."""
from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from . import default_model
from .default_model import sha256_of
from .errors import EdgespecError
from .presets import ModelRef


def cached(ref: ModelRef) -> Path | None:
    """Where the file already is: huggingface-hub's cache, or (the default model) edgespec's own."""
    from huggingface_hub import try_to_load_from_cache

    if _is_default(ref):
        local = default_model.cache_dir() / default_model.FILE
        if local.is_file():
            return local
    found = try_to_load_from_cache(ref.repo, ref.file)
    return Path(found) if isinstance(found, str) else None


def cached_or_download(ref: ModelRef, verify: bool = True) -> Path:
    if _is_default(ref):
        return default_model.path()  # from the package index: no hub needed
    return cached(ref) or download(ref, verify=verify)


def _is_default(ref: ModelRef) -> bool:
    return ref.sha256 == default_model.SHA256


def download(ref: ModelRef, *, endpoint: str | None = None, verify: bool = True) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors

    why = _unreachable(endpoint)
    if why:
        raise EdgespecError(f"{ref.repo}:{ref.file} is not in the local cache and the hub cannot be reached: {why} "
                            "(no network? HF_ENDPOINT names a mirror; or download the file elsewhere and pass its "
                            "path)")
    try:
        path = Path(hf_hub_download(ref.repo, ref.file, endpoint=endpoint))
    except errors.LocalEntryNotFoundError:
        raise EdgespecError(f"{ref.repo}:{ref.file} is not in the local cache and the hub cannot be reached "
                            "(or HF_HUB_OFFLINE is set)") from None
    except errors.RepositoryNotFoundError:
        raise EdgespecError(f"no repository {ref.repo} on the hub (or it is private: `hf auth login`)") from None
    except (errors.EntryNotFoundError, errors.RemoteEntryNotFoundError):
        raise EdgespecError(f"{ref.repo} has no file {ref.file}") from None
    except errors.GatedRepoError:
        raise EdgespecError(f"{ref.repo} is gated: accept its licence on the hub, then `hf auth login`") from None
    except (errors.HfHubHTTPError, OSError) as e:
        raise EdgespecError(f"could not download {ref.repo}:{ref.file}: {e}") from None
    if verify and ref.sha256:
        got = sha256_of(path)
        if got != ref.sha256:
            raise EdgespecError(f"checksum mismatch for {ref.repo}:{ref.file}: got {got}, expected {ref.sha256}; "
                                f"delete {path} and pull again")
    return path


def _unreachable(endpoint: str | None) -> str | None:
    """Why the hub cannot be reached at all, found at once: its host name does not resolve (no network, no DNS),
    where huggingface-hub would retry for some 25 s, printing each retry, before saying so. Not judged offline
    (the cache alone answers) or behind a proxy (which resolves names itself)."""
    from huggingface_hub import constants

    url = urlparse(endpoint or constants.ENDPOINT)
    proxies = urllib.request.getproxies()
    if constants.HF_HUB_OFFLINE or not url.hostname or proxies.get(url.scheme) or proxies.get("all"):
        return None
    try:
        socket.getaddrinfo(url.hostname, url.port or (443 if url.scheme == "https" else 80))
    except socket.gaierror as e:
        return f"{url.hostname} does not resolve ({e.strerror})"
    return None


def resolve(spec: str):
    """--model / --draft: a file path, a preset name, or REPO:FILE (downloaded on first use).
    Returns (path, preset or None)."""
    from .presets import find, parse_repo_file

    path = Path(spec).expanduser()
    if path.exists():
        return path, None
    preset = find(spec)
    if preset is not None:
        return cached_or_download(preset.target), preset
    ref = parse_repo_file(spec)
    if ref is not None:
        return cached_or_download(ref, verify=False), None
    raise EdgespecError(f"model file not found: {spec} (not a file, a preset from `edgespec models`, or REPO:FILE)")
