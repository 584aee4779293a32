"""The loop on tiny real GGUF models through llama.cpp: lossless at temperature 0 and when sampling."""
import numpy as np
import pytest

import edgespec
from edgespec import SamplingConfig
from edgespec.backend import Context
from edgespec.drafting import parts
from conftest import PROMPTS
from identity import assert_identical_or_near_tie
from stats_util import assert_follows, exact_first_two


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_speculative_equals_plain(engine, k):
    accepted = drafted = 0
    ties = []
    for prompt in PROMPTS:
        tokens = engine.tokenize(prompt)
        plain = engine.generate(tokens, max_tokens=48, speculative=False)
        spec = engine.generate(tokens, max_tokens=48, draft_max=k, adaptive=False)
        tie = assert_identical_or_near_tie(engine.model, tokens, plain.tokens, spec.tokens, k)
        if tie:
            ties.append(tie)
        else:
            assert spec.text == plain.text and spec.finish_reason == plain.finish_reason
        accepted += spec.stats.n_accepted
        drafted += spec.stats.n_drafted
    # The test means something only if drafts were both accepted and rejected (so caches were rolled back).
    assert 0.2 < accepted / drafted < 0.95, accepted / drafted
    assert len(ties) <= 2, ties


def test_plain_decoding_drafts_nothing(engine):
    r = engine.generate("Hello", max_tokens=10, speculative=False)
    assert r.stats.n_rounds == 10 and r.stats.n_drafted == 0 and r.stats.acceptance_rate is None


def test_streamed_tokens_are_the_result(engine):
    events = list(engine.stream("Once upon a time", max_tokens=30, draft_max=4))
    result = events[-1].result
    assert [e.token for e in events[:-1]] == result.tokens
    assert "".join(e.text for e in events) == result.text
    assert any(e.from_draft for e in events[:-1]) and not all(e.from_draft for e in events[:-1])


def test_max_tokens_is_honoured_at_every_offset_in_a_block(engine):
    ref = engine.generate("The quick brown fox", max_tokens=40, speculative=False).tokens
    for k in (3, 8):
        for m in range(0, 21):
            r = engine.generate("The quick brown fox", max_tokens=m, draft_max=k, adaptive=False)
            assert r.tokens == ref[:m] and r.finish_reason == "length", (k, m)


def test_end_of_generation_inside_an_accepted_block_stops_exactly_there(make_pair):
    prompt = "Once upon a time"
    base = edgespec.Engine.load(*make_pair(tiny_eos()), n_ctx=256)
    ref = base.generate(prompt, max_tokens=60, speculative=False).tokens
    base.close()
    inside = 0
    assert len(ref) > 20
    for j in range(4, len(ref)):
        if ref[j] in ref[:j]:
            continue  # the end token must first appear at j
        e = edgespec.Engine.load(*make_pair(ref[j]), n_ctx=256, draft_max=4, adaptive=False)
        spec = e.generate(prompt, max_tokens=60)
        plain = e.generate(prompt, max_tokens=60, speculative=False)
        e.close()
        assert spec.tokens == plain.tokens == ref[:j] and spec.finish_reason == plain.finish_reason == "stop"
        last = spec.stats.rounds[-1]
        inside += last.n_emitted < last.n_accepted  # the end token was an accepted draft, not the round's last
        if inside >= 3:
            break
    assert inside >= 3, "no case put the end-of-generation token inside an accepted block"


def tiny_eos():
    import tiny_models

    return tiny_models.EOT


def test_target_cache_after_many_rollbacks_equals_a_fresh_decode(engine):
    r = engine.generate("def f(x):\n    return", max_tokens=120, draft_max=4, adaptive=False)
    assert r.stats.n_rounds > 20 and 0 < r.stats.n_accepted < r.stats.n_drafted
    held = list(engine.target.tokens)
    probe = 42
    after_rollbacks = engine.target.decode([probe], [0])[0]
    engine.target.truncate(len(held))
    fresh = Context(engine.model, n_ctx=1024)
    fresh.decode(held)
    expected = fresh.decode([probe], [0])[0]
    other = Context(engine.model, n_ctx=1024)
    other.decode(held[:-3] + [7, 7, 7])
    unrelated = other.decode([probe], [0])[0]
    fresh.close(), other.close()
    # The KV cache is F16, so batches of other shapes round a little differently (measured: ~2e-3).
    drift = np.abs(after_rollbacks - expected).max()
    assert drift < 1e-2
    # ... while three wrong tokens among ~130 move the logits far more: the check can tell a wrong cache.
    assert np.abs(unrelated - expected).max() > 10 * drift


def test_sampled_first_two_tokens_follow_the_target_distribution(engine):
    cfg = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)
    prompt = engine.tokenize("the cat sat on the")
    joint = exact_first_two(engine.model, prompt, SamplingConfig(**cfg))
    outcomes = list(joint)
    probs = np.array([joint[o] for o in outcomes])
    n = 3000
    for speculative in (True, False):
        counts = np.zeros(len(outcomes))
        for seed in range(n):
            # max_tokens 6 lets the first round draft all 4: the second token may be an accepted draft at
            # position 2, a residual draw, or the bonus; only the first two tokens are counted.
            toks = engine.generate(prompt, max_tokens=6, draft_max=4, speculative=speculative,
                                   sampling=SamplingConfig(**cfg, seed=seed)).tokens[:2]
            assert tuple(toks) in joint, f"impossible pair {toks}"
            counts[outcomes.index(tuple(toks))] += 1
        assert_follows(counts, probs)


def test_sampled_generation_is_reproducible_under_a_seed(engine):
    cfg = SamplingConfig(temperature=0.9, seed=7)
    a = engine.generate("Hello world", max_tokens=30, sampling=cfg)
    b = engine.generate("Hello world", max_tokens=30, sampling=cfg)
    assert a.tokens == b.tokens


def test_full_context_finishes_with_length(tiny_pair):
    e = edgespec.Engine.load(*tiny_pair, n_ctx=256, draft_max=4)  # llama.cpp pads contexts to 256
    spec = e.generate("Once upon a time", max_tokens=500)
    plain = e.generate("Once upon a time", max_tokens=500, speculative=False)
    n_prompt = len(e.tokenize("Once upon a time"))
    e.close()
    assert spec.finish_reason == plain.finish_reason == "length"
    assert spec.tokens == plain.tokens and len(spec.tokens) == 256 - n_prompt + 1
    with edgespec.Engine.load(*tiny_pair, n_ctx=256, draft_max=4) as e:  # a prompt that fills the context: one token
        prompt = e.tokenize("x" * 256)
        assert len(prompt) == e.target.n_ctx == 256
        r = e.generate(prompt, max_tokens=5)
        assert r.finish_reason == "length" and len(r.tokens) == 1


def test_prompt_longer_than_context_is_a_clear_error(tiny_pair):
    e = edgespec.Engine.load(*tiny_pair, n_ctx=16)
    with pytest.raises(edgespec.ContextOverflowError, match="the prompt is 300 tokens but the context holds 256"):
        e.generate("x" * 300)
    e.close()


def test_stop_string_ends_generation_and_is_not_in_the_text(engine):
    ref = engine.generate("Hello world", max_tokens=40, speculative=False).text
    stop = ref[10:13]
    r = engine.generate("Hello world", max_tokens=40, stop=[stop])
    assert r.finish_reason == "stop" and r.text == ref[: ref.index(stop)]


def test_second_generation_reuses_the_cached_prompt(engine):
    engine.generate("Lorem ipsum dolor sit amet", max_tokens=5)
    r = engine.generate("Lorem ipsum dolor sit amet, consectetur", max_tokens=5)
    assert r.stats.n_prompt_evaluated < r.stats.n_prompt - 20


def test_the_first_token_comes_from_the_prompts_own_read(engine, monkeypatch):
    """The prompt is read whole and its last row is the first token's (one decode fewer before it): a plain
    generation of n tokens makes n decodes, the prompt's included, and its tokens are the greedy ones a fresh cache
    gives; the same prompt again (held whole by the cache) decodes its last token once more and nothing else."""
    calls = []
    decode = type(engine.target).decode
    monkeypatch.setattr(type(engine.target), "decode",
                        lambda self, *a, **k: calls.append(len(a[0])) or decode(self, *a, **k))
    prompt = engine.tokenize("Lorem ipsum dolor sit amet, consectetur adipiscing")
    engine.target.clear()
    r = engine.generate(prompt, max_tokens=4, speculative=False)
    assert calls == [len(prompt), 1, 1, 1] and r.stats.n_prompt_evaluated == len(prompt)
    fresh, text, want = Context(engine.model, 512), list(prompt), []
    try:
        for _ in range(4):  # greedy from a fresh cache: the prompt in one decode, then a token at a time
            new = text[len(fresh.tokens):]
            want.append(int(np.argmax(fresh.decode(new, [len(new) - 1])[0])))
            text.append(want[-1])
    finally:
        fresh.close()
    assert r.tokens == want
    del calls[:]
    again = engine.generate(prompt, max_tokens=4, speculative=False)
    assert again.tokens == want and again.stats.n_prompt_evaluated == 1 and calls == [1, 1, 1, 1]


def test_chat_template_from_metadata(engine):
    text = engine.model.detokenize(engine.tokenize("hi", chat_format=True, system="be brief"))
    # special tokens render as nothing in pieces; the structure shows through the roles
    ids = engine.tokenize("hi", chat_format=True)
    assert ids[0] == engine.model.tokenize("<|im_start|>")[0] and b"assistant" in text


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(edgespec.ModelLoadError, match="model file not found"):
        edgespec.Engine.load(tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")
    with pytest.raises(edgespec.ModelLoadError, match="not a GGUF model file"):
        edgespec.Engine.load(bad)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(edgespec.ModelLoadError, match="llama.cpp could not load"):
        edgespec.Engine.load(truncated)


def test_the_first_token_does_not_wait_for_the_draft_to_read_the_prompt(tiny_pair):
    """The first token comes from a plain round; the draft model reads the prompt (and an adaptive engine times the
    target) after it, so the wait for it is the target's alone. The text is the same as plain decoding's."""
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2) as e:
        prompt = e.tokenize("the cat sat on the")
        plain = e.generate(prompt, max_tokens=20, speculative=False)
        e.proposer.ctx.clear()  # the plain run left the draft untouched; make sure it starts empty
        stream = e.stream(prompt, max_tokens=20)
        next(stream)
        assert e.proposer.ctx.tokens == [] and e.costs_from is None
        rest = list(stream)
        assert len(e.proposer.ctx.tokens) >= len(prompt) and e.costs_from in ("measured", "profile")
        result = rest[-1].result
        assert result.tokens == plain.tokens
        first = result.stats.rounds[0]
        assert first.n_drafted == 0 and first.reason == "first" and result.stats.n_drafted > 0


def test_a_draft_model_that_stood_aside_probes_at_the_next_text_not_by_reading_this_one(tiny_pair):
    """A draft model standing aside since its text began (a fallback carried across texts) would have to read all
    of it before a probe: the probe waits for the start of a text where drafting could pay, where the prompt is read
    anyway."""
    from edgespec.chain_reading import CATCH_UP_LIMIT

    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2) as e:
        prompt = e.tokenize(" ".join(["the cat sat on the mat"] * 8))
        assert len(prompt) > CATCH_UP_LIMIT
        plain = e.generate(prompt, max_tokens=12, speculative=False)
        e.proposer.ctx.clear()
        policy = e.policy(e.proposer)
        policy._failed_probes, policy._plain_left = 1, 3  # a probe due after two plain rounds ...
        plain_s = e.calibrate()[1]
        policy.cost.draft_round_s, policy.cost.draft_s = {1: 1.0, 4: 4.0}, 1.0  # ... of a wait across texts
        for _ in range(2):  # the probe put off; while drafting could not pay at all, from text to text
            r = e.generate(prompt, max_tokens=12)
            assert r.tokens == plain.tokens and r.stats.n_drafted == 0
            assert "probe" not in {x.reason for x in r.stats.rounds} and e.proposer.ctx.tokens == []  # read nothing
        # drafting that could pay (the machine was busy when the draft was timed, say): the next text may change the
        # verdict (the curve set too, so a busy machine's timing of it cannot make this test's case hopeless)
        policy.cost.draft_round_s, policy.cost.draft_s = {1: 0.1 * plain_s, 4: 0.4 * plain_s}, 0.1 * plain_s
        policy.cost.verify_s.update({m: 1.2 * plain_s for m in range(2, 17)})
        r = e.generate(prompt, max_tokens=12)
        assert r.tokens == plain.tokens and r.stats.rounds[1].reason == "probe" and r.stats.rounds[1].n_drafted
        assert len(e.proposer.ctx.tokens) >= len(prompt)


@pytest.mark.realmodel
def test_a_q8_0_kv_cache_keeps_greedy_speculation_the_targets_own(smollm_f16):
    """With both caches in q8_0 (--cache-type-k/-v, half the memory): speculative output, one sequence or a batch
    of them, is plain decoding's with the same cache, or parts at a measured near-tie (SmolLM2 in F16, its Q4_1 file
    drafting)."""
    from edgespec import default_model
    from edgespec.batch import BatchEngine, Request
    from test_batch import serve_all
    from test_real_models import PROMPTS as REAL

    prompts = REAL[:6]
    with edgespec.Engine.load(smollm_f16, draft=default_model.path(), n_ctx=1024, n_threads=2, kv_cache="q8_0",
                              draft_max=4, adaptive=False) as e:
        assert e.model.kv_cache == ("q8_0", "q8_0")
        ties, plains = [], {}
        for prompt in prompts:
            tokens = e.tokenize(prompt, chat_format=True)
            plains[prompt] = e.generate(tokens, max_tokens=40, speculative=False).tokens
            spec = e.generate(tokens, max_tokens=40)
            tie = assert_identical_or_near_tie(e.model, tokens, plains[prompt], spec.tokens, 4)
            ties += [tie] if tie else []
            assert spec.stats.n_accepted
        batch = BatchEngine(str(smollm_f16), str(default_model.path()), parallel=4, n_ctx=1024, n_threads=2,
                            draft_max=4, kv_cache=("q8_0", "q8_0"))
        try:
            reqs = [Request(e.tokenize(p, chat_format=True), max_tokens=40, mode="draft") for p in prompts]
            for p, req, ev in zip(prompts, reqs, serve_all(batch, reqs)):
                got = [x.token for x in ev[:-1]]
                tie = assert_identical_or_near_tie(e.model, req.prompt, plains[p], got, 4)
                ties += [tie] if tie else []
        finally:
            batch.close()
    assert len(ties) <= 2, ties


def test_what_a_token_takes_in_the_kv_cache_is_told(tiny_pair):
    """From the metadata: layers x KV heads x (K + V values) x each value's bytes; `edgespec check` shows it."""
    import subprocess
    import sys

    import tiny_models
    from edgespec.backend import Model

    m = Model(tiny_pair[0], vocab_only=True)
    try:
        head = tiny_models.N_EMBD // tiny_models.N_HEAD
        assert m.kv_shape() == (tiny_models.N_LAYER, tiny_models.N_HEAD_KV, head, head)
        f16 = tiny_models.N_LAYER * tiny_models.N_HEAD_KV * 2 * head * 2
        assert m.kv_bytes_per_token() == m.kv_bytes_per_token(("f16", "f16")) == f16
        assert m.kv_bytes_per_token(("q8_0", "f32")) == round(f16 / 4 * 34 / 32 + f16)
    finally:
        m.close()
    shown = subprocess.run([sys.executable, "-m", "edgespec", "check", str(tiny_pair[0]), str(tiny_pair[1])],
                           capture_output=True, text=True, timeout=60).stdout
    row = next(line for line in shown.splitlines() if line.startswith("KV cache"))
    assert f"{f16 / 1024:.1f} KiB a token (q8_0: {f16 * 17 / 32 / 1024:.1f})" in row


def test_a_kv_cache_type_it_cannot_keep_is_refused_in_words(tiny_pair):
    with pytest.raises(edgespec.InvalidArgument, match="f16, f32, q8_0"):
        edgespec.Engine.load(tiny_pair[0], kv_cache="q4_0")  # (coarser types part from plain at clear margins)
    with pytest.raises(edgespec.InvalidArgument, match="multiple of 32 values; target.gguf's hold 16"):
        edgespec.Engine.load(tiny_pair[0], kv_cache=("f16", "q8_0"))


def test_prompt_progress_follows_the_reading_of_a_long_prompt_and_changes_nothing(engine):
    tokens = engine.tokenize("The quick brown fox jumps over the lazy dog. " * 70)[:900]  # two batches of 512
    calls = []
    plain = engine.generate(tokens, max_tokens=12, speculative=False)
    r = engine.generate(tokens, max_tokens=12, prompt_progress=lambda *a: calls.append(a))
    assert r.tokens == plain.tokens
    engine.target.clear()
    calls.clear()
    r = engine.generate(tokens, max_tokens=12, prompt_progress=lambda *a: calls.append(a))
    assert r.tokens == plain.tokens
    assert calls == [(512, 900, 0), (900, 900, 0)]  # after each llama.cpp call: read so far, of, found cached
    calls.clear()
    longer = tokens + engine.tokenize(" and more")
    engine.generate(longer, max_tokens=4, speculative=False, prompt_progress=lambda *a: calls.append(a))
    kept = calls[0][2]
    assert kept >= 900 and calls == [(len(longer), len(longer), kept)]  # the cached part counted as such
    with pytest.raises(edgespec.InvalidArgument, match="prompt_progress must be a function"):
        engine.generate("hi", prompt_progress=3)


def test_a_prompt_the_draft_cannot_repay_reading_is_left_unread_and_the_text_is_the_same(tiny_pair, monkeypatch):
    """Reading (tuning.DraftLength): where reading a new prompt would cost the draft model more than drafting could
    save over the tokens left, the text goes without it, said once among the fallbacks; the output is the target's
    either way, and a text that can repay it reads again."""
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=1024, n_threads=2, draft_max=4) as e:
        e.generate("Once upon a time", max_tokens=40)  # costs and the reading rate measured
        draft, policy = e.proposer, e.policy(e.proposer)
        assert draft.prompt_read_s and policy.prompt_read_s == draft.prompt_read_s
        # (the tiny draft costs what the target does, so its policy rightly stands aside: made to expect a saving)
        monkeypatch.setattr(policy.cost, "best_k", lambda k: (2, 0.5 * policy.cost.t_verify(1)))
        policy._plain_left = 0
        policy.prompt_read_s = 10.0  # as if each prompt token cost the draft 10 s to read
        prompt = e.tokenize("The quick brown fox jumps over the lazy dog, again and again, said the farmer")
        plain = e.generate(prompt, max_tokens=16, speculative=False)
        r = e.generate(prompt, max_tokens=16)
        assert r.tokens == plain.tokens and r.stats.n_drafted == 0
        assert [f["why"] for f in r.stats.fallbacks if "reading the prompt" in f["why"]]
        assert draft.ctx.common_prefix(prompt) < len(prompt) // 2  # not read
        policy.prompt_read_s = 1e-9
        e.generate(prompt + e.tokenize(" Then"), max_tokens=16)
        assert draft.ctx.common_prefix(prompt) == len(prompt)


@pytest.mark.parametrize("lookup", [False, True])
def test_a_draft_model_reads_an_unrepaid_prompt_again_now_and_then(tiny_pair, monkeypatch, lookup):
    """Reading.read_again through the engine: prompts whose reading drafting is not expected to repay (made-up
    costs: 1% of a plain step saved per token, a prompt token read in 2% of one) but that are cheap to read; a draft
    model alone reads the second of them all the same (then the fifth, ...), in the hybrid (lookup) the fifth
    (after READ_AGAIN_CHAIN without). Output: the target's, token for token."""
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=1024, n_threads=2, draft_max=4,
                              lookup=lookup) as e:
        e.generate("Once upon a time", max_tokens=40)  # costs measured
        draft = parts(e.proposer)[-1]  # (the hybrid's: lookup, then the draft model)
        policy = e.policy(draft)
        monkeypatch.setattr(policy.cost, "best_k", lambda k: (2, 0.99 * policy.cost.t_verify(1)))
        monkeypatch.setattr(policy.outcomes, "optimism", lambda: 1.0)
        monkeypatch.setattr(policy, "hopeless", lambda: False)  # (the tiny draft costs what the target does)
        monkeypatch.setattr(policy, "futile", lambda: False)
        monkeypatch.setattr(type(policy), "prompt_read_s", property(lambda self: 0.02 * self.cost.t_verify(1),
                                                                    lambda self, v: None), raising=False)
        read = []
        for i in range(5):
            prompt = e.tokenize(f"{'ABCDE'[i]}: the quick brown fox jumps over the lazy dog, said the farmer")
            plain = e.generate(prompt, max_tokens=16, speculative=False)
            policy._plain_left = 0
            r = e.generate(prompt, max_tokens=16)
            assert r.tokens == plain.tokens
            read.append(draft.ctx.common_prefix(prompt) == len(prompt))
            assert read[-1] != any("reading the prompt" in f["why"] for f in r.stats.fallbacks)
        assert read == ([False] * 4 + [True] if lookup else [False, True, False, False, True])


def test_a_prompt_left_unread_is_read_once_the_text_runs_on_long_enough_and_the_text_is_the_same(tiny_pair,
                                                                                                  monkeypatch):
    """Reading: a prompt is weighed over the answers' expected length, not max_tokens; where the text runs on past
    it far enough to repay the reading, the draft model reads the prompt and all generated so far then, and drafts
    for the rest. Output: the target's, token for token. Made-up costs: a saving of half a plain step per token, a
    prompt token read in a tenth of one, answers expected to take 2 tokens."""
    with edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=1024, n_threads=2, draft_max=4) as e:
        e.generate("Once upon a time", max_tokens=40)  # costs and the reading rate measured
        draft, policy = e.proposer, e.policy(e.proposer)
        monkeypatch.setattr(policy.cost, "best_k", lambda k: (2, 0.5 * policy.cost.t_verify(1)))
        monkeypatch.setattr(policy.outcomes, "optimism", lambda: 1.0)
        monkeypatch.setattr(policy, "hopeless", lambda: False)  # (the tiny draft costs what the target does)
        monkeypatch.setattr(type(policy), "prompt_read_s", property(lambda self: 0.1 * self.cost.t_verify(1),
                                                                    lambda self, v: None), raising=False)
        monkeypatch.setattr("edgespec.reading.ANSWER_FLOOR", 2)  # (a tiny model's answers are short)
        policy._plain_left, policy.answer_tokens = 0, 2.0
        prompt = e.tokenize("The quick brown fox jumps over the lazy dog, again and again, said the farmer")
        # 64 tokens: from 17 in, the reading repays with a margin that grows to a third by 25 (with 40 the window
        # closed by 22, as the tokens left shrank: a plain step timed 15% slower on a busy machine could miss it)
        plain = e.generate(prompt, max_tokens=64, speculative=False)
        r = e.generate(prompt, max_tokens=64)
        assert r.tokens == plain.tokens
        whys = [f["why"] for f in r.stats.fallbacks]
        assert any("reading the prompt" in w and "unless the text runs on" in w for w in whys)
        assert any("the text ran on" in w and "drafts again" in w for w in whys)  # and that it came back
        # drafting began late (where (68 + made) x 0.1 < made x 0.5 plain steps: 17 tokens in) ...
        assert next(i for i, rec in enumerate(r.stats.rounds) if rec.n_drafted) > 10 and r.stats.n_drafted > 0
        assert draft.ctx.common_prefix(prompt) == len(prompt)  # ... after reading the prompt then
        assert 2.0 < policy.answer_tokens < 64  # and the answer's length was heard
