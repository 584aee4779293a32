"""A soak on the tiny models: 1,000 mixed generations in one process (bench/soak.py has the loop, and runs longer
on SmolLM2): resident memory grows under 5% after warm-up, no file descriptor leaks, and a repeated seeded request
gives the same tokens at the end as at the start."""
import sys
from pathlib import Path

import edgespec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from soak import soak  # noqa: E402


def test_a_thousand_generations_leave_nothing_behind(tiny_pair):
    t, d = tiny_pair
    engines = {"draft": edgespec.Engine.load(t, draft=d, n_ctx=512, n_threads=2),
               "lookup": edgespec.Engine.load(t, lookup=True, n_ctx=512, n_threads=2),
               "hybrid": edgespec.Engine.load(t, draft=d, lookup=True, n_ctx=512, n_threads=2)}
    try:
        report = soak(engines, 1000, warm_up=150)
    finally:
        for e in engines.values():
            e.close()
    print(report.line())
    assert report.repeated_same
    assert report.rss_growth < 0.05, report.line()
    assert report.fds_end <= report.fds_start, report.line()
    assert report.refused > 20 and report.broken_off > 20 and report.tokens > 5000
