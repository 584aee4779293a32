"""Fill in the middle (fim.py): the text before and after a gap framed with the model's FIM tokens, from the
library, `generate --suffix` and the server's `suffix`; lossless under speculation like any other prompt."""
import dataclasses
import json
import math
import re
import subprocess
import sys

import httpx
import pytest

import edgespec
from edgespec import fim
from edgespec.errors import ContextOverflowError, EdgespecError, InvalidArgument
from http_server import Server
from tiny_models import FIM

PRE, SUF, MID, REP, SEP = (next(i for i, t in FIM.items() if t == name) for name in
                           ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"))
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


def test_infill_puts_other_files_first_and_cuts_to_the_budget_as_llama_server_does(fim_engine):
    m = fim_engine.model
    text = lambda s: m.tokenize(s, add_special=False, parse_special=False)  # noqa: E731
    tokens, cut = fim.infill(m, "def f(", "):\n", middle="x, y", extra=[("a.py", "A = 1\n"), ("", "B")])
    assert not cut and tokens == [REP, *text("myproject\n"), SEP, *text("a.py\n"), *text("A = 1\n"), SEP,
                                  *text("tmp\n"), *text("B"), SEP, *text("filename\n"),
                                  PRE, *text("def f("), *text("x, y"), SUF, *text("):\n"), MID]
    prefix, suffix = "p" * 300, "s" * 300  # one token a character in the tiny vocabulary
    tokens, cut = fim.infill(m, prefix, suffix, extra=[("a.py", "A" * 50)], budget=103)
    assert cut and len(tokens) == 103 and tokens[0] == PRE  # the other file goes first
    assert tokens[1:76] == text("p" * 75) and tokens[77:102] == text("s" * 25)  # prefix's end, suffix's start, 3:1
    tokens, cut = fim.infill(m, "p" * 10, suffix, extra=[("a.py", "A" * 50)], budget=103)
    assert cut and tokens[1:11] == text("p" * 10) and tokens[12:102] == text("s" * 90)  # a short prefix: all of it
    tokens, cut = fim.infill(m, "p" * 10, "s" * 10, extra=[("a.py", "A" * 50)], budget=50)
    assert cut and len(tokens) == 50 and tokens[-23:] == [PRE, *text("p" * 10), SUF, *text("s" * 10), MID]
    assert tokens[:-23] == (text("A" * 50) + [SEP, *text("filename\n")])[-27:]  # the end nearest the frame
    with pytest.raises(ContextOverflowError):
        fim.infill(m, "", "", middle="m" * 60, budget=50)
    assert fim.tokens(m, "a", "b") == [PRE, *text("a"), SUF, *text("b"), MID]  # no repository header
    tokens, _ = fim.infill(m, "a", "b", middle="<|fim_suffix|>",
                           extra=[("<|file_sep|>", "<|fim_middle|><|repo_name|>")])
    assert [tokens.count(t) for t in (PRE, SUF, MID, REP, SEP)] == [1, 1, 1, 1, 2]  # other files' text is text too


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
        _llama_servers_infill(s, fim_engine)
    finally:
        assert s.stop() == 0


def _llama_servers_infill(s, fim_engine):
    """/infill as llama.vscode and llama.vim call it: llama-server's fields in, its answer's shape out."""
    extra = [{"filename": "a.py", "text": "A = 1\n"}]
    for (prefix, suffix), mode in zip(GAPS, ["off", "hybrid", "draft", "lookup", "hybrid"]):
        tokens, _ = fim.infill(fim_engine.model, prefix, suffix, "x", [("a.py", "A = 1\n")])
        ref = fim_engine.generate(tokens, max_tokens=24, speculative=False)
        body = {"input_prefix": prefix, "input_suffix": suffix, "prompt": "x", "input_extra": extra, "n_predict": 24,
                "temperature": 0, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 4,
                "speculative": {"mode": mode, "draft_max": 4}}
        r = s.post("/infill", body).json()
        assert r["content"] == ref.text and r["stop"] is True and r["tokens_predicted"] == len(ref.tokens), prefix
        assert r["tokens_evaluated"] == len(tokens) and not r["truncated"] and r["timings"]["predicted_n"] > 0
        assert r["stop_type"] == ("limit" if ref.finish_reason == "length" else "eos")
        with httpx.stream("POST", s.url + "/infill", json={**body, "stream": True}, timeout=60) as resp:
            events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
        assert "".join(e["content"] for e in events) == ref.text and events[-1]["stop"] is True
        assert not any(e["stop"] for e in events[:-1]) and events[-1]["timings"]  # (and no [DONE])
    tokens, _ = fim.infill(fim_engine.model, "ab", "cd")
    ref = fim_engine.generate(tokens, max_tokens=30, speculative=False).text
    word = ref[len(ref) // 2:][:2]
    r = s.post("/infill", {"input_prefix": "ab", "input_suffix": "cd", "n_predict": 30, "temperature": 0,
                           "stop": ["\x00never", word]}).json()
    assert (r["stop_type"], r["stopping_word"], r["content"]) == ("word", word, ref[:ref.index(word)])
    # lines, many (a newline's byte token favoured, no end): a time limit of 1 ms ends the answer at the first line
    # end after it, long before n_predict
    lines = dataclasses.replace(edgespec.GREEDY, logit_bias=((ord("\n"), 4.0),
                                                             *((t, -math.inf) for t in fim_engine.model.eog_ids)))
    ref = fim_engine.generate(tokens, max_tokens=200, sampling=lines, speculative=False)
    assert len(ref.tokens) == 200 and "\n" in ref.text[:len(ref.text) // 4]
    r = s.post("/infill", {"input_prefix": "ab", "input_suffix": "cd", "n_predict": 200, "temperature": 0,
                           "logit_bias": {str(ord("\n")): 4.0}, "ignore_eos": True, "t_max_predict_ms": 1}).json()
    assert "\n" in r["content"] and ref.text.startswith(r["content"]) and r["stop_type"] == "limit", (r, ref.text)
    assert r["tokens_predicted"] < len(ref.tokens)  # a line has ended and the time is up: no more lines
    for n_indent in (1, 2):  # a later line with fewer blanks before its first character (or none) ends the answer
        cut = re.search(r"\n[ \t]{0,%d}(?=[^ \t])" % (n_indent - 1), ref.text).end()
        bias = {str(ord("\n")): 4.0} if n_indent == 1 else [[ord("\n"), 4.0], [ord("\x7f"), False]]  # (both forms)
        body = {"input_prefix": "ab", "input_suffix": "cd", "n_predict": 200, "temperature": 0, "ignore_eos": True,
                "logit_bias": bias, "n_indent": n_indent}
        r = s.post("/infill", body).json()
        assert (r["content"], r["stop_type"]) == (ref.text[:cut], "limit"), n_indent
        with httpx.stream("POST", s.url + "/infill", json={**body, "stream": True}, timeout=60) as resp:
            events = [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: ")]
        assert "".join(e["content"] for e in events) == ref.text[:cut]  # nothing shown past the cut
    r = s.post("/infill", {"input_prefix": "ab", "input_suffix": "cd", "n_predict": 4, "ignore_eos": True,
                           "response_fields": ["content", "timings/predicted_n", "no/such"]}).json()  # (sampled: an
    # end-of-text token could come first, and once in a few hundred runs did)
    assert set(r) == {"content", "timings/predicted_n"} and r["timings/predicted_n"] == 4
    r = s.post("/infill", {"input_prefix": "p" * 3000, "input_suffix": "s" * 3000, "n_predict": 16,
                           "ignore_eos": True}).json()
    assert r["truncated"] and r["tokens_evaluated"] <= 1024 - 16 and r["tokens_predicted"] == 16  # fits the context
    for body, param in (({"input_prefix": 5}, "input_prefix"), ({"input_suffix": False}, "input_suffix"),
                        ({"input_extra": [{"text": 1}]}, "input_extra"),
                        ({"n_predict": -2}, "n_predict"), ({"response_fields": "content"}, "response_fields"),
                        ({"t_max_predict_ms": -1}, "t_max_predict_ms"), ({"n_indent": "4"}, "n_indent"),
                        ({"logit_bias": [["hello", 1.0]]}, "logit_bias")):
        r = s.post("/infill", body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_infill_on_a_model_without_fim_tokens_is_a_400(server):
    r = server.post("/infill", {"input_prefix": "def f(", "input_suffix": "):"})
    assert r.status_code == 400 and "no fill-in-the-middle tokens" in r.json()["error"]["message"]


def test_a_bench_workload_may_fill_gaps(fim_pair, fim_engine, tmp_path):
    from edgespec import workloads

    path, out = tmp_path / "fim.jsonl", tmp_path / "fim.json"
    path.write_text("".join(json.dumps({"prompt": p, "suffix": s, "category": "fim"}) + "\n" for p, s in GAPS[:3]))
    items = workloads.read_jsonl(path)
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
            workloads.read_jsonl(path)

