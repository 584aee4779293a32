"""`edgespec bench` and `edgespec tune`: the workload they read, the numbers they print and keep, and the profile
tune leaves (or, interrupted, does not)."""
import json
import subprocess
import sys

import pytest

import edgespec
from edgespec import autotune, benchmark, intervals, profile, report, workloads
from edgespec.errors import InvalidArgument
from edgespec.tuning import CostModel, DraftLength


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_PROFILES", str(tmp_path / "profiles"))
    return tmp_path / "profiles"


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_the_builtin_workload_is_broad(tiny_pair):
    items = workloads.builtin()
    cats = {}
    for it in items:
        cats[it.category] = cats.get(it.category, 0) + 1
    assert len(cats) >= 10 and min(cats.values()) >= 6
    for c in ("translate", "summarise_long", "rag", "factual_qa", "writing", "extract", "multiturn", "math",
              "code_write", "code_edit"):
        assert c in cats
    with edgespec.Engine.load(tiny_pair[0], n_ctx=2048, n_threads=2) as e:
        multi = [it for it in items if it.messages]
        assert multi and all(len(it.tokens(e)) > 10 for it in multi[:2])
    # interleaved: one of each category first
    assert [it.category for it in workloads.select(items, limit=1)] == list(cats)


def test_a_users_workload(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"prompt": "Hello", "category": "greet"}\n\n'
                    '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}\n')
    items = workloads.read_jsonl(path)
    assert [it.category for it in items] == ["greet", "prompts"] and items[1].messages
    for bad, says in [('{"prompt": ""}', "line 1"), ("not json", "line 1: not JSON"),
                      ('{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}',
                       "the last message must be the user's"), ('[1, 2]', "expected a JSON object"),
                      ('{"prompt": "a", "category": 3}', "category")]:
        path.write_text(bad + "\n")
        with pytest.raises(InvalidArgument, match=says):
            workloads.read_jsonl(path)
    path.write_text("\n")
    with pytest.raises(InvalidArgument, match="holds no prompts"):
        workloads.read_jsonl(path)
    with pytest.raises(InvalidArgument, match="no category nope"):
        workloads.select(items, ["nope"])
    math = [it for it in workloads.builtin() if it.category == "math"]
    assert workloads.select(workloads.builtin(), ["math"], skip=5) == math[5:]  # the first 5 left out
    with pytest.raises(InvalidArgument, match="leaves no prompt"):
        workloads.select(items, skip=1)


def test_modes():
    assert benchmark.parse_modes("draft:4,lookup", True) == ["plain", "draft:4", "lookup"]
    assert benchmark.parse_modes("lookup,plain,lookup", False) == ["plain", "lookup"]
    assert benchmark.parse_modes("lookup@2,draft@4,draft:4@2", True) == ["plain", "lookup@2", "draft@4", "draft:4@2"]
    for bad, says in [("draft", "needs a draft model"), ("fast", "unknown mode"), ("draft:0", "unknown mode"),
                      ("plain:2", "unknown mode"), ("lookup:x", "unknown mode"), ("lookup@1", "unknown mode"),
                      ("lookup@5", "unknown mode"), ("lookup@x", "unknown mode"), ("plain@2", "unknown mode")]:
        with pytest.raises(InvalidArgument, match=says):
            benchmark.parse_modes(bad, False)


def test_bench_command_on_the_tiny_pair(tiny_pair, tmp_path):
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    r = run("bench", "-m", tiny_pair[0], "-d", tiny_pair[1], "--category", "code_edit", "--category", "multiturn",
            "--limit", "1", "-n", "12", "--modes", "draft:3,draft,lookup,hybrid,lookup@2,draft:3@2", "--json", out,
            "--plot", png,
            "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert "[2/2" in r.stderr  # progress while it runs
    assert "code_edit" in r.stdout and "acceptance by position" in r.stdout and "T_v(m)" in r.stdout
    data = json.loads(out.read_text())
    assert data["command"].startswith("edgespec bench") and data["build"] and data["machine"]["cores"]
    assert set(data["rows"]) == {"plain", "draft:3", "draft", "lookup", "hybrid", "lookup@2", "draft:3@2"}
    assert data["rows"]["lookup"]["overall"]["tree_rounds"] == 0  # the other modes stay chains on a tree context
    fixed = data["rows"]["draft:3@2"]["overall"]  # a fixed shape: a tree every round, branches where the draft hesitates
    assert fixed["tree_rounds"] >= fixed["rounds"] - 4 and fixed["branch_rounds"] > 0
    assert "with a drafted branch" in r.stdout
    for mode, by_cat in data["rows"].items():
        o = by_cat["overall"]
        assert set(by_cat) == {"code_edit", "multiturn", "overall"}
        assert o["prompts"] == 2 and o["same_as_plain"] == 2, mode  # greedy: every mode writes plain's tokens
        assert o["ttft_ms"] > 0 and o["end_to_end_tok_s"] > 0 and o["ms_per_token"] > 0
    assert data["rows"]["draft:3"]["overall"]["acceptance_by_position"]
    assert len(data["verify_curve_s"]) == 16 and png.stat().st_size > 10_000
    again = run("bench", "--from-json", out, "--plot", tmp_path / "again.png")  # a saved run, shown again
    assert again.returncode == 0, again.stderr
    tables = r.stdout[r.stdout.index("speedup over plain"):]
    assert again.stdout[again.stdout.index("speedup over plain"):] == tables
    assert (tmp_path / "again.png").stat().st_size > 10_000
    for mode in ("draft", "lookup", "hybrid"):  # per-prompt figures that are not (seconds, tokens) pairs
        data["rows"][mode]["code_edit"]["items"] = [[1, 2, 3, 4, 5]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = run("bench", "--from-json", bad)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a file" in r.stderr, r.stderr
    data = json.loads(out.read_text())  # a figure no run writes: the parts' end-to-end speeds at 0
    for mode in ("draft", "lookup"):
        data["rows"][mode]["code_edit"]["end_to_end_tok_s"] = 0.0
    bad.write_text(json.dumps(data))
    r = run("bench", "--from-json", bad)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a file" in r.stderr, r.stderr


def test_bench_fresh_starts_every_prompt_anew(tiny_pair, profiles, monkeypatch):
    seeded = []
    real = edgespec.Engine.use_profile

    def counting(self, proposers=(), curve=True):
        seeded.append(len(proposers))
        return real(self, proposers, curve)

    monkeypatch.setattr(edgespec.Engine, "use_profile", counting)
    items = workloads.select(workloads.builtin(), ["code_edit", "math"], limit=1, skip=1)
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=2048, n_threads=2) as e:
        rep = benchmark.run(e, ["plain", "draft", "hybrid"], items, max_tokens=8, fresh=True)
    assert seeded == [2, 2]  # at the start (the first prompt), then for each later one: new proposers and policies
    assert rep.rows()["hybrid"]["overall"]["prompts"] == 2


def test_sessions_interleaved_prompt_by_prompt_measure_what_run_does(tiny_pair, profiles):
    """benchmark.Session, which bench/rpc.py --one-process steps through prompt by prompt for several engines: the
    same tallies as run() on one engine (greedy: every mode writes plain's tokens), each engine its own report."""
    items = workloads.select(workloads.builtin(), ["code_edit", "math"], limit=1, skip=1)
    modes = ["plain", "draft", "draft:2"]
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=2048, n_threads=2) as a, \
            edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=2048, n_threads=2) as b:
        sessions = [benchmark.Session(e, modes, ["code_edit", "math"], max_tokens=8) for e in (a, b)]
        for i, it in enumerate(items):
            for s in sessions[i % 2:] + sessions[:i % 2]:
                results = s.measure(it, 0, i)
                assert set(results) == set(modes) and "plain" in benchmark.progress_line(it, results)
        reports = [s.finish() for s in sessions]
        alone = benchmark.run(a, modes, items, max_tokens=8)
    for rep in reports:
        rows = rep.rows()
        assert set(rows) == set(modes) and len(rep.verify_curve) == 16
        for mode in modes:
            o = rows[mode]["overall"]
            assert o["prompts"] == 2 and o["same_as_plain"] == 2, mode
            assert o["rounds"] > 0 and o["ms_per_token"] > 0
    assert {m: alone.rows()[m]["overall"]["prompts"] for m in modes} == {m: 2 for m in modes}


def test_bench_refuses_bad_input_in_one_line(tiny_pair, tmp_path):
    r = run("bench", "-m", tiny_pair[0], "--modes", "draft")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "needs a draft model" in r.stderr
    bad = tmp_path / "w.jsonl"
    bad.write_text('{"prompt": 3}\n')
    r = run("bench", "-m", tiny_pair[0], "--workload", bad)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "line 1" in r.stderr
    r = run("bench", "-m", tiny_pair[0], "--skip", "6")  # every built-in category has 6 prompts
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "leaves no prompt" in r.stderr
    r = run("bench", "-m", tiny_pair[0], "--skip", "-1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--skip" in r.stderr
    r = run("bench", "--from-json", tmp_path / "none.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot read" in r.stderr
    r = run("bench", "--from-json", tmp_path / "none.json", "--json", tmp_path / "out.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "measures nothing" in r.stderr
    for extra, named in ((["--category", "chat"], "--category does not apply"),
                         (["-m", tiny_pair[0], "--max-tokens", "8"], "--model, --max-tokens do not apply")):
        r = run("bench", "--from-json", tmp_path / "none.json", *extra)  # a filter or setting is not silently ignored
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and named in r.stderr, r.stderr
    partial = '{"rows": {"plain": {"overall": {}}}, "settings": {"model": "m", "max_tokens": 1, "prompts": 1, ' \
        '"repeats": 1}}'  # a record whose rows lack their figures
    for text in ('{"prompt": 3}', "[1, 2]", "not json", '{"rows": {}, "settings": {}}', partial):
        bad.write_text(text)
        r = run("bench", "--from-json", bad)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a file" in r.stderr, (text, r.stderr)


def test_the_speedup_comes_with_its_interval_over_prompts():
    """A paired bootstrap over prompts: where every prompt says the same the interval is that point, a spread of
    prompts widens it around the figure, the same figures give the same interval, and too few prompts give none."""
    plain = [[(1.0, 10)] * 8]  # one repeat, 8 prompts of 10 tokens in 1 s each
    assert intervals.speedup_interval(plain, [[(0.5, 10)] * 8]) == pytest.approx([2.0, 2.0])
    mode = [[(t, 10) for t in (0.5, 0.6, 0.8, 1.0, 1.1, 0.7, 0.9, 1.3)]]
    low, high = intervals.speedup_interval(plain, mode)
    point = (8 / 80) / (sum(t for t, _ in mode[0]) / 80)  # plain ms/token over the mode's
    assert low < point < high and high - low > 0.2
    assert intervals.speedup_interval(plain, mode) == [low, high]  # seeded
    # repeats: each resample takes the median over repeats, of the same prompts drawn in every repeat
    assert intervals.speedup_interval(plain * 3, [[(0.5, 10)] * 8] * 2 + mode) == pytest.approx([2.0, 2.0])
    assert intervals.speedup_interval([[(1.0, 10)] * 4], [[(0.5, 10)] * 4]) is None  # 4 prompts: no interval
    tally, plain_tally = benchmark.Tally(), benchmark.Tally()
    for tal, items in ((tally, mode[0]), (plain_tally, plain[0])):
        for t, n in items:
            tal.items.append((t, n))
            tal.s, tal.n, tal.wall_s, tal.rounds = tal.s + t, tal.n + n, tal.wall_s + t, tal.rounds + n
            tal.ttft_s.append(0.1)
    figures = benchmark._figures([tally], [plain_tally])
    assert figures["speedup_interval"] == [low, high] and figures["items"] == mode
    line = report._intervals({"plain": {"overall": {}}, "lookup": {"overall": figures}})
    assert line == [f"overall, 95% interval with the prompts drawn again (paired bootstrap): lookup {low:.2f}-"
                    f"{high:.2f}x"]
    assert report._intervals({"lookup": {"overall": {"speedup_interval": None}}}) == []  # (and a saved run without)
    # the hybrid against the better of its parts, with the interval of its speed against that part's where kept
    rows = {m: {"writing": {"speedup": x}} for m, x in (("draft", 1.25), ("lookup", 1.0), ("hybrid", 1.0))}
    saved = report._against_parts(rows, ["writing"])  # a run saved before intervals
    assert "interval" not in saved[1] and saved[-1].split() == ["writing", "0.80"]
    for m, t in (("draft", 0.4), ("hybrid", 0.5)):
        rows[m]["writing"]["items"] = [[(t, 10)] * 6]
    rows["lookup"]["writing"]["items"] = [[(0.5, 10)] * 6]
    kept = report._against_parts(rows, ["writing"])
    assert "[its 95% interval over prompts]" in kept[1] and kept[-1].split() == ["writing", "0.80", "[0.80-0.80]"]
    # end to end (the prompt's reading included): the hybrid against whichever part is ahead there, which need not
    # be the one ahead per token; a saved run without the figure per category shows neither
    for m, e2e in (("plain", 10.0), ("draft", 9.0), ("lookup", 12.0), ("hybrid", 11.4)):
        rows.setdefault(m, {"writing": {"speedup": 1.0}})["writing"]["end_to_end_tok_s"] = e2e
    both = report._against_parts(rows, ["writing"])
    assert "hybrid / better, end to end" in both[2] and both[-1].split()[-1] == "0.95"
    table = report._end_to_end(rows, ["writing"], list(rows), 10)
    assert table[-1].split() == ["writing", "0.90x", "1.20x", "1.14x", "10.0t/s"]
    del rows["lookup"]["writing"]["end_to_end_tok_s"]
    assert report._end_to_end(rows, ["writing"], list(rows), 10) == []
    assert "end to end" not in report._against_parts(rows, ["writing"])[2]


def test_choice_is_the_lowest_measured_cost():
    assert autotune.choose({"plain": 0.10, "draft:2": 0.08, "draft:4": 0.07, "lookup": 0.09}) == "draft:4"
    assert autotune.choose({"plain": 0.05, "draft:2": 0.08, "lookup": 0.05}) == "plain"  # a tie: no speculation


def test_break_even_in_numbers():
    cost = CostModel(verify_s={1: 0.100, 3: 0.120, 5: 0.150}, prior_weight=0.0)
    cost.observe_draft(2, 0.020)
    cost.observe_draft(4, 0.040)
    for _ in range(10):  # position 1 always passes, position 2 half the time
        cost.observe_acceptance(4, 1)
        cost.observe_acceptance(4, 4)
    b = {x.k: x for x in autotune.break_even(cost, 4)}
    assert b[2].expected_tokens == pytest.approx(1 + cost.acceptance(0) + cost.acceptance(0) * cost.acceptance(1))
    assert b[2].round_s == pytest.approx(0.120 + 0.020) and b[2].limit_s == pytest.approx(b[2].expected_tokens * 0.1)
    assert b[2].draft_budget_s == pytest.approx(b[2].limit_s - 0.120)
    assert b[2].pays == (0.140 < b[2].limit_s)
    # the engine's adaptive choice from such a profile is the K of least expected cost per token
    policy = DraftLength(4, True, cost)
    policy.seed({"draft_round_s": {}, "reached": cost.reached, "accepted": cost.accepted})
    k = policy.decide(4).k
    assert k == min(range(1, 5), key=lambda j: (cost.cost_per_token(j), j))


def test_tune_says_what_prompt_lookup_will_verify():
    def entry(**rates):  # kind -> the share of its first tokens that passed (and of each later one, given those)
        counts = {key.replace("_", ":"): {"reached": [20.0 * a ** i for i in range(3)],
                                          "accepted": [20.0 * a ** (i + 1) for i in range(3)]}
                  for key, a in rates.items()}
        return {"draft_round_s": {3: 1e-6}, "reached": [1.0], "accepted": [1.0], "by_key": counts}

    curve = CostModel(verify_s={1: 0.100, 2: 0.130, 3: 0.150, 4: 0.170})  # a row 0.2-0.3 of a step
    said = autotune.lookup_decision(curve, entry(lookup_4=0.9, lookup_2=0.05, lookup_3_own=0.8), 3)
    assert said.startswith("prompt lookup: verifies up to 3 tokens after a match of 4 in the prompt, ") and \
        "after a match of 3 in the answer so far" in said and said.count("of 2") == 1 and \
        "; a plain step after matches of 2 in the prompt (what they offer is compared" in said and \
        said.endswith("; kinds of match unseen here, by what the text shows")
    steep = CostModel(verify_s={1: 0.100, 2: 0.200, 3: 0.300, 4: 0.400})  # a second row costs a step: nothing pays
    assert "no match seen on this sample is expected to pay at this verify curve (two rows 2.00x one)" in \
        autotune.lookup_decision(steep, entry(lookup_4=0.9), 3)
    assert "no match was tested" in autotune.lookup_decision(curve, entry(), 3)


def test_tune_writes_a_profile_the_next_engine_starts_from(tiny_pair, profiles):
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        t = autotune.tune(e, budget_s=2, max_tokens=12)
    assert t.path is not None and t.path.parent == profiles
    assert set(t.measured) == {"plain", "draft:2", "draft:4", "lookup"} and t.choice in t.measured
    assert t.draft_entry["reached"] and t.decision
    reached, accepted = t.draft_entry["reached"], t.draft_entry["accepted"]
    # counts conditional on the earlier positions passing, as the policy reads them (not drafted-at-i counts,
    # which would compound the rejections of earlier positions twice)
    assert all(r <= a for r, a in zip(reached[1:], accepted)) and reached[0] >= reached[-1]
    known = profile.load(profile.key(str(tiny_pair[0]), 2, 0))
    assert set(known.proposers) == {t.draft_name, "lookup 2-4"} and len(known.verify_s) == 16
    assert known.proposers["lookup 2-4"] == t.lookup_entry and t.lookup_entry["draft_round_s"]
    assert known.proposers[t.draft_name]["step_s"] > 0  # a draft step as the draft model timed it
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        r = e.generate(e.tokenize("the cat sat on the"), max_tokens=16)
        assert e.costs_from == "profile"
        assert "warm-up" not in r.stats.rounds_by_reason  # what tune measured stands in for the warm-up
    # tune again: the answers' mean length, which only the user's own texts show, stays (tune's are its own length)
    data = json.loads(t.path.read_text())
    data["proposers"][t.draft_name]["answer_tokens"] = 40.0
    t.path.write_text(json.dumps(data))
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        again = autotune.tune(e, budget_s=2, max_tokens=12)
    assert "answer_tokens" not in again.draft_entry
    assert profile.load(profile.key(str(tiny_pair[0]), 2, 0)).proposers[t.draft_name]["answer_tokens"] == 40.0


def test_an_interrupted_tune_writes_nothing(tiny_pair, profiles):
    def stop(done, total, line):
        if done == 2:
            raise KeyboardInterrupt

    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        with pytest.raises(KeyboardInterrupt):
            autotune.tune(e, budget_s=60, max_tokens=8, progress=stop)
    assert not profiles.exists() or not list(profiles.iterdir())


def test_tune_command(tiny_pair, tmp_path):
    import os

    env = {**os.environ, "EDGESPEC_PROFILES": str(tmp_path / "p")}
    r = run("tune", "-m", tiny_pair[0], "-d", tiny_pair[1], "--seconds", "5", "-n", "8", "-k", "4", "--threads", "2",
            env=env)
    assert r.returncode == 0, r.stderr
    for says in ("verify cost T_v(m)", "break-even", "E[N_K] x T_plain", "draft budget", "the engine will start with",
                 "and with prompt lookup: ", "the hybrid, draft model and prompt lookup together", "profile: "):
        assert says in r.stdout
    assert len(list((tmp_path / "p").glob("*.json"))) == 1
    assert "the way back" not in r.stdout  # (only over rpc-servers)


def test_tune_on_the_users_own_prompts(tiny_pair, tmp_path):
    import os

    env = {**os.environ, "EDGESPEC_PROFILES": str(tmp_path / "p")}
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps({"prompt": f"Say the word {w} three times.", "category": c}) + "\n"
                            for w, c in (("cat", "echo"), ("dog", "echo"), ("one", "count"))))
    r = run("tune", "-m", tiny_pair[0], "-d", tiny_pair[1], "--workload", mine, "--seconds", "60", "-n", "8",
            "-k", "4", "--threads", "2", env=env)
    assert r.returncode == 0, r.stderr
    assert f"measured on 3 prompts of {mine} (categories: echo, count), greedy:" in r.stdout
    assert len(list((tmp_path / "p").glob("*.json"))) == 1
    # a workload that cannot be read: one line, before any model is loaded, and no profile
    r = run("tune", "-m", tiny_pair[0], "--workload", tmp_path / "none.jsonl", env={**env, "EDGESPEC_PROFILES":
                                                                                    str(tmp_path / "q")})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot read the workload" in r.stderr, r.stderr
    assert not (tmp_path / "q").exists()
    # one with no prompt in it: likewise (exit 2); one whose prompts none fits the context: one line after
    # loading (exit 1); no profile either way
    empty, long = tmp_path / "empty.jsonl", tmp_path / "long.jsonl"
    empty.write_text("")
    long.write_text(json.dumps({"prompt": " ".join(["word"] * 3000)}) + "\n")
    for f, code, said in ((empty, 2, "holds no prompts"), (long, 1, "no prompt of the workload fits the context")):
        r = run("tune", "-m", tiny_pair[0], "-d", tiny_pair[1], "--workload", f, "-c", "256", "-n", "8",
                "--threads", "2", env={**env, "EDGESPEC_PROFILES": str(tmp_path / "q")})
        assert r.returncode == code and r.stderr.count("error") == 1 and said in r.stderr.splitlines()[-1], r.stderr
        assert "Traceback" not in r.stderr
        assert not (tmp_path / "q").exists() or not list((tmp_path / "q").glob("*.json"))


def test_tune_says_what_the_way_back_from_a_verify_costs_where_it_timed_one(capsys):
    from edgespec.measure_cli import _print_tuned

    plain = {"overall": {"prompts": 1, "ms_per_token": 18.0, "acceptance_by_position": []}}
    _print_tuned(autotune.Tuned({1: 0.018, 2: 0.030}, {"plain": 0.018}, "plain", {"plain": plain},
                                back_s={2: 0.0046, 16: 0.0128}))
    assert "the way back, a plain step right after m rows (ms more; in T_v(K+1) below): 2:4.6  16:12.8" in \
        capsys.readouterr().out


def test_tune_says_which_kinds_of_prompt_its_time_allowed(capsys):
    from edgespec.measure_cli import _print_tuned

    row = {"prompts": 2, "ms_per_token": 18.0, "acceptance_by_position": []}
    plain = {"code_write": {**row, "prompts": 1}, "code_edit": {**row, "prompts": 1}, "overall": row}
    _print_tuned(autotune.Tuned({1: 0.018}, {"plain": 0.018}, "plain", {"plain": plain}, offered=13))
    assert "measured on 2 prompts, one per category (code_write, code_edit; of 13, the rest left for want of time: " \
        "a larger --seconds measures more kinds of prompt)" in capsys.readouterr().out
    _print_tuned(autotune.Tuned({1: 0.018}, {"plain": 0.018}, "plain", {"plain": plain}, offered=2))
    assert "measured on 2 prompts, one per category (code_write, code_edit), greedy:" in capsys.readouterr().out


def test_tune_reads_each_prompt_once_into_the_target(tiny_pair):
    """tune's warm target: an item's modes after the first find the prompt in the target's cache (the draft model
    reads it anew, as its reading is measured), and generate what a cold start does."""
    items = workloads.select(workloads.builtin(), limit=1)[:3]
    modes = ["plain", "draft:2", "draft:4", "lookup"]
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        texts, read, lengths = {}, {}, [len(it.tokens(e)) for it in items]
        for warm in (False, True):
            session = benchmark.Session(e, modes, [it.category for it in items], 12, warm_target=warm)
            for i, it in enumerate(items):
                for mode, (r, _, _) in session.measure(it, 0, i).items():
                    texts[warm, i, mode] = r.tokens
                    read[warm, i, mode] = r.stats.n_prompt_evaluated
    for i in range(len(items)):
        first = [*modes[i:], *modes[:i]][0]  # (the modes' order turns with each item)
        assert all(read[False, i, m] == lengths[i] for m in modes)
        assert read[True, i, first] > 1 and all(read[True, i, m] == 1 for m in modes if m != first)
        assert all(texts[True, i, m] == texts[False, i, m] for m in modes)


def test_ctrl_c_keeps_what_bench_measured(tiny_pair):
    def stop(done, total, line):
        if done == 2:
            raise KeyboardInterrupt

    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=4096, n_threads=2, draft_max=4) as e:
        items = workloads.select(workloads.builtin(), limit=1)
        rep = benchmark.run(e, ["plain", "draft:2"], items, 6, progress=stop)
        assert rep.interrupted and rep.rows()["draft:2"]["overall"]["prompts"] == 2  # the two finished items

        class Interrupted(workloads.Item):
            def tokens(self, engine):
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):  # before any item finished there is nothing to keep
            benchmark.run(e, ["plain"], [Interrupted("chat", "hi")], 6)


def test_bench_interrupted_shows_and_saves_what_it_measured(tiny_pair, tmp_path):
    import signal
    import time

    out = tmp_path / "b.json"
    p = subprocess.Popen([sys.executable, "-m", "edgespec", "bench", "-m", tiny_pair[0], "-n", "48", "--json", out,
                          "--threads", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = ""
    deadline = time.time() + 120
    while "[2/" not in err and time.time() < deadline:  # two prompts measured
        err += p.stderr.readline()
    p.send_signal(signal.SIGINT)
    stdout, rest = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted" in (err + rest).splitlines()[-1]
    assert "interrupted: the figures cover" in stdout and "speedup over plain" in stdout
    data = json.loads(out.read_text())
    assert data["interrupted"] and data["rows"]["plain"]["overall"]["prompts"] >= 2


def test_tune_says_when_the_machine_s_speed_moved_during_its_run(capsys):
    from edgespec.measure_cli import _print_tuned

    # plain's steps on the sample against the curve's one-row decode: alike in a run alone, apart where the machine
    # was busy with something else for part of it (one run here: 206 ms a token against 84)
    assert autotune.unsteady({1: 0.084}, 0.0845) == "" and autotune.unsteady({1: 0.078}, 0.0952) == ""
    note = autotune.unsteady({1: 0.084}, 0.206)
    assert note.startswith("plain decoding's steps took 206.0 ms on the sample, one verify row 84.0 ms")
    assert autotune.unsteady({1: 0.084}, 0.050) and not autotune.unsteady({}, 0.2)
    assert autotune.unsteady({1: 0.0001}, 0.0002) == ""  # (a tiny model's step: fixed costs beside the decode)
    row = {"prompts": 1, "ms_per_token": 206.0, "acceptance_by_position": []}
    _print_tuned(autotune.Tuned({1: 0.084}, {"plain": 0.206}, "plain", {"plain": {"overall": row}}, unsteady=note))
    assert f"note: {note}\n" in capsys.readouterr().out
