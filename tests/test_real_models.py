"""Real models. SmolLM2-135M (98 MB, from the package index) runs in CI; the Qwen2.5-Coder pair is `slow`."""
import os
from pathlib import Path

import pytest

import edgespec
from edgespec import backend, default_model
from identity import assert_identical_or_near_tie

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "What is the capital of France? Answer in one sentence.",
    "Summarise in two sentences: The mitochondrion is an organelle found in most eukaryotic cells. It generates "
    "most of the cell's supply of ATP, used as a source of chemical energy.",
    "List three colours of the rainbow.",
    "Explain what a hash map is to a child.",
]


@pytest.fixture(scope="module")
def smollm_pair(tmp_path_factory):
    target = default_model.path()  # fetched from the package index if not cached yet
    draft = tmp_path_factory.mktemp("smollm") / "SmolLM2-135M-Instruct.Q4_0.gguf"
    backend.quantize(target, draft, "Q4_0")  # a real, different model with the same vocabulary
    return target, draft


def run_identity(engine, prompts, k, max_tokens, adaptive=None):
    ties, accepted, drafted = [], 0, 0
    for prompt in prompts:
        tokens = engine.tokenize(prompt, chat_format=True)
        plain = engine.generate(tokens, max_tokens=max_tokens, speculative=False)
        spec = engine.generate(tokens, max_tokens=max_tokens, draft_max=k, adaptive=adaptive)
        tie = assert_identical_or_near_tie(engine.model, tokens, plain.tokens, spec.tokens, k)
        if tie:
            ties.append(f"{prompt[:30]!r}: {tie}")
        accepted += spec.stats.n_accepted
        drafted += spec.stats.n_drafted
    print(f"k={k}: acceptance {accepted / drafted:.2f}, near-ties: {ties or 'none'}")
    return ties, accepted / drafted


@pytest.mark.realmodel
@pytest.mark.parametrize("k", [2, 4, 8])
def test_smollm_speculative_equals_plain_at_temperature_zero(smollm_pair, k):
    with edgespec.Engine.load(*smollm_pair, n_ctx=2048) as engine:
        # exactly k per round: an adaptive engine may (rightly, by timing) draft too little on a 135M target to
        # put rejections and rollbacks to the test
        ties, acceptance = run_identity(engine, PROMPTS, k, max_tokens=64, adaptive=False)
    assert len(ties) < len(PROMPTS) - 2  # at least three prompts identical outright
    assert 0.3 < acceptance < 1.0


@pytest.mark.realmodel
def test_smollm_sampling_runs_and_reports(smollm_pair):
    with edgespec.Engine.load(*smollm_pair, n_ctx=2048) as engine:
        # exactly 4 per round: adaptive, the engine may rightly not draft at all on a 135M target (by timing),
        # and this test is about the sampled path's report
        r = engine.generate(engine.tokenize(PROMPTS[1], chat_format=True), max_tokens=40,
                            sampling=edgespec.SamplingConfig(temperature=0.7, seed=1), draft_max=4, adaptive=False)
    s = r.stats.to_dict()
    assert r.tokens and s["n_drafted"] > 0 and set(s["phase_s"]) == {"draft", "prepare", "verify", "accept"}


@pytest.mark.realmodel
def test_smollm_lookup_does_not_start_an_answer_with_a_copy_of_the_last_one():
    # The embedded default in a conversation: each answer starts after the same header (<|im_start|>assistant\n,
    # four tokens in this vocabulary), which matched every earlier one and proposed the last answer's first tokens.
    history = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "An apple is a fruit."},
               {"role": "user", "content": "Name a vegetable."}]
    with edgespec.Engine.load(default_model.path(), lookup=True, n_ctx=1024, draft_max=4, adaptive=False) as engine:
        tokens = engine.tokenize_chat(history)
        r = engine.generate(tokens, max_tokens=8)
        engine.proposer.control = frozenset()  # as before: blind to the template
        blind = engine.generate(tokens, max_tokens=8)
    assert blind.stats.rounds[0].n_drafted > 0  # the header's match: "An apple is a"
    assert r.stats.rounds[0].n_drafted == 0 and r.tokens == blind.tokens


@pytest.mark.realmodel
def test_smollm_lookup_copies_up_to_the_end_of_the_turn_and_the_text_is_plains(monkeypatch):
    # Answers that repeat what the user wrote: lookup copies it, and its copy ends with the user's turn, nothing of
    # the next header after it; once the first answer has shown the turn's closing "." passing, the closing and the
    # end-of-generation token are offered (an answer may end there). Greedy, the texts are plain decoding's.
    from edgespec.proposers import PromptLookupProposer

    copies, real = [], PromptLookupProposer._copy

    def copy(self, end, k, extra=()):
        tokens = real(self, end, k, extra)
        copies.append(tokens)
        return tokens
    monkeypatch.setattr(PromptLookupProposer, "_copy", copy)
    prompts = ["Repeat exactly, with nothing else: The quick brown fox jumps over the lazy dog.",
               "Repeat exactly, with nothing else: Rain in the morning, sun in the afternoon, wind at night."]
    with edgespec.Engine.load(default_model.path(), lookup=True, n_ctx=1024, draft_max=8, adaptive=False) as engine:
        ties = run_identity(engine, prompts, 8, max_tokens=48, adaptive=False)[0]
        control, ends = engine.proposer.control, engine.proposer.ends
    assert len(ties) < len(prompts)
    assert ends and all(not set(c[:-1]) & control and (not c or c[-1] not in control or c[-1] in ends)
                        for c in copies)
    assert any(c and c[-1] in ends for c in copies)  # a copy that reached the end of the user's turn


@pytest.mark.realmodel
def test_smollm_cannot_draft_for_qwen(smollm_pair):
    qwen = bench_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not qwen.exists():
        pytest.skip(f"{qwen} not present (../shared/models/fetch-bench-models.sh)")
    with pytest.raises(edgespec.PairError, match="cannot draft for target"):
        edgespec.Engine.load(qwen, draft=smollm_pair[0], n_ctx=256)


def bench_dir() -> Path:
    return Path(os.environ.get("EDGESPEC_BENCH_MODELS") or Path.home() / ".cache" / "edgespec-bench")


def qwen_pair(target: str = "1.5b-instruct-q4_k_m") -> tuple[Path, Path]:
    """The Qwen2.5-Coder pair from the benchmark folder (target "1.5b-instruct-f16" for the F16 copy), or a skip."""
    paths = bench_dir() / f"qwen2.5-coder-{target}.gguf", bench_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not present (../shared/models/fetch-bench-models.sh, make-f16-target.py)")
    return paths


@pytest.mark.slow
def test_qwen_coder_pair_speculative_equals_plain():
    target, draft = qwen_pair()
    with edgespec.Engine.load(target, draft=draft, n_ctx=2048) as engine:
        ties, acceptance = run_identity(engine, PROMPTS[:3], 4, max_tokens=48)
    assert acceptance > 0.4


@pytest.mark.slow
def test_qwen_f16_fills_gaps_speculatively_as_plain():
    """Fill in the middle on the F16 pair (its batched and single-row logits agree): the gaps of bench/fim.jsonl,
    greedy, every proposer against the target alone, token for token; and the answers end at the gap's end."""
    import json

    target, draft = qwen_pair("1.5b-instruct-f16")
    gaps = [json.loads(line) for line in (Path(__file__).parent.parent / "bench" / "fim.jsonl").read_text().splitlines()]
    with edgespec.Engine.load(target, draft=draft, lookup=True, n_ctx=2048) as engine:
        ended = 0
        for gap in gaps[:4]:
            tokens = engine.tokenize(gap["prompt"], suffix=gap["suffix"])
            plain = engine.generate(tokens, max_tokens=64, speculative=False)
            for proposer in (None, engine.proposer.draft, engine.proposer.lookup):
                got = engine.generate(tokens, max_tokens=64, proposer=proposer)
                assert got.tokens == plain.tokens, (gap["prompt"][-40:], proposer)
            ended += plain.finish_reason == "stop"
    assert ended >= 2  # a FIM model ends the gap's text itself
