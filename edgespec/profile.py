"""What this machine measured about a model, kept between processes: the verify curve T_v(m) (seconds for a target
decode of m rows; over a link also the way back, what a one-row decode right after one of m rows costs more), so a
new process with a draft starts from it instead of timing the target again before its first token; and, where
`edgespec tune` measured them, each draft model's step costs and acceptance by position with this target, and
prompt lookup's acceptance by match length (an engine adds what it learned when it closes), so a new process's
first prompt starts from what was learned before.

One small versioned JSON file per (machine, llama.cpp build, model file, threads, GPU layers) in the user's cache
directory ($EDGESPEC_PROFILES, else $EDGESPEC_HOME/profiles, else ~/.cache/edgespec/profiles). A profile whose key
does not match exactly (another build or CPU flags, the model file replaced or touched, other threads) is never
read: it is a different measurement. The engine keeps timing every round, so a profile is a starting point that
the running averages move away from as soon as this run measures otherwise.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

VERSION = 2  # 2: a draft model's acceptance counts from tune are conditional (position i tested: all before passed)


def directory() -> Path:
    if os.environ.get("EDGESPEC_PROFILES"):
        return Path(os.environ["EDGESPEC_PROFILES"])
    from .default_model import home

    return home() / "profiles"


def cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may run on: a taskset's or a container's share (its CPU set, and its quota, as
    `docker --cpus 2` sets it), where os.cpu_count() is the host's."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not on macOS or Windows)
        n = os.cpu_count() or 1
    try:
        with open(cpu_max, encoding="utf-8") as f:
            quota, period = f.read().split()[:2]  # cgroup v2: "max 100000", or "200000 100000" for 2 CPUs
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def key(model_path: str, n_threads: int, n_gpu_layers: int, rpc: Sequence[str] = (),
        tensor_split: Sequence[float] = (), output_here: bool = False, kv_cache: Sequence[str] = ("f16", "f16")
        ) -> dict:
    """Everything a timing depends on that can be named: the machine, the build, the file, the settings, and the
    rpc-servers a model is split over, in what proportions and whether its output layer stays here (a network in
    the decode: another curve)."""
    from .backend import system_info

    st = os.stat(model_path)
    out = {"version": VERSION, "machine": platform.machine(), "cpu": cpu(), "cores": os.cpu_count(),
           "build": system_info(),
           "model": os.path.realpath(model_path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
           "threads": n_threads, "gpu_layers": n_gpu_layers}
    if rpc:
        out["rpc"] = list(rpc)
    if tensor_split:
        out["tensor_split"] = [float(x) for x in tensor_split]
    if rpc and output_here:
        out["output_here"] = True
    if tuple(kv_cache) != ("f16", "f16"):  # (another cache: another curve; f16's keys stay as they were)
        out["kv_cache"] = list(kv_cache)
    return out


def key_of(model, n_threads: int) -> dict:
    """key() of a loaded backend.Model, wherever its layers are."""
    return key(model.path, n_threads, model.n_gpu_layers, model.rpc, model.tensor_split,
               model.output_here, model.kv_cache)


def path_of(k: dict) -> Path:
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:20]
    return directory() / f"{Path(k['model']).stem[:60]}-{digest}.json"


@dataclass
class Profile:
    verify_s: dict[int, float]  # m rows -> seconds of one target decode
    # per proposer (proposer_name(), lookup_name()): {"draft_round_s": {n: seconds}, "reached": [...],
    # "accepted": [...], "by_key": {kind: {"reached": [...], "accepted": [...]}}}; a draft model's may also hold
    # "step_s" (one draft step), "read_s" (a prompt's reading, per token), "answer_tokens" (the answers' mean
    # length, which a prompt's reading is weighed over) and "calibration" ({"tested": [...], "passed": [...]} by
    # confidence bin)
    proposers: dict[str, dict] = field(default_factory=dict)
    measured: str = ""
    back_s: dict[int, float] = field(default_factory=dict)  # m rows -> the next one-row decode's extra (over a link)


def lookup_name(n_min: int, n_max: int) -> str:
    """Prompt lookup's entry in a target's profile (its acceptance depends on the target and its n-gram sizes)."""
    return f"lookup {n_min}-{n_max}"


def proposer_name(draft_key: dict) -> str:
    """A draft model's entry in its target's profile: its own key (key_of the draft), hashed; its rpc-servers are
    in it, since a draft step over the network is another cost."""
    digest = hashlib.sha256(json.dumps(draft_key, sort_keys=True).encode())
    return f"draft {Path(draft_key['model']).name} {digest.hexdigest()[:16]}"


def load(k: dict, notes: list[str] | None = None) -> Profile | None:
    """What was measured under exactly this key, or None (none, unreadable, or for another key: a file that exists
    but is ignored adds a one-line note to `notes`)."""
    path = path_of(k)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        data = json.loads(text)
        if data.get("key") != k:
            why = "measured under another key (machine, build, file or settings)"
        else:
            curve = {int(m): float(s) for m, s in data["verify_s"].items()}
            back = {int(m): float(s) for m, s in (data.get("back_s") or {}).items()}
            proposers = {str(n): _proposer(e) for n, e in (data.get("proposers") or {}).items()}
            if len(curve) >= 2 and all(0 < s < math.inf for s in curve.values()) and \
                    all(abs(s) < max(curve.values()) for s in back.values()):  # (NaN fails them too)
                return Profile(curve, proposers, str(data.get("measured", "")), back)
            why = "its timings are impossible"
    except (ValueError, KeyError, TypeError, AttributeError):
        why = "it is not a profile this version can read"
    if notes is not None:
        notes.append(f"ignored the profile {path} ({why}); it is rewritten when this machine is measured again")
    return None


def _counts(entry: dict) -> dict:
    out = {"reached": [float(x) for x in entry.get("reached", [])],
           "accepted": [float(x) for x in entry.get("accepted", [])]}
    if len(out["reached"]) != len(out["accepted"]) or any(not 0 <= a <= r < math.inf for a, r in
                                                           zip(out["accepted"], out["reached"])):
        raise ValueError("inconsistent acceptance counts")
    return out


def _proposer(entry: dict) -> dict:
    out = {"draft_round_s": {int(n): float(s) for n, s in entry.get("draft_round_s", {}).items()},
           **_counts(entry), "by_key": {str(k): _counts(c) for k, c in (entry.get("by_key") or {}).items()}}
    if any(not 0 < s < math.inf for s in out["draft_round_s"].values()):  # (NaN fails it too)
        raise ValueError("impossible draft costs")
    for f in ("step_s", "read_s", "answer_tokens"):  # (a draft step; a prompt's reading per token; Reading)
        if f in entry:
            out[f] = float(entry[f])
            if not 0 < out[f] < math.inf:
                raise ValueError(f"impossible {f}: {entry[f]!r}")
    if "calibration" in entry:
        cal = {f: [float(x) for x in entry["calibration"][f]] for f in ("tested", "passed")}
        if len(cal["tested"]) != len(cal["passed"]) or any(not 0 <= p <= t < math.inf for p, t in
                                                           zip(cal["passed"], cal["tested"])):
            raise ValueError("inconsistent calibration counts")
        out["calibration"] = cal
    return out


def merge(old: dict | None, new: dict, keep: float = 0.5) -> dict:
    """A proposer entry updated by a later run: its draft costs where it measured them, and its acceptance counts
    (by position, and by kind of proposal) added to the earlier ones weighed by `keep`, so old evidence fades and
    the file's counts stay bounded."""
    if old is None:
        return new

    def counts(a: dict, b: dict) -> dict:
        n = max(len(a["reached"]), len(b["reached"]))
        pad = [0.0] * n
        return {f: [keep * x + y for x, y in zip((a[f] + pad)[:n], (b[f] + pad)[:n])] for f in ("reached", "accepted")}

    empty = {"reached": [], "accepted": []}
    old_keys, new_keys = old.get("by_key", {}), new.get("by_key", {})
    out = {"draft_round_s": {**old["draft_round_s"], **new["draft_round_s"]}, **counts(old, new),
           "by_key": {k: counts(old_keys.get(k, empty), new_keys.get(k, empty)) for k in {**old_keys, **new_keys}}}
    for f in ("step_s", "read_s", "answer_tokens"):
        if new.get(f, old.get(f)) is not None:
            out[f] = new.get(f, old.get(f))
    a, b = old.get("calibration"), new.get("calibration")
    if a is not None and b is not None and len(a["tested"]) == len(b["tested"]):
        out["calibration"] = {f: [keep * x + y for x, y in zip(a[f], b[f])] for f in ("tested", "passed")}
    elif a is not None or b is not None:
        out["calibration"] = b if b is not None else a
    return out


def save(k: dict, verify_s: dict[int, float], proposers: dict[str, dict] | None = None,
         back_s: dict[int, float] | None = None) -> Path | None:
    """Write the profile atomically; None where the cache directory cannot be written (nothing else depends on it)."""
    path = path_of(k)
    data = {"key": k, "verify_s": {str(m): s for m, s in sorted(verify_s.items())},
            **({"back_s": {str(m): s for m, s in sorted(back_s.items())}} if back_s else {}),
            "proposers": {n: {"draft_round_s": {str(m): s for m, s in sorted(e["draft_round_s"].items())},
                              "reached": e["reached"], "accepted": e["accepted"], "by_key": e.get("by_key", {}),
                              **{f: e[f] for f in ("step_s", "read_s", "answer_tokens", "calibration") if f in e}}
                          for n, e in (proposers or {}).items()},
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
