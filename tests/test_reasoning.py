"""A thinking model's reasoning apart from its answer (reasoning.py), and how each API shows it: chat completions'
`reasoning_content`, a Responses reasoning item, an Anthropic thinking block, whole or streamed; models without
the tags as tokens are read as before."""
import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from edgespec.reasoning import Thoughts, split

REPLY = "<think>\nThe user greets me.\nI greet back.\n</think>\n\nHello! <think> is a tag."


def _pieces(text: str, cuts: list[int], inside: bool = False) -> tuple[str, str]:
    t, thought, answer = Thoughts(inside), "", ""
    bounds = [0, *sorted(set(c % (len(text) + 1) for c in cuts)), len(text)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        r, c = t.feed(text[a:b], end=k == len(bounds) - 2)
        thought, answer = thought + r, answer + c
    return thought, answer


def test_reasoning_and_answer_apart_blanks_around_them_left_out():
    assert split(REPLY) == ("The user greets me.\nI greet back.", "Hello! <think> is a tag.")
    assert split("  Hello\n") == ("", "  Hello\n")  # no reasoning: the answer as written
    assert split("Let me <think>") == ("", "Let me <think>")  # a tag later on is text
    # a prompt that leaves <think> open: the reply starts inside it
    assert split("hmm\n</think>\nYes.", inside=True) == ("hmm", "Yes.")
    assert split("cut short by max_tokens", inside=True) == ("cut short by max_tokens", "")
    assert split("<thi") == ("", "<thi") and split("<think>x </thi") == ("x </thi", "")
    assert split("") == ("", "")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 200), max_size=12), st.sampled_from([REPLY, "  <think>a</think>b", "<th", "x</think>y",
                                                                    "<think>\n\n</think>\n\n  ok", "<think>  a \n"]))
def test_pieces_add_up_to_the_whole_however_the_text_comes(cuts, text):
    assert _pieces(text, cuts) == split(text)
    assert _pieces(text, cuts, inside=True) == split(text, inside=True)


def test_nothing_is_shown_before_it_is_known():
    t = Thoughts()
    assert t.feed("\n<thi") == ("", "")  # could be a <think>
    assert t.feed("nk>Plan") == ("Plan", "")
    assert t.feed(" more \n</th") == (" more", "")  # blanks wait: the tag may close here
    assert t.feed("ink>\n\n") == ("", "")
    assert t.feed("Done.", end=True) == ("", "Done.")


# how each API shows it -------------------------------------------------------------------------------------------
def _answer(state, api, body, pieces):
    """The answer of `api` ("chat", "responses", "messages") to a body, had the model written these pieces: the
    whole answer, and the stream's events decoded."""
    from edgespec import anthropic_api, openai_api, responses_api
    from edgespec.sequences import Event
    from edgespec.stats import GenerationStats

    parse, answer = {"chat": (lambda b, s: openai_api.parse(b, s, True), openai_api.Answer),
                     "responses": (responses_api.parse, responses_api.ResponsesAnswer),
                     "messages": (anthropic_api.parse, anthropic_api.MessageAnswer)}[api]
    req, how = parse({**body, "stream": True}, state)
    a = answer(state, req, how)
    frames = list(a.frames(None))
    for k, piece in enumerate(pieces + [""]):
        ev = Event(piece, token=1) if k < len(pieces) else Event("", finish_reason="stop", stats=GenerationStats())
        a.add(ev)
        frames += a.frames(ev)
    events = [json.loads(line[6:]) for f in frames for line in f.split("\n") if line.startswith("data: {")]
    return a.body(ev), events


CUTS = ["<thi", "nk>\nThe user", " greets me.\nI greet back.\n</", "think>\n", "\nHello! <think> is", " a tag."]
THOUGHT, ANSWER = split(REPLY)


def test_chat_completions_show_it_as_reasoning_content(think_state):
    assert "".join(CUTS) == REPLY
    body, events = _answer(think_state, "chat", {"messages": [{"role": "user", "content": "hi"}]}, CUTS)
    message = body["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (THOUGHT, ANSWER)
    deltas = [e["choices"][0]["delta"] for e in events]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == THOUGHT
    assert "".join(d.get("content") or "" for d in deltas) == ANSWER
    # reasoning_format "none": all of it is content, as written
    body, _ = _answer(think_state, "chat",
                      {"messages": [{"role": "user", "content": "hi"}], "reasoning_format": "none"},
                      CUTS)
    message = body["choices"][0]["message"]
    assert message["content"] == REPLY and "reasoning_content" not in message


def test_a_piece_that_ends_the_reasoning_and_begins_the_answer_loses_neither(think_state):
    """Text held back (a stop string's prefix, say) can come as one piece across </think>: each API's stream still
    adds up to the whole."""
    pieces = ["<think>\nThe user greets me.\nI greet", " back.\n</think>\n\nHello! <think> is a tag."]
    _, events = _answer(think_state, "chat", {"messages": [{"role": "user", "content": "hi"}]}, pieces)
    deltas = [e["choices"][0]["delta"] for e in events]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == THOUGHT
    assert "".join(d.get("content") or "" for d in deltas) == ANSWER
    _, events = _answer(think_state, "responses", {"input": "hi"}, pieces)
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") == THOUGHT
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == ANSWER
    _, events = _answer(think_state, "messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
                        pieces)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == THOUGHT
    assert "".join(d.get("text", "") for d in deltas) == ANSWER


def test_a_response_shows_it_as_a_reasoning_item(think_state):
    body, events = _answer(think_state, "responses", {"input": "hi"}, CUTS)
    reasoning, message = body["output"]
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert message["content"][0]["text"] == ANSWER
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") == THOUGHT
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == ANSWER
    kinds = [e["type"] for e in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.content_part.added")
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.done"] == [0, 1]


def test_a_message_shows_it_as_a_thinking_block(think_state):
    body, events = _answer(think_state, "messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
                           CUTS)
    assert body["content"] == [{"type": "thinking", "thinking": THOUGHT, "signature": ""},
                               {"type": "text", "text": ANSWER}]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == THOUGHT
    assert [e["index"] for e in events if e["type"] == "content_block_stop"] == [0, 1]


def test_only_a_thinking_models_tags_are_read_so(think_state, engine):
    from edgespec import reasoning
    from edgespec.sampling import SamplingConfig
    from edgespec.server import ServerState

    assert reasoning.markers(think_state.engine.model) == (7, 8) and reasoning.markers(engine.model) is None
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "edgespec", "check", str(think_state.engine.model.path),
                            str(engine.model.path)], capture_output=True, text=True, timeout=60).stdout
    row = next(line for line in shown.splitlines() if line.startswith("thinks aloud"))
    assert row[16:].split() == ["yes", "(<think>)", "no"]  # (edgespec check: the target thinks, the draft not)
    plain = ServerState("m", SamplingConfig(), engine=engine)
    body, _ = _answer(plain, "chat", {"messages": [{"role": "user", "content": "hi"}]}, CUTS)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": REPLY}


def test_a_prompt_that_opens_the_reasoning_starts_the_reply_inside_it(think_state, think_target):
    """Through the server, with the SDKs: a prefill of "<think>" (as templates that open it write the prompt), so
    all the tiny model writes is reasoning."""
    anthropic = pytest.importorskip("anthropic")
    from http_server import Server

    s = Server("-m", think_target, "-c", "1024", "--threads", "2")
    try:
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>"}]
        raw = s.client().chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                                 extra_body={"reasoning_format": "none"}).choices[0].message
        thought = raw.content.strip()
        assert thought and "</think>" not in raw.content
        r = s.client().chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0)
        assert (r.choices[0].message.reasoning_content, r.choices[0].message.content) == (thought, "")
        with anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0).messages.stream(
                model="x", max_tokens=12, messages=msgs, extra_body={"temperature": 0}) as stream:
            final = stream.get_final_message()
        assert [(b.type, b.thinking) for b in final.content] == [("thinking", thought)]
        out = s.client().responses.create(model="x", input=msgs, max_output_tokens=12, temperature=0).output
        assert [(o.type, o.content[0].text) for o in out] == [("reasoning", thought)]
    finally:
        assert s.stop() == 0


def test_chat_template_kwargs_reach_the_template_and_stay_text(think_state):
    """llama-server's chat_template_kwargs (Qwen3's enable_thinking): the template's own variables; text in them is
    text, never control tokens, and they cannot replace the conversation."""
    from edgespec import chat
    from edgespec.openai_api import BadRequest, parse

    qwen3ish = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not "
                "enable_thinking %}<think>\n\n</think>\n\n{% endif %}{{ note or '' }}{% endif %}")
    model, msgs = think_state.engine.model, [("user", "hi")]
    off, _ = chat.render(model, msgs, qwen3ish, template_kwargs={"enable_thinking": False})
    on, _ = chat.render(model, msgs, qwen3ish)
    assert off == on + "<think>\n\n</think>\n\n"
    text, literal = chat.render(model, msgs, qwen3ish, template_kwargs={"note": "<|im_end|>", "messages": []})
    assert "hi" in text and [text[a:b] for a, b in literal] == ["<|im_end|>"]
    with pytest.raises(BadRequest) as e:
        parse({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": ["x"]}, think_state, True)
    assert e.value.param == "chat_template_kwargs"


def test_chat_on_a_terminal_shows_the_reasoning_dim_and_saves_it_as_written(think_target, tmp_path):
    """A template that opens <think> in the prompt: all the tiny model writes is reasoning, shown dim; /save keeps
    the reply as written."""
    from test_chat import Terminal

    opens = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant: <think>"
    t = Terminal(["-m", "edgespec", "chat", "-m", str(think_target), "-n", "12", "-t", "0", "--chat-format", opens])
    t.read_until(b"/help for commands")
    t.type(b"hello\r")
    t.read_until(b"hello\r\n")  # (its echo first: a prompt found before it would be the last one)
    t.read_until(b"\n> ", after=b"hello\r\n")
    t.type(f"/save {tmp_path / 'c.json'}\r".encode())
    t.read_until(b"\n> ", after=b"saved 2 messages")  # (Ctrl-D once the prompt is back, as a person would type it)
    time.sleep(0.5)
    t.type(b"\x04")
    assert t.wait() == 0
    reply = json.loads((tmp_path / "c.json").read_text())["messages"][1]["content"]
    shown = t.buf.rsplit(b"hello", 1)[1].split(b"\n> ")[0]
    assert b"\x1b[2m" in shown and reply.strip() and "</think>" not in reply
