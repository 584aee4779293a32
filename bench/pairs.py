"""The benchmark pair and prompts the scripts here share: --config memory (the F16 target, written on first use) or
compute (the Q4_K_M target), both with the 0.5B Q4_K_M draft, from ../shared/models/fetch-bench-models.sh."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from edgespec import backend, workloads

TARGET_Q4 = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
TARGET_F16 = "qwen2.5-coder-1.5b-instruct-f16.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def models_for(config: str, folder: Path) -> tuple[Path, Path]:
    if not (folder / TARGET_Q4).exists() or not (folder / DRAFT).exists():
        sys.exit(f"models missing in {folder}: run ../shared/models/fetch-bench-models.sh {folder}")
    if config == "compute":
        return folder / TARGET_Q4, folder / DRAFT
    f16 = folder / TARGET_F16
    if not f16.exists():
        print(f"writing {f16} (F16 copy of the Q4_K_M target) ...", file=sys.stderr)
        backend.quantize(folder / TARGET_Q4, f16.with_suffix(".part"), "F16")
        os.replace(f16.with_suffix(".part"), f16)
    return f16, folder / DRAFT


def add_model_args(ap: argparse.ArgumentParser) -> None:
    """The options that pick the pair: --config (memory: F16 target; compute: Q4_K_M), or --target/--draft."""
    ap.add_argument("--config", choices=["memory", "compute"], default="memory")
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--models", default=os.environ.get("EDGESPEC_BENCH_MODELS")
                    or str(Path.home() / ".cache" / "edgespec-bench"))
    ap.add_argument("--threads", type=int, default=2)


def add_prompt_args(ap: argparse.ArgumentParser) -> None:
    """The options that pick built-in prompts, as `edgespec bench` names them."""
    ap.add_argument("--category", action="append")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--max-tokens", "-n", type=int, default=64)


def pair_of(args) -> tuple[Path, Path]:
    return (Path(args.target), Path(args.draft)) if args.target else models_for(args.config, Path(args.models))


def load_work(limit: int | None = None) -> list[dict]:
    """The workload set; with limit, the first `limit` prompts of each category, categories interleaved."""
    # the built-in workload of `edgespec bench`; these scripts send single prompts, so the multi-turn chats stay out
    work = [w for w in json.loads(workloads.WORKLOADS.read_text()) if "prompt" in w]
    if not limit:
        return work
    by_cat = defaultdict(list)
    for w in work:
        by_cat[w["category"]].append(w)
    return [ws[i] for i in range(limit) for ws in by_cat.values() if i < len(ws)]


def bench(args, modes: list[str], extra: list[str] = ()) -> None:
    """Run `edgespec bench` on the chosen pair with these modes (in this process, so its record names the command
    as typed: argv is rewritten to the equivalent `edgespec bench` line first)."""
    from edgespec.cli import main

    target, draft = pair_of(args)
    argv = ["bench", "-m", str(target), "-d", str(draft), "--threads", str(args.threads), "--modes", ",".join(modes),
            *extra]
    for flag in ("limit", "json", "max_tokens", "draft_max"):
        value = getattr(args, flag, None)
        if value is not None:
            argv += [f"--{flag.replace('_', '-')}", str(value)]
    print("running: edgespec " + " ".join(argv), file=sys.stderr)
    sys.argv = ["edgespec", *argv]
    main(argv)
