"""Soak: many generations in one process, mixed as a long-running user or server mixes them (proposers, lengths,
greedy and seeded sampling, chat and raw prompts, stop strings, streams broken off early, refused requests), and
what it leaves behind: resident memory after warm-up, open file descriptors, and whether a repeated seeded request
still gives the same output at the end as at the start.

    python bench/soak.py                      # SmolLM2-135M (the default model) with a Q4_0 draft made from it
    python bench/soak.py -n 3000 --json       # longer; one JSON object on stdout

tests/test_soak.py runs the same loop (1,000 generations) on the tiny test models.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROMPTS = ["Once upon a time", "def fib(n):", "The capital of France is", "1, 2, 3, 4,", "Summarise: the cat sat.",
           "SELECT name FROM users WHERE", "the cat the cat the cat", "<|im_start|>user\nhi<|im_end|>", "Zürich ☃ 日本",
           "Write a haiku about caches."]
REPEATED = ("Once upon a time", 0.8, 1234)  # the seeded request run at the start and at the end


@dataclass
class Report:
    generations: int
    tokens: int
    refused: int  # bad requests answered with EdgespecError, as they should be
    broken_off: int  # streams the caller stopped reading early
    seconds: float
    rss_after_warmup_mb: float
    rss_end_mb: float
    rss_growth: float  # (end - after warm-up) / after warm-up
    fds_start: int
    fds_end: int
    repeated_same: bool

    def line(self) -> str:
        return (f"{self.generations} generations, {self.tokens} tokens in {self.seconds:.0f} s "
                f"({self.refused} refused, {self.broken_off} broken off); resident memory {self.rss_after_warmup_mb:.1f} "
                f"MB after warm-up -> {self.rss_end_mb:.1f} MB at the end ({100 * self.rss_growth:+.2f}%); open files "
                f"{self.fds_start} -> {self.fds_end}; repeated seeded request identical: {self.repeated_same}")


def rss_mb() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource  # elsewhere: the peak, which can only over-state growth

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


def open_fds() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return len(os.listdir(folder))
    return -1


def soak(engines: dict, n: int, warm_up: int = 100, seed: int = 0, max_tokens: int = 40,
         progress=None) -> Report:
    """n mixed generations over the given engines ({name: Engine}); the first `warm_up` fill caches and pools."""
    import edgespec
    from edgespec import EdgespecError, SamplingConfig

    rng = random.Random(seed)
    names = sorted(engines)
    first = engines[names[0]]

    def repeated():
        prompt, temperature, s = REPEATED
        return first.generate(prompt, max_tokens=max_tokens, sampling=SamplingConfig(temperature=temperature, seed=s),
                              adaptive=False, draft_max=4).tokens

    at_start = repeated()
    fds_start = open_fds()
    tokens = refused = broken = 0
    base = rss_mb()
    t0 = time.perf_counter()
    for i in range(n):
        if i == warm_up:
            base = rss_mb()
        engine = engines[rng.choice(names)]
        prompt = rng.choice(PROMPTS) + " " * rng.randint(0, 1) + str(rng.randint(0, 99))
        kind = rng.random()
        try:
            if kind < 0.04:  # a refused request: the engine must say so and carry on
                engine.generate([10 ** 7], max_tokens=3)
            elif kind < 0.08:
                engine.generate(prompt, sampling=SamplingConfig(temperature=float("nan")))
        except EdgespecError:
            refused += 1
            continue
        sampling = (SamplingConfig(temperature=0.0) if rng.random() < 0.5 else
                    SamplingConfig(temperature=rng.choice([0.5, 0.8, 1.2]), top_k=rng.choice([0, 20, 40]),
                                   seed=rng.randint(0, 10 ** 6)))
        kwargs = dict(max_tokens=rng.randint(0, max_tokens), sampling=sampling,
                      stop=[rng.choice(["\n\n", ".", "the"])] if rng.random() < 0.2 else (),
                      speculative=rng.random() > 0.15)
        if rng.random() < 0.5:
            kwargs.update(adaptive=rng.random() < 0.5, draft_max=rng.randint(1, 8))
        tokens_in = engine.tokenize(prompt, chat_format=rng.random() < 0.3)
        stop_after = rng.randint(0, 10) if rng.random() < 0.2 else None
        stream = engine.stream(tokens_in, **kwargs)
        for j, r in enumerate(stream):
            tokens += r.token is not None
            if stop_after is not None and j >= stop_after:
                stream.close()
                broken += 1
                break
        if progress:
            progress(i + 1, n)
    seconds = time.perf_counter() - t0
    at_end = repeated()
    end = rss_mb()
    del edgespec
    return Report(n, tokens, refused, broken, seconds, base, end, (end - base) / base, fds_start, open_fds(),
                  at_start == at_end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="generations (default 2000)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()

    import edgespec
    from edgespec import backend, default_model

    target = default_model.path()
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "draft-q4_0.gguf"
        backend.quantize(target, draft, "Q4_0")
        engines = {"draft": edgespec.Engine.load(target, draft=draft, n_ctx=1024),
                   "lookup": edgespec.Engine.load(target, lookup=True, n_ctx=1024),
                   "hybrid": edgespec.Engine.load(target, draft=draft, lookup=True, n_ctx=1024)}

        def progress(i, n):
            if i % 50 == 0 or i == n:
                print(f"\rsoak: {i}/{n} generations, {rss_mb():.1f} MB resident", end="", file=sys.stderr,
                      flush=True)

        report = soak(engines, args.n, warm_up=max(50, args.n // 10), max_tokens=args.max_tokens, progress=progress)
        print(file=sys.stderr)
        for e in engines.values():
            e.close()
    print(json.dumps(asdict(report)) if args.json else "soak (SmolLM2-135M): " + report.line())


if __name__ == "__main__":
    main()
