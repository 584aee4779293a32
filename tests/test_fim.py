"""Fill in the middle (fim.py): the text before and after a gap framed with the model's FIM tokens, from the
library, `generate --suffix` and the server's `suffix`; lossless under speculation like any other prompt."""
import json
import subprocess
import sys

import pytest

import edgespec
from edgespec.errors import EdgespecError, InvalidArgument
from http_server import Server
from tiny_models import FIM

PRE, SUF, MID = (next(i for i, t in FIM.items() if t == name) for name in
                 ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
GAPS = [("def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"), ("The cat sat on the ", " and watched the birds."),
        ("x = [i for i in ", "]"), ("", "the end"), ("<|fim_middle|> is text here", " <|im_end|> and here")]


@pytest.fixture(scope="module")
def fim_engine(fim_pair):
    e = edgespec.Engine.load(fim_pair[0], draft=fim_pair[1], lookup=True, n_ctx=1024, n_threads=2, draft_max=4,
                             adaptive=False)
    yield e
    e.close()


def test_the_gap_is_framed_prefix_suffix_middle_and_its_texts_stay_text(fim_engine):
    m = fim_engine.model
    for prefix, suffix in GAPS:
        literal = lambda s: m.tokenize(s, add_special=False, parse_special=False)  # noqa: E731
        assert fim_engine.tokenize(prefix, suffix=suffix) == [PRE, *literal(prefix), SUF, *literal(suffix), MID]
    tokens = fim_engine.tokenize("a <|fim_middle|> b", suffix="<|fim_suffix|>")
    assert tokens.count(MID) == 1 and tokens.count(SUF) == 1  # only the frame's own


def test_a_model_without_fim_tokens_or_a_chat_prompt_is_refused(engine, fim_engine):
    with pytest.raises(EdgespecError, match="no fill-in-the-middle tokens"):
        engine.tokenize("def f(", suffix="):")
    with pytest.raises(InvalidArgument, match="suffix"):
        fim_engine.tokenize("a", suffix="b", chat_format=True)
    with pytest.raises(InvalidArgument, match="must be text"):
        fim_engine.tokenize("a", suffix=b"b")


@pytest.mark.parametrize("mode", ["draft", "lookup", "hybrid"])
def test_filling_a_gap_under_speculation_equals_the_target_alone(fim_engine, mode):
    proposer = {"draft": fim_engine.proposer.draft, "lookup": fim_engine.proposer.lookup}.get(mode)
    for prefix, suffix in GAPS:
        tokens = fim_engine.tokenize(prefix, suffix=suffix)
        ref = fim_engine.generate(tokens, max_tokens=40, speculative=False)
        got = fim_engine.generate(tokens, max_tokens=40, proposer=proposer)
        assert got.tokens == ref.tokens and got.text == ref.text, (prefix, suffix)


def test_generate_suffix(fim_pair, fim_engine, tiny_pair):
    prefix, suffix = GAPS[0]
    ref = fim_engine.generate(fim_engine.tokenize(prefix, suffix=suffix), max_tokens=20, speculative=False)
    run = lambda *a: subprocess.run([sys.executable, "-m", "edgespec", "generate", *map(str, a)],  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    r = run("-m", fim_pair[0], "-d", fim_pair[1], "--lookup", "-t", "0", "-n", "20", "-p", prefix, "--suffix", suffix)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref.text + "\n"
    r = run("-m", tiny_pair[0], "-t", "0", "-n", "4", "-p", prefix, "--suffix", suffix)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("edgespec: error: target.gguf has no "
                                                                               "fill-in-the-middle tokens")
    r = run("-m", fim_pair[0], "-n", "4", "-p", prefix, "--suffix", suffix, "--chat")
    assert r.returncode == 2 and "--suffix" in r.stderr


def test_the_servers_suffix_fills_the_gap(fim_pair, fim_engine):
    s = Server("-m", fim_pair[0], "-d", fim_pair[1], "--lookup", "-c", "1024", "--parallel", "2", "-k", "4",
               "--threads", "2")
    try:
        client = s.client()
        for prefix, suffix in GAPS:
            ref = fim_engine.generate(fim_engine.tokenize(prefix, suffix=suffix), max_tokens=30, speculative=False)
            for mode in ("off", "hybrid"):
                r = client.completions.create(model="x", prompt=prefix, suffix=suffix, max_tokens=30, temperature=0,
                                              extra_body={"speculative": {"mode": mode, "draft_max": 4}})
                assert r.choices[0].text == ref.text and r.usage.completion_tokens == len(ref.tokens), (prefix, mode)
            chunks = client.completions.create(model="x", prompt=prefix, suffix=suffix, max_tokens=30, temperature=0,
                                               stream=True)
            assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
        plain = fim_engine.generate("abc", max_tokens=10, speculative=False).text
        r = client.completions.create(model="x", prompt="abc", suffix="", max_tokens=10, temperature=0)
        assert r.choices[0].text == plain  # an empty suffix is none (OpenAI's API, Ollama)
        for body, param in (({"suffix": 5}, "suffix"), ({"suffix": "x", "echo": True}, "echo"),
                            ({"suffix": "x", "prompt": [1, 2]}, "prompt")):
            r = s.post("/v1/completions", {"prompt": "abc", "max_tokens": 2, **body})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    finally:
        assert s.stop() == 0


def test_a_bench_workload_may_fill_gaps(fim_pair, fim_engine, tmp_path):
    from edgespec import benchmark

    path, out = tmp_path / "fim.jsonl", tmp_path / "fim.json"
    path.write_text("".join(json.dumps({"prompt": p, "suffix": s, "category": "fim"}) + "\n" for p, s in GAPS[:3]))
    items = benchmark.read_jsonl(path)
    assert items[0].tokens(fim_engine) == fim_engine.tokenize(GAPS[0][0], suffix=GAPS[0][1])
    r = subprocess.run([sys.executable, "-m", "edgespec", "bench", "-m", str(fim_pair[0]), "-d", str(fim_pair[1]),
                        "--workload", str(path), "-n", "12", "--modes", "draft:3,lookup,hybrid", "--json", str(out),
                        "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for mode, by_cat in json.loads(out.read_text())["rows"].items():
        assert by_cat["overall"]["same_as_plain"] == 3, mode  # greedy: every mode writes plain's tokens
    for bad, says in [({"prompt": "a", "suffix": 3}, "must be text"), ({"suffix": "b"}, "goes with a")]:
        path.write_text(json.dumps(bad) + "\n")
        with pytest.raises(InvalidArgument, match=says):
            benchmark.read_jsonl(path)
