import pytest

import edgespec
from edgespec.pairing import VocabInfo, pair_problem
import tiny_models


def info(name="m", vtype=2, n=1000, add_bos=False, bos=1, add_eos=False, eos=2, texts=None):
    texts = texts or {}
    return VocabInfo(name, vtype, n, add_bos, bos, add_eos, eos, lambda i: texts.get(i, f"t{i}".encode()))


def test_identical_vocabs_pair():
    assert pair_problem(info(), info()) is None


def test_vocab_sizes_within_128_pair():
    assert pair_problem(info(n=1000), info(n=1128)) is None


def test_vocab_sizes_beyond_128_do_not():
    assert "differ by more than 128" in pair_problem(info(n=1000), info(n=1129))


def test_vocab_type_must_match():
    assert "vocab types differ: target BPE, draft SPM" in pair_problem(info(vtype=2), info(vtype=1))


@pytest.mark.parametrize("field", ["add_bos", "bos", "add_eos", "eos"])
def test_bos_eos_handling_must_match(field):
    other = {"add_bos": True, "bos": 7, "add_eos": True, "eos": 8}[field]
    assert "BOS/EOS" in pair_problem(info(), info(**{field: other}))


def test_first_differing_token_is_named_with_both_texts():
    problem = pair_problem(info(), info(texts={42: b"hello", 43: b"x"}))
    assert problem == "token 42 differs: target 't42', draft 'hello'"


def test_ids_below_5_are_not_compared():
    assert pair_problem(info(), info(texts={0: b"<s>", 4: b"<pad>"})) is None


def test_real_models(tiny_dir, tiny_pair):
    renamed = tiny_models.write(tiny_dir / "renamed.gguf", tiny_models.weights(0), rename={100: "zz"})
    with pytest.raises(edgespec.PairError, match=r"token 100 differs: target 'd', draft 'zz'") as e:
        edgespec.Engine.load(tiny_pair[0], draft=renamed, n_ctx=64)
    assert "\n" not in str(e.value)
    edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=64).close()
