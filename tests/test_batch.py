"""The multi-sequence engine on the tiny models: every request's output is what the target alone writes (greedy),
or follows the target's distribution (sampled), while other requests share its steps; cancelled requests free
their sequence; a shared prefix is reused."""
import numpy as np
import pytest

import edgespec
from edgespec import SamplingConfig
from edgespec.batch import BatchEngine, Request
from conftest import PROMPTS
from stats_util import assert_follows, exact_first_two


@pytest.fixture(scope="module")
def batch(tiny_pair):
    b = BatchEngine(str(tiny_pair[0]), str(tiny_pair[1]), parallel=4, n_ctx=512, n_threads=2, lookup=True,
                    draft_max=4)
    yield b
    b.close()


@pytest.fixture(scope="module")
def reference(engine):
    return {p: engine.generate(p, max_tokens=40, speculative=False).tokens for p in PROMPTS}


def serve_all(batch, reqs):
    """Submit every request at once (more than the sequences: some wait their turn), step until all are done."""
    events = [[] for _ in reqs]
    for req, ev in zip(reqs, events):
        req.on_event = ev.append
        batch.submit(req)
    while batch.step():
        pass
    assert all(ev and ev[-1].finish_reason for ev in events)
    return events


def test_max_tokens_zero_writes_nothing_beside_requests_that_write(batch, engine, reference):
    """A request for no tokens ends at once (its first step would otherwise write one); the others are unharmed."""
    reqs = [Request(engine.tokenize(p), max_tokens=0 if i % 2 else 40, mode="draft") for i, p in enumerate(PROMPTS)]
    for i, (p, ev) in enumerate(zip(PROMPTS, serve_all(batch, reqs))):
        if i % 2:
            assert [e.token for e in ev] == [None] and ev[-1].finish_reason == "length"
        else:
            assert [e.token for e in ev[:-1]] == reference[p]


@pytest.mark.parametrize("mode", ["off", "draft", "lookup", "hybrid", "auto"])
def test_each_request_gets_the_targets_own_tokens_while_sharing_steps(batch, engine, reference, mode):
    reqs = [Request(engine.tokenize(p), max_tokens=40, mode=mode) for p in PROMPTS]
    events = serve_all(batch, reqs)
    for p, ev in zip(PROMPTS, events):
        assert [e.token for e in ev if e.token is not None] == reference[p], p
        assert "".join(e.text for e in ev) == engine.generate(p, max_tokens=40, speculative=False).text
    if mode in ("draft", "hybrid"):
        assert batch.metrics["drafted_draft"] > 0 and 0 < batch.metrics["accepted_draft"] < batch.metrics["drafted_draft"]


def test_sampled_requests_follow_the_targets_distribution(batch, engine):
    cfg = dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0)
    prompt = engine.tokenize("the cat sat on the")
    joint = exact_first_two(engine.model, prompt, SamplingConfig(**cfg))
    outcomes = list(joint)
    counts = np.zeros(len(outcomes))
    n, per_batch = 2400, 6  # six requests share each step: four in sequences, two waiting
    for start in range(0, n, per_batch):
        reqs = [Request(prompt, max_tokens=6, sampling=SamplingConfig(**cfg, seed=s), mode="draft", draft_max=4)
                for s in range(start, start + per_batch)]
        for ev in serve_all(batch, reqs):
            first = tuple(e.token for e in ev if e.token is not None)[:2]
            assert first in joint
            counts[outcomes.index(first)] += 1
    assert_follows(counts, np.array([joint[o] for o in outcomes]))


def test_logprobs_are_the_targets_and_equal_with_speculation_off(batch, engine):
    prompt = engine.tokenize("Once upon a time")
    spec, = serve_all(batch, [Request(prompt, max_tokens=20, mode="draft", draft_max=4, logprobs=3)])
    off, = serve_all(batch, [Request(prompt, max_tokens=20, mode="off", logprobs=3)])
    a, b = [e for e in spec if e.token is not None], [e for e in off if e.token is not None]
    assert [e.token for e in a] == [e.token for e in b]
    assert any(e.from_draft for e in a)
    np.testing.assert_allclose([e.logprob for e in a], [e.logprob for e in b], atol=1e-3)
    assert all(len(e.top) == 3 and e.top[0][1] >= e.logprob - 1e-9 for e in a)


def test_a_cancelled_request_frees_its_sequence(batch, engine):
    prompt = engine.tokenize("Hello world")
    events = []
    handle = batch.submit(Request(prompt, max_tokens=300, on_event=events.append))
    for _ in range(3):
        batch.step()
    slot = batch._active[0][1].slot
    assert len(batch.target.tokens[slot]) > len(prompt)
    handle.cancel()
    batch.step()
    assert batch.n_active == 0 and batch.metrics["finished_cancelled"] >= 1
    assert batch.target.tokens[slot] == [] and batch.draft.tokens[slot] == []  # its cache cells are free too
    assert not any(e.finish_reason for e in events)  # nobody is told: the client went away


def test_new_prompts_join_the_steps_while_running_sequences_keep_generating(batch, engine):
    """Prompts are decoded inside the steps, up to the batch size per step: a running sequence gets a token every
    step while two long prompts join (one step's budget holds one and a part of the other)."""
    running, long_a, long_b = [], [], []
    batch.submit(Request(engine.tokenize("Hello there"), max_tokens=12, mode="off", on_event=running.append))
    batch.step()
    batch.step()
    # words whose answers are far from ties (top-2 margins over 0.3; "apple" has one of 0.008, and the F16 KV cache
    # rounds a batch of several sequences differently, a near-tie as README's "Lossless" describes)
    prompts = [engine.tokenize(f"{w} " * 200)[:400] for w in ("table", "paper")]
    for prompt, events in zip(prompts, (long_a, long_b)):
        batch.submit(Request(prompt, max_tokens=8, mode="off", on_event=events.append))
    rows_before = batch.metrics["prompt_rows"]
    for step in range(3):
        before = len(running)
        batch.step()
        assert len(running) == before + 1, step  # the running sequence did not wait for the prompts
        if step == 0:
            assert 400 < batch.metrics["prompt_rows"] - rows_before < 800  # one prompt and a part of the other
    while batch.step():
        pass
    evaluated = sum(events[-1].stats.n_prompt_evaluated for events in (long_a, long_b))
    # (a cached first token is kept; each prompt's last token is decoded with its first step, not a prompt row)
    assert batch.metrics["prompt_rows"] - rows_before + 2 == evaluated > 700
    for prompt, events in zip(prompts, (long_a, long_b)):
        assert [e.token for e in events if e.token is not None] == engine.generate(
            prompt, max_tokens=8, speculative=False).tokens


def test_a_shared_prefix_is_not_decoded_again(batch, engine):
    system = "You are a careful assistant who answers in one sentence. " * 3
    first, = serve_all(batch, [Request(engine.tokenize(system + "First question?"), max_tokens=5)])
    second, = serve_all(batch, [Request(engine.tokenize(system + "Second one?"), max_tokens=5)])
    assert second[-1].stats.n_prompt_evaluated < len(engine.tokenize("Second one?")) + 5


def test_bad_requests_are_refused_before_they_queue(batch, engine):
    with pytest.raises(edgespec.InvalidArgument, match="unknown speculative mode"):
        batch.submit(Request(engine.tokenize("hi"), mode="turbo"))
    with pytest.raises(edgespec.ContextOverflowError, match="a sequence holds 512"):
        batch.submit(Request([5] * 600))
    with pytest.raises(edgespec.InvalidArgument, match="not in this model's vocabulary"):
        batch.submit(Request([10 ** 6]))
    assert batch.n_queued == 0


def _identity_through_the_batch(target, draft, prompts, modes, k=4, max_tokens=48, lookup=True):
    """Greedy outputs of requests served together equal the target alone's, or part at a measured near-tie."""
    from identity import assert_identical_or_near_tie

    with edgespec.Engine.load(target, n_ctx=2048) as alone:
        tokens = [alone.tokenize(p, chat_format=True) for p in prompts]
        plain = [alone.generate(t, max_tokens=max_tokens, speculative=False).tokens for t in tokens]
        b = BatchEngine(str(target), str(draft), parallel=4, n_ctx=2048, lookup=lookup, draft_max=k)
        ties, drafted = [], 0
        try:
            for mode in modes:
                events = serve_all(b, [Request(t, max_tokens=max_tokens, mode=mode) for t in tokens])
                for t, ref, ev in zip(tokens, plain, events):
                    got = [e.token for e in ev if e.token is not None]
                    tie = assert_identical_or_near_tie(alone.model, t, ref, got, k)
                    if tie:
                        ties.append(tie)
            drafted = b.metrics["drafted_draft"] + b.metrics["drafted_lookup"]
        finally:
            b.close()
    return ties, drafted


@pytest.mark.realmodel
def test_smollm_requests_served_together_equal_the_target_alone(tmp_path):
    from edgespec import backend, default_model
    from test_real_models import PROMPTS as REAL

    target = default_model.path()
    draft = tmp_path / "draft-q4_0.gguf"
    backend.quantize(target, draft, "Q4_0")
    ties, drafted = _identity_through_the_batch(target, draft, REAL + ["Count from one to twenty.",
                                                                      "Name three rivers in Europe."],
                                                ["draft", "hybrid", "auto"])
    assert drafted > 100 and len(ties) <= 3, ties


@pytest.mark.slow
def test_qwen_requests_served_together_equal_the_target_alone():
    from test_real_models import PROMPTS as REAL, qwen_pair

    target, draft = qwen_pair()
    ties, drafted = _identity_through_the_batch(target, draft, REAL[:4], ["draft"], max_tokens=32)
    assert drafted > 50, drafted
