"""The replay (edgespec/replay.py): recorded texts and costs standing in for the models and the machine. What it must
get right: the engine over it emits the recorded text in every mode, proposes and accepts exactly what the real
models would, charges each decode what the curve says and nothing else, is repeatable, and leaves nothing behind
(the clock, the user's profiles)."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from edgespec import autotune, benchmark, workloads
from edgespec.backend import Context, Model
from edgespec.engine import Engine
from edgespec.errors import InvalidArgument
from edgespec.proposers import DraftModelProposer
from edgespec.recording import record
from edgespec.replay import Clock, Curve, Recording, virtual_time

N = 24
# The tiny pair's decode costs as timed once (2026-12-06, on 2 cores; target T(1) 0.21 ms, draft 0.20 ms). The
# recording's texts are the models' own, its costs these: with the suite's own timings the draft model's speedup in
# the floor's test below ranged over 1.47-1.89x, and a verdict with it (CI failed at 0.965x where 0.97 is asked).
FIXED_COSTS = Path(__file__).parent / "tiny_pair_costs.json"


@pytest.fixture(scope="module")
def recording(tiny_pair, tmp_path_factory):
    items = workloads.select(workloads.builtin(), limit=1)  # one per category: what tune measures on
    data = record(str(tiny_pair[0]), str(tiny_pair[1]), items, N, n_threads=2, repeats=2)
    fixed = json.loads(FIXED_COSTS.read_text())
    timed = json.loads(json.dumps(data["costs"]))
    assert {m: {kind: set(t) for kind, t in d.items()} for m, d in timed.items()} == \
        {m: {kind: set(t) for kind, t in d.items()} for m, d in fixed.items()}  # (what is timed, as the file has it)
    data["costs"] = fixed
    path = tmp_path_factory.mktemp("replay") / "tiny.json"
    path.write_text(json.dumps(data))
    return Recording.load(path)


def _replay(rec, mode, noise=0.0, tick=1e-6, **engine_kwargs):
    clock = Clock(noise, seed=1, tick=tick)
    target, draft = rec.curves()
    with virtual_time(clock):
        engine = rec.engine(clock, target, draft, **engine_kwargs)
        strategies = benchmark.Strategies(engine)
        out = [strategies.generate(mode, it.tokens(engine), N)[0] for it in rec.items()]
        engine.close(remember=False)
    return out


def test_every_mode_emits_the_recorded_text(recording):
    texts = [t["tokens"][t["n_prompt"]:] for t in recording.data["texts"]]
    for mode in ("plain", "draft:3", "draft", "lookup", "hybrid"):
        for result, text in zip(_replay(recording, mode), texts):
            ended = bool(text) and text[-1] in recording.data["vocab"]["eog"]
            assert result.tokens == (text[:-1] if ended else text), mode


def test_it_drafts_and_accepts_what_the_real_models_do(tiny_pair, recording):
    """A fixed K on the real tiny pair and on the replay: the same tokens drafted and accepted, round by round."""
    target, draft = Model(tiny_pair[0]), Model(tiny_pair[1])
    engine = Engine(Context(target, 2048, 2), DraftModelProposer(Context(draft, 2048, 2), target.n_vocab), 4)
    real = [engine.generate(it.tokens(engine), max_tokens=N, draft_max=4, adaptive=False)
            for it in recording.items()]
    engine.close(remember=False)
    replayed = _replay(recording, "draft:4")
    rounds = lambda r: [(x.n_drafted, x.n_accepted) for x in r.stats.rounds]  # noqa: E731
    assert [rounds(r) for r in replayed] == [rounds(r) for r in real]
    assert sum(x.n_accepted for r in real for x in r.stats.rounds) > 0


def test_each_decode_costs_what_the_curve_says(recording):
    target, draft = recording.curves()
    for r in _replay(recording, "plain", tick=0.0):  # (no clock ticks: decodes alone)
        assert r.stats.rounds[0].seconds == 0.0  # the first token's row came with the prompt's read
        assert all(x.seconds == pytest.approx(target(1, 1), rel=1e-9) for x in r.stats.rounds[1:])
    for r in _replay(recording, "draft:4", tick=0.0):
        for x in r.stats.rounds[1:]:  # a round of K drafts: a verify of K + 1 rows and the draft's decodes
            verify = target(x.n_drafted + 1, x.n_drafted + 1)
            assert x.seconds >= verify - 1e-12  # (times read off a clock: a float's rounding)
            assert x.seconds <= verify + draft(64, 1) + x.n_drafted * draft(1, 1) + 1e-9


def test_the_curve():
    c = Curve({1: 1.0, 2: 1.5, 4: 2.0, 64: 10.0}, {1: 1.0, 2: 2.0, 4: 3.0}, latency_s=0.5)
    assert c(1) == 1.5 and c(2, 2) == 2.5 and c(3, 1) == pytest.approx(1.75 + 0.5)
    assert c(4, 4) == 3.5 and c(4, 2) == pytest.approx(2.0 + 1.0 / 3 + 0.5)
    assert c(128) == pytest.approx(10.0 + 64 * 8 / 60 + 0.5)  # along the last two timed sizes
    flat = c.flattened(0.0)
    assert flat(5, 5) == flat(1) == 1.5 and flat(64) == 10.5


def test_a_decode_of_another_shape_costs_the_switch_and_the_engine_learns_the_way_back(recording):
    """Over an rpc-server a decode whose shape is not the last one's sends its graph again (--switch-ms): a plain step
    right after a verify pays it, and the engine keeps that apart from T_v(1), as the way back a verify costs."""
    target, draft = recording.curves(switch_ms=5.0)
    assert target.switch_s == 0.005 and draft.switch_s == 0.0
    clock = Clock(0.0, seed=1, tick=0.0)
    with virtual_time(clock):
        engine = recording.engine(clock, target, draft)
        strategies = benchmark.Strategies(engine)
        results = [strategies.generate("lookup", it.tokens(engine), N)[0] for it in recording.items()]
        plain, back = engine._cost.verify_s[1], engine.back_curve
        engine.close(remember=False)
    pairs = [(i, a, b) for r in results for i, (a, b) in enumerate(zip(r.stats.rounds, r.stats.rounds[1:]))]
    after = [(a.n_drafted, b.seconds) for i, a, b in pairs
             if not b.n_drafted and (i or a.n_drafted)]  # (a plain first round: the prompt's row, no decode)
    assert any(n for n, _ in after) and any(not n for n, _ in after)
    for n, seconds in after:
        assert seconds == pytest.approx(target(1, 1) + (0.005 if n else 0.0), rel=1e-9)
    assert plain == pytest.approx(target(1, 1), rel=1e-9)  # steps after steps only
    assert back and all(b == pytest.approx(0.005, rel=1e-6) for b in back.values())
    local, _ = recording.curves()
    with virtual_time(clock):  # on this machine no graph is sent: nothing to learn or price
        engine = recording.engine(clock, local, draft)
        benchmark.Strategies(engine).generate("lookup", recording.items()[0].tokens(engine), N)
        assert not engine.model.rpc and engine.back_curve == {}
        engine.close(remember=False)


def test_a_gpu_flattens_the_draft_too_where_asked(recording):
    # --verify-slope alone flattens the target's curve; --draft-slope the draft's (its reading of what it skipped)
    target, draft = recording.curves()
    flat_target, same_draft = recording.curves(verify_slope=0.03)
    assert same_draft(9) == draft(9) and flat_target(9, 9) == pytest.approx(target(1) * 1.24)
    _, flat_draft = recording.curves(verify_slope=0.03, draft_slope=0.03)
    assert flat_draft(9) == pytest.approx(min(draft(9), draft(1) * 1.24)) and flat_draft(1) == draft(1)


def test_a_confidence_floor_is_priced_where_it_refuses_first_tokens(recording):
    """--draft-p-min ends a round at a first token under it: a draft step for nothing, which the acceptance of the
    tokens drafted never shows. With a target 8x a draft step on a flat curve (drafting pays): a floor above nearly
    every confidence leaves the draft model at plain's speed (its warm-up and probes ended by the floor too), not
    below it, and so with a target only 4x a draft step; a floor of 0.5 keeps drafting where it pays."""
    def ms_per_token(mode, p_min, scale=8):
        clock = Clock(0.0, seed=1)
        target, draft = recording.curves(verify_slope=0.03, target_scale=scale)
        with virtual_time(clock):
            engine = recording.engine(clock, target, draft, draft_p_min=p_min)
            strategies = benchmark.Strategies(engine)
            results = [strategies.generate(mode, it.tokens(engine), N)[0] for it in recording.items()]
            engine.close(remember=False)
        assert [r.tokens for r in results] == texts  # (a floor changes what is drafted, never the text)
        reasons = {}
        for r in results:
            for reason, count in r.stats.rounds_by_reason.items():
                reasons[reason] = reasons.get(reason, 0) + count
        return sum(x.seconds for r in results for x in r.stats.rounds) / sum(len(r.tokens) for r in results), reasons

    texts = [r.tokens for r in _replay(recording, "plain")]
    plain, _ = ms_per_token("plain", 0.0)
    unfloored, _ = ms_per_token("draft", 0.0)
    high, reasons = ms_per_token("draft", 0.95)
    half, _ = ms_per_token("draft", 0.5)
    assert plain / unfloored > 1.3  # (1.80x under the fixed costs; 1.47-1.89x with the suite's own timings)
    # (before: 0.90x, 157 warm-up rounds for 13 texts, each a draft step for nothing; then 0.987x, 29 warm-ups, 22
    # of them in the first text, where every one was floored; now 0.991x and 3)
    assert plain / high >= 0.97 and reasons.get("warm-up", 0) <= 3
    assert reasons.get("fallback", 0) > reasons.get("probe", 0) + reasons.get("cost", 0)
    assert plain / half > 1.02  # (1.056x: the rate is learned at a cost on 24-token texts)
    slow_plain, _ = ms_per_token("plain", 0.0, scale=4)
    slow_high, _ = ms_per_token("draft", 0.95, scale=4)
    assert slow_plain / slow_high >= 0.97  # (0.979x; 0.962x before: the warm-ups' draft steps weigh 2x as much)


def test_a_replay_is_repeatable_and_noise_is_seeded(recording):
    def times(noise):
        return [x.seconds for r in _replay(recording, "hybrid", noise) for x in r.stats.rounds]

    assert times(0.0) == times(0.0)
    assert times(0.2) == times(0.2) != times(0.0)


def test_a_decode_costs_the_same_whatever_ran_before_it():
    """Common random numbers: a decode's noise follows from the seed and the decode, not from its place in one
    stream of draws, so two versions of the policies replayed with noise differ only where they decode differently;
    a decode repeated (a timing taken again) draws anew."""
    a, b = Clock(0.2, seed=3), Clock(0.2, seed=3)
    a.spend(1.0, ("target", 0, 5, 5, 11))
    b.spend(1.0, ("draft", 7, 1, 1, 12))
    b.spend(1.0, ("draft", 8, 1, 1, 13))
    same = ("target", 40, 1, 1, 99)
    assert a.spend(1.0, same) == b.spend(1.0, same)
    assert a.spend(1.0, same) != a.spend(1.0, same)  # the 2nd and 3rd time: new draws
    assert Clock(0.2, seed=4).spend(1.0, same) != Clock(0.2, seed=3).spend(1.0, same)
    draws = [Clock(0.2, seed=s).spend(1.0, same) for s in range(400)]
    assert abs(sum(draws) / len(draws) - 1.0) < 0.05  # the lognormal's mean is the cost


def test_hold_ups_come_at_a_rate_in_time_and_cost_the_same_in_every_version():
    """--hiccups R --hiccup-ms H: a decode is held up with the chance that a hold-up comes at R a second during it
    (a longer decode meets more), by an exponential delay of mean H; drawn, as the noise is, from the seed and the
    decode, so two versions of the policies meet the same hold-ups on the same decodes."""
    quiet = Clock(0.0, seed=5)
    assert quiet.spend(0.07, ("target", 0, 1, 1, 3)) == 0.07
    long_, short = ("target", 9, 5, 5, 1), ("draft", 9, 1, 1, 2)
    held = [Clock(0.0, seed=s, hiccups=2.0, hiccup_s=0.1) for s in range(2000)]
    extra_long = [c.spend(0.2, long_) - 0.2 for c in held]
    extra_short = [c.spend(0.02, short) - 0.02 for c in held]
    p_long, p_short = 1 - math.exp(-2.0 * 0.2), 1 - math.exp(-2.0 * 0.02)
    assert sum(x > 0 for x in extra_long) / 2000 == pytest.approx(p_long, abs=0.03)
    assert sum(x > 0 for x in extra_short) / 2000 == pytest.approx(p_short, abs=0.015)
    assert sum(extra_long) / sum(x > 0 for x in extra_long) == pytest.approx(0.1, rel=0.15)  # the mean hold-up
    assert Clock(0.1, seed=7, hiccups=2.0, hiccup_s=0.1).spend(0.2, long_) == \
        Clock(0.1, seed=7, hiccups=2.0, hiccup_s=0.1).spend(0.2, long_)
    # the lognormal's draws are those of a clock without hold-ups (noisy replays stay as they were)
    with_, without = Clock(0.2, seed=3, hiccups=0.001, hiccup_s=0.1), Clock(0.2, seed=3)
    assert [with_.spend(1e-6, long_) for _ in range(3)] == [without.spend(1e-6, long_) for _ in range(3)]


def test_it_leaves_the_clock_and_the_users_profiles_alone(recording, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_PROFILES", str(tmp_path))
    clock = Clock()
    target, draft = recording.curves()
    real = time.perf_counter
    with virtual_time(clock):
        assert time.perf_counter() == clock.tick
        engine = recording.engine(clock, target, draft)
        tuned = autotune.tune(engine, 5.0, 16, True, None)  # edgespec tune over the replay writes a profile ...
        engine.close(remember=False)
        assert tuned.path is not None and tuned.path.exists() and str(tmp_path) not in str(tuned.path)
        assert clock.now() > 0
    assert time.perf_counter is real and os.environ["EDGESPEC_PROFILES"] == str(tmp_path)
    assert list(tmp_path.iterdir()) == []  # ... in the replay's own folder, gone with it


def test_what_is_not_a_recording_is_refused(tmp_path, recording):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InvalidArgument, match="not an edgespec replay recording"):
        Recording.load(bad)
    with pytest.raises(InvalidArgument, match="cannot read"):
        Recording.load(tmp_path / "missing.json")
    clock = Clock()
    with virtual_time(clock):
        engine = recording.engine(clock, *recording.curves())
        with pytest.raises(InvalidArgument, match="not in the recording"):
            engine.tokenize("a prompt nobody recorded", chat_format=True)
        engine.close(remember=False)


def test_trace_fresh_starts_every_text_anew(recording):
    """bench/replay.py trace --fresh: each prompt a new process's first (the draft model's warm-up at every text),
    where without it only the first text warms up."""
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "bench" / "replay.py"
    warm = {}
    for fresh in ([], ["--fresh"]):
        out = subprocess.run([sys.executable, str(script), "trace", str(recording.path), "--modes", "draft",
                              "-n", str(N), *fresh], capture_output=True, text=True, check=True).stdout
        rounds = [line for line in out.splitlines() if line.startswith("   first ")]
        warm[bool(fresh)] = [" warm-up " in line for line in rounds]
    assert warm[True] and all(warm[True]), warm
    assert warm[False][0] and not any(warm[False][1:]), warm


def test_blocks_replay_a_session_of_one_kind_after_another(recording, tmp_path):
    """bench/replay.py --blocks: each category's prompts together, in the order --category names them (a session
    that stays with one kind of text), where a replay otherwise interleaves them as `edgespec bench` does."""
    import subprocess
    import sys

    data = json.loads(Path(recording.path).read_text())
    data["texts"] = data["texts"] * 2  # two prompts a category
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(data))
    first, second = data["texts"][0]["category"], data["texts"][1]["category"]
    script = Path(__file__).parent.parent / "bench" / "replay.py"
    order = {}
    for blocks in ([], ["--blocks"]):
        out = subprocess.run([sys.executable, str(script), "trace", str(path), "--modes", "draft", "-n", "4",
                              "--category", second, "--category", first, *blocks], capture_output=True, text=True,
                             check=True).stdout
        order[bool(blocks)] = [line.split()[0] for line in out.splitlines() if line.endswith(" prompt tokens")]
    assert order[False] == [second, first, second, first]
    assert order[True] == [second, second, first, first]


def test_tune_on_the_built_in_prompts_profiles_a_recording_of_others(tiny_pair, recording, tmp_path):
    """bench/replay.py --tune-on: `tune` measures on another recording of the pair (the built-in prompts it
    measures on) under this one's costs, and writes the profile an engine of this recording reads, as for a user
    who ran `edgespec tune` once and then works on prompts of their own. Another pair's recording is refused."""
    items = workloads.select(workloads.builtin(), limit=1, skip=1)[:3]  # prompts tune never measures on
    data = record(str(tiny_pair[0]), str(tiny_pair[1]), items, N, n_threads=2, repeats=2)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    mine = Recording.load(path)
    tuning = mine.tuned_on(recording)
    assert tuning.path == mine.path and tuning.data["costs"] == mine.data["costs"]
    assert tuning.data["texts"] == recording.data["texts"]
    target, draft = mine.curves()
    clock = Clock()
    with virtual_time(clock):  # no profile of its own
        engine = mine.engine(clock, target, draft)
        assert not engine.use_profile()
        engine.close(remember=False)
    clock = Clock()
    with virtual_time(clock):
        engine = tuning.engine(clock, target, draft)
        assert autotune.tune(engine, 5.0, 16, True, None).path is not None
        engine.close(remember=False)
        engine = mine.engine(clock, target, draft)
        assert engine.use_profile()
        engine.close(remember=False)
    with pytest.raises(InvalidArgument, match="another pair"):
        mine.tuned_on(Recording({**recording.data, "target": "another.gguf"}, recording.path))
    with pytest.raises(InvalidArgument, match="another pair: files of the same names, another vocabulary"):
        mine.tuned_on(Recording({**recording.data, "vocab": {**recording.data["vocab"], "n_vocab": 7}},
                                recording.path))


def test_bench_texts_compares_text_by_text_and_reads_openings(tmp_path):
    """bench/texts.py: from a saved run, the texts where one mode was slower or faster than another; from a
    recording, how often the draft's first token of an answer passes against later ones, and how often lookup's
    first token is the target's where the draft would have drafted it and where not; from prompt files, a new
    prompt close to an earlier one. bench/window_read.py: bad input in one line."""
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "bench" / "texts.py"
    a = [[1.0, 10], [1.0, 10], [1.0, 10]]
    b = [[0.5, 10], [1.2, 10], [1.01, 10]]  # 2x faster, 1.2x slower, level
    rows = {"draft": {"overall": {"items": [a]}, "x": {"items": [a]}},
            "hybrid": {"overall": {"items": [b]}, "x": {"items": [b[:2]]}, "y": {"items": [b[2:]]}}}
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({"rows": rows}))
    out = subprocess.run([sys.executable, str(script), "compare", str(run_file), "--modes", "draft,hybrid"],
                         capture_output=True, text=True, check=True).stdout
    assert "3 texts: more than 3% slower on 1, faster on 1" in out and "x" in out.splitlines()[1]
    # prompt [7], answer 1 2 3 4 5 6: the draft misses the answer's second token and nothing after
    text = {"n_prompt": 1, "tokens": [7, 1, 2, 3, 4, 5, 6], "draft": [1, 9, 3, 4, 5, 6]}
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps({"texts": [text]}))
    out = subprocess.run([sys.executable, str(script), "openings", str(rec), "-k", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert "passes 0.00, later ones 1.00" in out and "a first round of 2 yields 0.00, later rounds 2.00" in out
    # prompt 5 6 7 5 6, answer 7 5 6 8: lookup copies 7, 5, 6, then 7 again; the draft says 7, 5, 9, 8
    text = {"category": "x", "n_prompt": 5, "tokens": [5, 6, 7, 5, 6, 7, 5, 6, 8], "draft": [7, 5, 9, 8]}
    rec.write_text(json.dumps({"texts": [text]}))
    out = subprocess.run([sys.executable, str(script), "agreement", str(rec)],
                         capture_output=True, text=True, check=True).stdout
    assert "agree 2 times: lookup's 1.00, the draft's 1.00; differ 2 times: lookup's 0.50, the draft's 0.50" in out
    # a question asked again in other words, and one asked nowhere before (nor in the built-in workload)
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(json.dumps({"category": "x", "prompt": "Who wrote the novel 'Pride and Prejudice'?"}) + "\n")
    new.write_text("".join(json.dumps({"category": "x", "prompt": p}) + "\n" for p in
                           ["Who wrote the novel Pride and Prejudice?", "Zebras, quartz, jigsaws: sort them by hue."]))
    out = subprocess.run([sys.executable, str(script), "similar", str(new), "--against", str(old)],
                         capture_output=True, text=True, check=True).stdout
    assert "Pride" in out and "Zebras" not in out and "1 of 2 prompts over 0.7" in out
    bad = subprocess.run([sys.executable, str(script), "compare", str(rec), "--modes", "draft,hybrid"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "texts.py" in bad.stderr
    # bench/window_read.py (which loads a draft model): a file that is not a recording, a model that is not there
    window = script.parent / "window_read.py"
    for recording, says in ((run_file, "is not a replay recording"), (rec, "cannot load the draft model")):
        bad = subprocess.run([sys.executable, str(window), str(recording), "--draft", str(tmp_path / "none.gguf")],
                             capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and says in bad.stderr, bad.stderr


def test_replay_ensemble_tells_a_systematic_shortfall_from_a_path(tmp_path):
    """bench/replay_ensemble.py --from a kept run: per category the hybrid's mean ratio to its better part over the
    seeds, short only where the whole +-2 SE band lies under 0.98, level where it lies at or above; against a kept
    run before it, the categories whose hybrid moved beyond two standard errors, seed by seed (a category that moved
    both ways is not counted); and one line, exit 1, for a setting it does not know or a folder with no run."""
    import subprocess
    import sys

    script = Path(__file__).parent.parent / "bench" / "replay_ensemble.py"
    hybrid_by_seed = {"a": [0.90, 0.90, 0.90], "b": [1.00, 1.01, 1.00], "c": [0.90, 1.06, 0.98]}  # of the draft's

    def write(folder, hybrid):
        (tmp_path / folder).mkdir()
        for seed in range(3):
            def row(figures):
                return {c: {"speedup": v, "end_to_end_tok_s": v} for c, v in figures.items()}
            cats = {c: 2.0 for c in hybrid}
            rows = {"plain": row({**{c: 1.0 for c in cats}, "overall": 1.0}), "draft": row({**cats, "overall": 2.0}),
                    "lookup": row({**{c: 1.5 for c in cats}, "overall": 1.5}),
                    "hybrid": row({**{c: 2.0 * v[seed] for c, v in hybrid.items()}, "overall": 2.0})}
            (tmp_path / folder / f"toy-{seed}.json").write_text(json.dumps({"rows": rows}))
    write("after", hybrid_by_seed)
    for seed in range(3):  # a second setting whose hybrid is under plain in one category: the floor's line
        rows = {m: {c: {"speedup": v, "end_to_end_tok_s": v} for c, v in (("x", f), ("overall", f))}
                for m, f in (("plain", 1.0), ("draft", 0.9), ("lookup", 0.95), ("hybrid", 0.96))}
        (tmp_path / "after" / f"low-{seed}.json").write_text(json.dumps({"rows": rows}))
    out = subprocess.run([sys.executable, str(script), "--from", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    assert "toy (3 seeds)" in out and "1 level, 1 unclear, 1 short of 3" in out, out
    assert out.count("the hybrid under 0.98x of plain: x 0.960x") == 2 and "1 under 0.98x of plain" in out, out
    assert "a 0.900+-0.000 short" in out and "b 1.003+-" in out and "c 0.980+-" in out and "unclear" in out, out
    assert "one replay alone: 1-2 within 2%" in out, out  # (seed 1: b and c; seeds 0 and 2: b, and c at 0.98)
    # against a run before it where b was 5% slower in every seed and c moved both ways: b up, paired seed by seed
    write("before", {**hybrid_by_seed, "b": [0.95, 0.96, 0.95], "c": [0.95, 1.00, 0.98]})
    out = subprocess.run([sys.executable, str(script), "--from", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    assert "its categories up in 1, down in 0" in out and "b 1.003+-0.007 (was 0.953)" in out, out
    empty = tmp_path / "empty"
    (empty / "after").mkdir(parents=True)  # (a run interrupted before its first replay wrote)
    foreign = tmp_path / "foreign"
    (foreign / "after").mkdir(parents=True)  # (bench/replay_same.sh's folders name a replay by its setting alone)
    (foreign / "after" / "held-mb.json").write_text(json.dumps({"rows": {}}))
    for args, says in ((["--settings", "nope"], "unknown setting nope"),
                       (["--settings", "main-mb,unseen-noise"], "unseen-noise sets its own noise"),
                       (["--from", str(tmp_path / "after")], "holds no kept run"),
                       (["--from", str(empty)], "holds no kept run"),
                       (["--from", str(foreign)], "held-mb.json is not one of this tool's replays")):
        bad = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and says in bad.stderr, bad.stderr


def test_replay_draft_swap_changes_the_draft_alone(monkeypatch, tmp_path):
    """bench/replay_draft_swap.py: in every setting it replays, before and after share the target's costs (the retimed
    recording's), after reads the Q4_0 twin of every recording and the Q4_0 draft's costs, the other options stay as
    bench/replay_settings.py has them, and every file named is in the repository; a setting it does not replay, or a
    revision --against cannot find, is one line, exit 1."""
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    monkeypatch.syspath_prepend(str(root / "bench"))
    import replay_draft_swap as swap
    from replay_settings import SETTINGS

    def files(options):
        return [o for o in options if o.endswith(".json")]

    for setting in swap.DEFAULT:
        options, before, after = SETTINGS[setting], swap.before(SETTINGS[setting]), swap.after(SETTINGS[setting])
        assert [o for o in before if not o.endswith(".json")] == [o for o in options if not o.endswith(".json")] + \
            ([] if "--costs-from" in options else ["--costs-from"])
        assert before[before.index("--costs-from") + 1] == after[after.index("--costs-from") + 1] == swap.RETIMED
        assert after[-2:] == ["--draft-costs-from", swap.Q4_0] and "q4_0" in after[0] and "q4_0" not in before[0]
        if "--tune-on" in options:
            assert after[after.index("--tune-on") + 1] == swap.Q4_0
        assert all((root / f).is_file() for f in files(before) + files(after)), setting
    bad = subprocess.run([sys.executable, str(root / "bench" / "replay_draft_swap.py"), "--out", "/nonexistent/x",
                          "--settings", "smollm-switch"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "smollm-switch" in bad.stderr, bad.stderr
    bad = subprocess.run([sys.executable, str(root / "bench" / "replay_draft_swap.py"), "--out", str(tmp_path),
                          "--settings", "main-recorded", "--against", "no-such-revision"], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no-such-revision" in bad.stderr, bad.stderr
    assert not list(tmp_path.glob("*/*.json"))  # (nothing replayed)


def test_replay_ensemble_stops_on_ctrl_c_with_one_line(tmp_path):
    """Ctrl-C during bench/replay_ensemble.py: the replays not begun are dropped, one line, exit 130 (not a wait for
    the whole run, nor a thread's traceback)."""
    import signal
    import subprocess
    import sys
    import time

    script = Path(__file__).parent.parent / "bench" / "replay_ensemble.py"
    proc = subprocess.Popen([sys.executable, str(script), "--settings", "main-flat", "--seeds", "8", "--jobs", "1",
                             "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.strip().count("\n") == 0 and "interrupted" in err, (out, err)
    assert len(list((tmp_path / "after").glob("*.json"))) < 8


def test_tune_ends_within_its_time(recording):
    """A prompt starts only where it is expected to end in time: `edgespec tune` keeps to its budget (the issue's
    two minutes), the warm-up and verify curves included, rather than starting a prompt at its last second."""
    def tune(budget_s):
        clock = Clock(0.0, seed=1)
        target, draft = recording.curves()
        with virtual_time(clock):
            engine = recording.engine(clock, target, draft)
            t0 = clock.now()
            t = autotune.tune(engine, budget_s, N, save=False)
            spent = clock.now() - t0
            engine.close(remember=False)
        return t.rows["plain"]["overall"]["prompts"], spent

    n_all, whole = tune(1e9)
    assert n_all == len(workloads.select(workloads.builtin(), limit=1))
    counts = []
    for share in (0.2, 0.4, 0.6, 0.8, 0.95):
        n, spent = tune(share * whole)
        assert spent <= share * whole and n < n_all  # (the last item is not started late)
        assert share * whole - spent < 3 * whole / n_all  # (nor is the time left unused: a prompt or two at most)
        counts.append(n)
    assert counts[0] >= 2 and counts == sorted(counts)
    assert tune(0.0)[0] == 1  # one prompt whatever the budget: a profile needs a sample


def test_draft_costs_from_takes_the_draft_s_costs_alone(recording, tmp_path):
    """bench/replay.py run --draft-costs-from: another recording's draft costs under this one's target costs (two
    drafts judged under one timing of the target); --costs-from takes both."""
    import subprocess
    import sys

    data = json.loads(Path(recording.path).read_text())
    for part, factor in (("target", 2.0), ("draft", 3.0)):  # another day: the target twice as slow, the draft 3x
        data["costs"][part] = {kind: {m: s * factor for m, s in t.items()} for kind, t in data["costs"][part].items()}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    script = Path(__file__).parent.parent / "bench" / "replay.py"

    def ms(*extra):
        out = tmp_path / "out.json"
        subprocess.run([sys.executable, str(script), "run", str(recording.path), "-n", "8", "--limit", "2",
                        "--modes", "plain,draft:2", "--json", str(out), *extra], capture_output=True, check=True)
        rows = json.loads(out.read_text())["rows"]
        return {m: rows[m]["overall"]["ms_per_token"] for m in ("plain", "draft:2")}
    own, drafts, both = ms(), ms("--draft-costs-from", str(other)), ms("--costs-from", str(other))
    assert drafts["plain"] == pytest.approx(own["plain"]) and drafts["draft:2"] > own["draft:2"]
    assert both["plain"] == pytest.approx(2 * own["plain"], rel=0.05)
