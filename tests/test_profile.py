"""A machine's measured verify curve kept between processes (profile.py): used when everything it depends on
matches, ignored when anything differs, never a reason to fail."""
import json
import os

import pytest

import edgespec
from edgespec import profile


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_PROFILES", str(tmp_path / "profiles"))
    return tmp_path / "profiles"


def test_a_curve_comes_back_only_under_the_same_key(profiles, tiny_pair):
    k = profile.key(str(tiny_pair[0]), 2, 0)
    assert profile.load(k) is None
    path = profile.save(k, {1: 0.01, 4: 0.012})
    assert path.parent == profiles and profile.load(k).verify_s == {1: 0.01, 4: 0.012}
    assert profile.load(k).back_s == {}
    profile.save(k, {1: 0.01, 4: 0.012}, back_s={4: 0.003, 16: -0.0001})  # over a link: the way back
    assert profile.load(k).back_s == {4: 0.003, 16: -0.0001}
    assert profile.load(profile.key(str(tiny_pair[0]), 1, 0)) is None  # other threads
    assert profile.load({**k, "build": k["build"] + " AMX = 1"}) is None  # another build
    assert profile.load({**k, "mtime_ns": k["mtime_ns"] + 1}) is None  # the file replaced or touched
    assert profile.load({**k, "version": profile.VERSION + 1}) is None
    over_rpc = profile.key(str(tiny_pair[0]), 2, 0, ["127.0.0.1:50052"])
    assert profile.load(over_rpc) is None  # the same model behind a network: another curve
    assert profile.load(profile.key(str(tiny_pair[0]), 2, 0, ["127.0.0.1:50052"], [1, 3])) is None  # another split


def test_a_loaded_models_key_names_where_its_layers_are(tiny_pair):
    from edgespec.backend import Model

    m = Model(tiny_pair[1], vocab_only=True)
    try:
        assert profile.key_of(m, 2) == profile.key(str(tiny_pair[1]), 2, 0)
        m.rpc, m.tensor_split = ["127.0.0.1:50052"], [1.0, 3.0]  # as a model split over rpc-servers has them
        assert profile.key_of(m, 2) == profile.key(str(tiny_pair[1]), 2, 0, ["127.0.0.1:50052"], [1, 3])
        m.rpc, m.tensor_split, m.kv_cache = [], [], ("q8_0", "q8_0")  # another KV cache: another curve
        assert profile.key_of(m, 2) != profile.key(str(tiny_pair[1]), 2, 0)
        assert profile.key_of(m, 2)["kv_cache"] == ["q8_0", "q8_0"]
        local, remote = (profile.proposer_name(profile.key(str(tiny_pair[1]), 2, 0, rpc)) for rpc in ([], ["h:1"]))
        assert local != remote  # a draft on an rpc-server has its own entry in the target's profile
    finally:
        m.close()


@pytest.mark.parametrize("content", ["", "{", "[]", '{"key": 1}', "null"])
def test_a_damaged_profile_is_ignored(profiles, tiny_pair, content):
    k = profile.key(str(tiny_pair[0]), 2, 0)
    path = profile.save(k, {1: 0.01, 2: 0.011})
    path.write_text(content)
    notes = []
    assert profile.load(k, notes) is None
    assert len(notes) == 1 and "ignored the profile" in notes[0] and "\n" not in notes[0]
    data = {"key": k, "verify_s": {"1": -1.0, "2": 0.01}}  # impossible timings
    path.write_text(json.dumps(data))
    assert profile.load(k) is None
    for back in ({"2": 5.0}, {"2": "NaN"}, {"2": [1]}):  # a way back dearer than any decode, not a number
        path.write_text(json.dumps({"key": k, "verify_s": {"1": 0.01, "2": 0.011}, "back_s": back}))
        assert profile.load(k) is None
    data = {"key": k, "verify_s": {"1": 0.01, "2": 0.01}, "proposers": {"draft x": {"reached": [1], "accepted": [2]}}}
    path.write_text(json.dumps(data))  # more accepted than tested: not a measurement
    assert profile.load(k) is None
    data["proposers"] = {"lookup 2-4": {"reached": [2], "accepted": [1], "by_key": {"lookup:2": {"reached": [1],
                                                                                             "accepted": [3]}}}}
    path.write_text(json.dumps(data))  # the same, for one kind of proposal
    assert profile.load(k) is None


def test_a_foreign_profile_is_ignored_with_a_note(profiles, tiny_pair):
    k = profile.key(str(tiny_pair[0]), 2, 0)
    other = {**k, "cpu": "some other CPU"}
    profile.path_of(k).parent.mkdir(parents=True, exist_ok=True)
    profile.path_of(k).write_text(json.dumps({"key": other, "verify_s": {"1": 0.01, "2": 0.02}}))  # copied over
    notes = []
    assert profile.load(k, notes) is None and "another key" in notes[0]


def test_draft_costs_and_acceptance_round_trip(profiles, tiny_pair):
    k = profile.key(str(tiny_pair[0]), 2, 0)
    name = profile.proposer_name(profile.key(str(tiny_pair[1]), 2, 0))
    entry = {"draft_round_s": {2: 0.004, 4: 0.007}, "reached": [10.0, 8.0], "accepted": [8.0, 5.0], "by_key": {}}
    lookup = {"draft_round_s": {3: 1e-5}, "reached": [6.0], "accepted": [3.0],
              "by_key": {"lookup:2": {"reached": [4.0, 2.0], "accepted": [2.0, 1.0]}}}
    profile.save(k, {1: 0.01, 2: 0.012}, {name: entry, profile.lookup_name(2, 4): lookup})
    assert profile.load(k).proposers == {name: entry, "lookup 2-4": lookup}
    assert name != profile.proposer_name(profile.key(str(tiny_pair[1]), 1, 0))  # other threads: another entry


def test_the_second_engine_starts_from_the_first_ones_measurement(profiles, tiny_pair, monkeypatch):
    def run():
        with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2) as e:
            r = e.generate(e.tokenize("the cat sat on the"), max_tokens=8)
            return e.costs_from, r.tokens

    first = run()
    assert first[0] == "measured" and len(list(profiles.glob("*.json"))) == 1

    def no_timing(self, *a, **kw):
        raise AssertionError("the verify curve was timed again")

    monkeypatch.setattr(edgespec.Engine, "calibrate", no_timing)
    second = run()
    assert second == ("profile", first[1])


def test_an_unwritable_cache_changes_nothing(tmp_path, monkeypatch, tiny_pair):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("EDGESPEC_PROFILES", str(blocker / "profiles"))  # a folder under a file: cannot exist
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2) as e:
        r = e.generate(e.tokenize("abc"), max_tokens=4)
        assert e.costs_from == "measured" and r.finish_reason in ("length", "stop")
    assert not os.path.exists(blocker / "profiles")


def test_merge_fades_the_old_counts_and_keeps_the_newer_costs():
    old = {"draft_round_s": {2: 0.004, 4: 0.008}, "reached": [10.0, 6.0], "accepted": [8.0, 3.0],
           "by_key": {"a": {"reached": [2.0], "accepted": [2.0]}}}
    new = {"draft_round_s": {4: 0.006}, "reached": [4.0, 4.0, 2.0], "accepted": [4.0, 2.0, 1.0],
           "by_key": {"b": {"reached": [1.0], "accepted": [0.0]}}}
    assert profile.merge(old, new) == {"draft_round_s": {2: 0.004, 4: 0.006}, "reached": [9.0, 7.0, 2.0],
                                       "accepted": [8.0, 3.5, 1.0],
                                       "by_key": {"a": {"reached": [1.0], "accepted": [1.0]},
                                                  "b": {"reached": [1.0], "accepted": [0.0]}}}
    assert profile.merge(None, new) == new


def test_an_engine_adds_what_it_learned_to_the_profile_when_it_closes(profiles, tiny_pair):
    k = profile.key(str(tiny_pair[0]), 2, 0)
    name = profile.proposer_name(profile.key(str(tiny_pair[1]), 2, 0))
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2)
    e.generate(e.tokenize("the cat sat on the mat. the cat sat on the"), max_tokens=40, draft_max=3, adaptive=False)
    assert e.costs_from is None and profile.load(k) is None  # fixed K: no curve needed, so no profile yet
    e.close()
    assert profile.load(k) is None  # nothing to add to: only an existing profile is updated
    profile.save(k, {1: 0.01, 2: 0.012})
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2)
    r = e.generate(e.tokenize("the cat sat on the mat. the cat sat on the"), max_tokens=40, draft_max=3,
                   adaptive=False)
    e.close(remember=False)  # a benchmark measures; it does not teach
    assert profile.load(k).proposers == {}
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2)
    r = e.generate(e.tokenize("the cat sat on the mat. the cat sat on the"), max_tokens=40, draft_max=3,
                   adaptive=False)
    assert r.stats.n_rounds >= 8
    e.close()
    known = profile.load(k)
    entry = known.proposers[name]
    assert known.verify_s == {1: 0.01, 2: 0.012}  # the curve stays as measured
    assert entry["draft_round_s"][3] > 0 and entry["reached"][0] > 0
    assert entry["accepted"][0] <= entry["reached"][0]
    seeded = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2)
    assert seeded.use_profile([seeded.proposer])
    assert seeded.policy(seeded.proposer).cost.draft_round_s  # the next engine starts from it
    seeded.close(remember=False)


def test_a_draft_models_step_and_calibration_round_trip_and_seed_the_next_process(profiles, tiny_pair):
    # What its confidence is worth (how often tokens drafted at each confidence passed) and what one draft step costs
    # are the draft model's on this machine, not the text's: a new process starts from them, not from "chance =
    # confidence" and a step read off round costs.
    from edgespec.tuning import DraftLength

    k = profile.key(str(tiny_pair[0]), 2, 0)
    name = profile.proposer_name(profile.key(str(tiny_pair[1]), 2, 0))
    learned = DraftLength(8, True)
    learned.cost.observe_draft(2, 0.004)
    learned.step_s = 0.0015
    learned.prompt_read_s = 0.008  # a prompt's reading, per token (Reading)
    learned.answered(40)  # ... and the answers' mean length it is weighed over
    for _ in range(300):
        learned.calibration.observe([0.45, 0.95], 2)  # an under-confident draft model: its 0.45s pass
    entry = learned.learned()
    assert entry["step_s"] == 0.0015 and sum(entry["calibration"]["tested"]) > 0
    profile.save(k, {1: 0.01, 2: 0.012}, {name: entry})
    back = profile.load(k).proposers[name]
    assert back["step_s"] == 0.0015 and back["calibration"] == entry["calibration"]
    fresh = DraftLength(8, True)
    fresh.seed(back)
    assert fresh.step_s == 0.0015 and fresh.prompt_read_s == 0.008 and back["read_s"] == 0.008
    assert fresh.answer_tokens == learned.answer_tokens == back["answer_tokens"] < 128
    assert fresh.calibration.chance(0.45) > 0.8  # learned, not the prior 0.45
    assert sum(fresh.calibration.tested) <= 32 + 1e-9  # worth a few rounds' tokens: the text soon outweighs it
    merged = profile.merge(back, {**entry, "step_s": 0.002})
    assert merged["step_s"] == 0.002
    assert merged["calibration"]["tested"] == [1.5 * t for t in entry["calibration"]["tested"]]
    other = DraftLength(8, True)  # counts in another number of bins are not these bins': left out, not misread
    other.seed({**back, "calibration": {"tested": [5.0] * 4, "passed": [5.0] * 4}})
    assert other.calibration.tested == [0.0] * 10 and other.calibration.chance(0.95) == pytest.approx(0.95)
    damaged = {**entry, "calibration": {"tested": [1.0] * 10, "passed": [2.0] * 10}}  # more passed than tested
    profile.save(k, {1: 0.01, 2: 0.012}, {name: damaged})
    assert profile.load(k) is None
    # not a number or infinite (json writes and reads NaN and Infinity): as damaged, never seeded into a policy
    for bad in ({**entry, "step_s": float("nan")}, {**entry, "step_s": float("inf")}, {**entry, "read_s": -1.0},
                {**entry, "calibration": {"tested": [float("inf")] * 10, "passed": [1.0] * 10}},
                {**entry, "draft_round_s": {1: float("nan")}}, {**entry, "answer_tokens": 0.0},
                {**entry, "answer_tokens": "many"}):
        profile.save(k, {1: 0.01, 2: 0.012}, {name: bad})
        assert profile.load(k) is None
    # ... nor in the verify curve or the acceptance counts (infinite counts would make every acceptance NaN)
    for curve, entry_ in (({1: 0.01, 2: float("inf")}, entry), ({1: 0.01, 2: float("nan")}, entry),
                          ({1: 0.01, 2: 0.012}, {**entry, "reached": [float("inf")] * 2, "accepted": [1.0] * 2})):
        notes = []
        profile.save(k, curve, {name: entry_})
        assert profile.load(k, notes) is None and len(notes) == 1 and "ignored the profile" in notes[0]
