"""Constrained and penalised output under speculation: at temperature 0 the same tokens as constrained plain decoding
(every proposer, drafts forced to be wrong, penalties on), sampled output following the masked, penalised target
distribution (a pure simulation at 1e5 draws with a wrong-mask mutation that must fail, and the engine itself),
schema-valid JSON, and one-line errors for bad grammars before anything is decoded."""
import dataclasses
import json

import numpy as np
import pytest

import edgespec
from edgespec import Constraint, SamplingConfig
from edgespec.guide import Guide
from edgespec.proposers import Proposal
from edgespec.sampling import probabilities, sample
from edgespec.verify import verify_sampled
from conftest import PROMPTS
from stats_util import assert_follows, chi2_critical, chi2_stat, in_processes

DIGITS = Constraint.gbnf('root ::= [0-9]+ ("," [0-9]+)*')
SCHEMA = Constraint.json_schema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                                  "age": {"type": "integer"}},
                                 "required": ["name", "age"], "additionalProperties": False})
PENALTIES = dict(repeat_penalty=1.3, repeat_last_n=16, presence_penalty=0.4, frequency_penalty=0.2,
                 logit_bias=((ord("e"), 1.5),))  # the tiny vocabulary's token ids are byte values


@pytest.fixture(scope="module")
def plain(engine):
    """Constrained plain decoding, the reference."""
    def run(prompt, constraint, sampling=edgespec.GREEDY, max_tokens=40):
        return engine.generate(prompt, max_tokens=max_tokens, sampling=sampling, constraint=constraint,
                               speculative=False)
    return run


class Contrarian:
    """A proposer that drafts what the grammar allows but the target would not pick: every rollback path runs."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)

    def begin(self, seq):
        pass

    def propose(self, seq, k, sampling, rng, guide=None):
        tokens = []
        try:
            for _ in range(k):
                allowed = np.ones(guide.n_vocab, bool) if guide is None or guide.grammar is None else \
                    guide.grammar.mask().copy()
                allowed[[t for t in range(guide.n_vocab if guide else 0) if guide.is_eog(t)]] = False
                if not allowed.any():
                    break
                tokens.append(int(self.rng.choice(np.flatnonzero(allowed))))
                if guide is not None:
                    guide.push(tokens[-1])
        finally:
            if guide is not None:
                guide.pop(len(tokens))
        return Proposal(tokens, None, ["draft"] * len(tokens))

    def accepted(self, n):
        pass

    def llama_seconds(self):
        return 0.0

    def close(self):
        pass


@pytest.mark.parametrize("constraint", [DIGITS, SCHEMA, Constraint.json_object(), Constraint("regex", "[a-e ]{3,30}")],
                         ids=["gbnf", "schema", "json", "regex"])
def test_constrained_speculation_equals_constrained_plain_decoding(engine, plain, constraint):
    for p in PROMPTS[:6]:
        ref = plain(p, constraint)
        assert ref.tokens, p
        for kw in ({}, {"proposer": Contrarian()}, {"draft_max": 1}):
            got = engine.generate(p, max_tokens=40, constraint=constraint, **kw)
            assert got.tokens == ref.tokens, (p, kw)
    assert got.stats.n_drafted > 0


def test_penalties_under_speculation_equal_penalties_in_plain_decoding(engine, plain):
    sampling = SamplingConfig(temperature=0.0, **PENALTIES)
    changed = 0
    for p in PROMPTS[:6]:
        ref = plain(p, None, sampling)
        changed += ref.tokens != plain(p, None).tokens
        for constraint in (None, DIGITS):
            want = ref if constraint is None else plain(p, constraint, sampling)
            for kw in ({}, {"proposer": Contrarian(1)}):
                got = engine.generate(p, max_tokens=40, sampling=sampling, constraint=constraint, **kw)
                assert got.tokens == want.tokens, (p, constraint, kw)
    assert changed >= 3  # the penalties do change what is written


def test_json_outputs_parse_and_validate(engine):
    jsonschema = pytest.importorskip("jsonschema")
    schemas = [
        # bounded (no free keys, short strings, small numbers): the tiny model writes noise, so only the schema
        # can bring each output to its end within max_tokens
        {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"],
         "additionalProperties": False},
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                                   "maxItems": 3}}, "required": ["tags"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"enum": ["cat", "dog", "bird"]}}, "required": ["kind"],
         "additionalProperties": False},
        {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 999}, "minItems": 1, "maxItems": 4},
    ]
    for schema in schemas:
        for p in PROMPTS[:2]:
            for speculative in (True, False):
                r = engine.generate(p, max_tokens=120, constraint=Constraint.json_schema(schema),
                                    speculative=speculative)
                assert r.finish_reason == "stop", (schema, r.text)
                jsonschema.validate(json.loads(r.text), schema)


def test_forced_tokens_are_free_drafts(engine):
    schema = Constraint.json_schema({"type": "object", "properties": {"alpha_beta_gamma": {"type": "integer"}},
                                     "required": ["alpha_beta_gamma"], "additionalProperties": False})
    r = engine.generate("Give the value:", max_tokens=40, constraint=schema)
    assert r.stats.to_dict()["accepted_by_source"].get("grammar", 0) >= 10  # the key, spelled by the grammar


@pytest.mark.parametrize("constraint, message", [
    (Constraint.gbnf("root ::= missing"), "invalid grammar"),
    (Constraint("json_schema", "{not json"), "not valid JSON"),
    (Constraint("regex", "[a-"), "invalid regular expression"),
])
def test_bad_constraints_are_one_line_errors_before_decoding(engine, constraint, message):
    calls = engine.target.llama_s
    with pytest.raises(edgespec.InvalidArgument, match=message) as e:
        engine.generate("hi", constraint=constraint)
    assert "\n" not in str(e.value) and engine.target.llama_s == calls


# -- the distribution, sampled -----------------------------------------------------------------------------------

class ToyGrammar:
    """A grammar over 6 tokens: token 5 never, and no token twice in a row."""

    n_vocab = 6

    def __init__(self, last):
        self.stack = [last]

    def mask(self):
        m = np.ones(6, bool)
        m[5] = False
        if self.stack[-1] is not None:
            m[self.stack[-1]] = False
        return m

    def push(self, t):
        assert self.mask()[t]
        self.stack.append(t)

    def pop(self, n):
        del self.stack[len(self.stack) - n:]

    def forced(self):
        return []

    def allowed_prefix(self, tokens):
        return len(tokens)

    @property
    def finished(self):
        return False


TARGET = np.random.default_rng(1).normal(0, 1.2, (6, 6))  # logits by the previous token
DRAFT = TARGET + np.random.default_rng(2).normal(0, 1.0, (6, 6))
CFG = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.5, repeat_last_n=3,
                     presence_penalty=0.3, frequency_penalty=0.4, logit_bias=((2, 0.8),))


def exact_two(guide):
    p1 = probabilities(guide.shape(TARGET[guide.text[-1]]), CFG)
    joint = np.zeros((6, 6))
    for a in np.flatnonzero(p1):
        guide.push(int(a))
        joint[a] = p1[a] * probabilities(guide.shape(TARGET[a]), CFG)
        guide.pop(1)
    return joint


def speculate_two(guide, rng, k=3):
    """Rounds of: draft k under the guide, verify all rows shaped by their history, accept; the first two tokens."""
    out = []
    while len(out) < 2:
        drafts, qs = [], []
        for _ in range(k):
            q = probabilities(guide.shape(DRAFT[guide.text[-1]]), CFG)
            drafts.append(sample(q, rng))
            qs.append(q)
            guide.push(drafts[-1])
        guide.pop(k)
        history = [guide.text[-1]] + drafts
        rows = guide.rows(np.stack([TARGET[t] for t in history]), drafts)
        p = np.stack([probabilities(r, CFG) for r in rows])
        n, nxt = verify_sampled(p, qs, drafts, rng)
        for t in drafts[:n] + [nxt]:
            guide.push(t)
            out.append(t)
    return out[:2]


class NoHistoryGuide(Guide):
    """The mutation: every verify row shaped as the first (the drafts' own history ignored)."""

    def rows(self, logits, proposal):
        return np.stack([self.shape(row) for row in logits])


def count_two(guide_class, draws, seed):
    """The first two tokens' counts over `draws` runs of speculate_two; None where the guide drew a token the
    grammar forbids (the mutation at its most wrong)."""
    start = [0, 1, 0]
    rng = np.random.default_rng(seed)
    counts = np.zeros((6, 6))
    for _ in range(draws):
        try:
            a, b = speculate_two(guide_class(CFG, ToyGrammar(start[-1]), start, 6), rng)
        except AssertionError:
            return None
        counts[a, b] += 1
    return counts


@pytest.mark.parametrize("guide_class, follows, draws", [(Guide, True, 100_000), (NoHistoryGuide, False, 20_000)])
def test_speculation_keeps_the_masked_penalised_distribution(guide_class, follows, draws):
    want = exact_two(Guide(CFG, ToyGrammar(0), [0, 1, 0], 6))
    parts = 2 if follows else 1  # (pure Python at about a millisecond a draw; the mutation fails within a few)
    counts = in_processes(count_two, [(guide_class, draws // parts, seed) for seed in range(parts)])
    if any(c is None for c in counts):
        assert not follows
        return
    stat, df = chi2_stat(sum(counts).ravel(), want.ravel())
    assert (stat < chi2_critical(df)) == follows, (stat, df)


def test_engine_samples_the_masked_penalised_distribution(engine):
    from stats_util import exact_first_two_guided

    cfg = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, **PENALTIES)
    constraint = Constraint("regex", "[abcde]{2,8}")
    prompt = engine.tokenize("the cat sat on the")
    joint = exact_first_two_guided(engine, prompt, cfg, constraint)
    outcomes = list(joint)
    counts = np.zeros(len(outcomes))
    for seed in range(3000):
        toks = engine.generate(prompt, max_tokens=6, draft_max=4, constraint=constraint,
                               sampling=dataclasses.replace(cfg, seed=seed)).tokens[:2]
        counts[outcomes.index(tuple(toks))] += 1
    assert_follows(counts, np.array([joint[o] for o in outcomes]))


# -- real models ----------------------------------------------------------------------------------------------------

EXTRACT = [
    ("Extract the person: Ada Lovelace, born 1815 in London, mathematician.",
     {"type": "object", "properties": {"name": {"type": "string"}, "born": {"type": "integer"},
                                       "city": {"type": "string"}}, "required": ["name", "born", "city"],
      "additionalProperties": False}),
    ("List three primary colours as JSON.",
     {"type": "object", "properties": {"colours": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
      "required": ["colours"], "additionalProperties": False}),
    ("Is the sky green? Answer as JSON with a boolean and a reason.",
     {"type": "object", "properties": {"answer": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 80}},
      "required": ["answer", "reason"], "additionalProperties": False}),
    ("Classify the sentiment of: 'I loved this film.'",
     {"type": "object", "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]},
                                       "confidence": {"type": "number"}},
      "required": ["sentiment", "confidence"], "additionalProperties": False}),
]


def _constrained_identity(target, draft, cases, max_tokens=80):
    """Constrained speculative output equals constrained plain output; every finished output validates."""
    jsonschema = pytest.importorskip("jsonschema")
    with edgespec.Engine.load(target, draft=draft, lookup=True, n_ctx=2048) as e:
        grammar_tokens = 0
        for prompt, schema in cases:
            tokens = e.tokenize(prompt, chat_format=True)
            c = Constraint.json_schema(schema)
            plain = e.generate(tokens, max_tokens=max_tokens, constraint=c, speculative=False)
            for kw in ({}, {"adaptive": False, "draft_max": 4}):
                spec = e.generate(tokens, max_tokens=max_tokens, constraint=c, **kw)
                assert spec.tokens == plain.tokens, (prompt, kw)
                grammar_tokens += spec.stats.to_dict()["accepted_by_source"].get("grammar", 0)
            if plain.finish_reason == "stop":
                jsonschema.validate(json.loads(plain.text), schema)
        assert grammar_tokens > 0


@pytest.mark.realmodel
def test_smollm_f16_constrained_speculation_equals_constrained_plain(smollm_f16):
    from edgespec import default_model

    _constrained_identity(smollm_f16, default_model.path(), EXTRACT)


@pytest.mark.slow
def test_qwen_f16_constrained_speculation_equals_constrained_plain():
    from test_real_models import qwen_pair

    target, draft = qwen_pair("1.5b-instruct-f16")
    _constrained_identity(target, draft, EXTRACT, max_tokens=60)
