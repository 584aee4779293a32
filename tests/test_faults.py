"""Faults injected at each phase of a round (after the draft, inside the target's verify, before and after the
rollback, inside the draft model's decode): the failed generation raises, and the next one on the same engine
equals a fresh engine's, token for token, greedy and sampled."""
import pytest

import edgespec
from edgespec import SamplingConfig
from edgespec.backend import ll

PROMPT = "Once upon a time"
SAMPLED = SamplingConfig(temperature=0.9, top_k=20, seed=11)


class Boom(RuntimeError):
    pass


def load(tiny_pair, **kw):
    return edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=512, n_threads=2, draft_max=4,
                                adaptive=False, **kw)


@pytest.fixture(scope="module")
def reference(tiny_pair):
    with load(tiny_pair) as fresh:
        greedy = fresh.generate(PROMPT, max_tokens=40).tokens
        # the next turn of a chat: the text the failed generation was writing, extended (stale cache cells that
        # a fault left behind would be reused here)
        continued = fresh.tokenize(PROMPT) + greedy[:25]
        return {"greedy": greedy, "continued": continued,
                "sampled": fresh.generate(PROMPT, max_tokens=40, sampling=SAMPLED).tokens,
                "after continued": fresh.generate(continued, max_tokens=30).tokens,
                "other": fresh.generate("the cat sat on the", max_tokens=30).tokens}


def assert_as_good_as_new(e, reference):
    assert e.generate(reference["continued"], max_tokens=30).tokens == reference["after continued"]
    assert e.generate(PROMPT, max_tokens=40).tokens == reference["greedy"]
    assert e.generate(PROMPT, max_tokens=40, sampling=SAMPLED).tokens == reference["sampled"]
    assert e.generate("the cat sat on the", max_tokens=30).tokens == reference["other"]


def after_nth_call(n, fn, exc, before=False):
    """fn, except that its n-th call raises exc (before or after doing its work)."""
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n and before:
            raise exc
        out = fn(*args, **kwargs)
        if calls["n"] == n:
            raise exc
        return out

    return wrapped


PHASES = {
    "after the draft": lambda e, exc: ("proposer", e.proposer, "propose", after_nth_call(3, e.proposer.propose, exc)),
    "during the draft model's decode": lambda e, exc: ("draft ctx", e.proposer.ctx, "decode",
                                                       after_nth_call(5, e.proposer.ctx.decode, exc)),
    "before the rollback": lambda e, exc: ("target", e.target, "truncate",
                                           after_nth_call(3, e.target.truncate, exc, before=True)),
    "after the rollback": lambda e, exc: ("target", e.target, "truncate", after_nth_call(3, e.target.truncate, exc)),
}


@pytest.mark.parametrize("exc", [Boom("injected"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
@pytest.mark.parametrize("phase", list(PHASES))
def test_a_fault_in_a_round_leaves_the_engine_as_good_as_new(tiny_pair, reference, monkeypatch, phase, exc):
    with load(tiny_pair) as e:
        e.generate("the cat sat on the", max_tokens=10)  # something in both caches already
        _, owner, name, faulty = PHASES[phase](e, exc)
        monkeypatch.setattr(owner, name, faulty)
        with pytest.raises(type(exc)):
            e.generate(PROMPT, max_tokens=40)
        monkeypatch.undo()
        assert_as_good_as_new(e, reference)


@pytest.mark.parametrize("exc", [Boom("injected"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_fault_inside_the_targets_verify_call(tiny_pair, reference, monkeypatch, exc):
    """The C decode ran (the cache grew) and then the call failed, as when Ctrl-C lands right after it."""
    with load(tiny_pair) as e:
        e.generate("the cat sat on the", max_tokens=10)
        real = ll.llama_decode
        target_ptr = e.target._ptr
        calls = {"n": 0}

        def decode(ctx, batch):
            rc = real(ctx, batch)
            if ctx is target_ptr and batch.n_tokens > 1:  # a verify of drafted tokens
                calls["n"] += 1
                if calls["n"] == 4:
                    raise exc
            return rc

        monkeypatch.setattr(ll, "llama_decode", decode)
        with pytest.raises(type(exc)):
            e.generate(PROMPT, max_tokens=40)
        monkeypatch.undo()
        assert calls["n"] == 4
        assert_as_good_as_new(e, reference)


def test_a_fault_while_the_caller_reads_the_stream(tiny_pair, reference):
    """The caller's own code fails between two tokens (the generator is closed mid-round): nothing stays held."""
    with load(tiny_pair) as e:
        with pytest.raises(Boom):
            for i, _ in enumerate(e.stream(PROMPT, max_tokens=40)):
                if i == 7:
                    raise Boom("the caller failed")
        assert_as_good_as_new(e, reference)
