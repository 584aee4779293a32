"""Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`) through `edgespec serve`, with the
`anthropic` client (what Claude Code speaks): every answer is the chat completion the request means (so speculation
stays lossless: greedy answers equal the chat endpoint's, which its own tests hold to the target alone), a stream's
events add up to the message in one piece, tool use goes both ways, and errors come in Anthropic's shape with a
4xx. Every request loop here is bounded in count and time."""
import json

import httpx
import pytest

from conftest import PROMPTS
from edgespec.anthropic_api import _conversation
from edgespec.openai_api import BadRequest
from test_tools import SCHEMAS, TOOLS

anthropic = pytest.importorskip("anthropic")
CLIENT_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                 "input_schema": t["function"]["parameters"]} for t in TOOLS]  # Anthropic's form of the same tools
GREEDY = {"temperature": 0}  # (the newest SDKs take sampling fields only as extra_body)


def _client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=60)


def _chat(server, messages, **kw):
    return server.client().chat.completions.create(model="x", messages=messages, temperature=0, **kw)


# without a model ------------------------------------------------------------------------------------------------------
def test_content_blocks_are_the_conversation_they_stand_for():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "add 2 "}, {"type": "text", "text": "and 3"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Adding."},
                                          {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2, "b": 3}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "5"},
                                     {"type": "tool_result", "tool_use_id": "t2", "is_error": True,
                                      "content": [{"type": "text", "text": "no such tool"}]}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t3", "content": "7"},
                                     {"type": "text", "text": "thanks"}]}]
    assert _conversation(messages) == [
        {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": "Adding.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "5"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: no such tool"},
        {"role": "tool", "tool_call_id": "t3", "content": "7"}, {"role": "user", "content": "thanks"}]


@pytest.mark.parametrize("messages,param", [
    (None, "messages"), ([], "messages"), ([{"role": "system", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image", "source": {}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}],
     "messages[0].content[0]"),
    ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": [{"type": "tool_result", "content": "5"}]}],
     "messages[0].content[0].tool_use_id"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                    "content": [{"type": "image", "source": {}}]}]}],
     "messages[0].content[0].content[0]"),
])
def test_bad_content_names_the_block(messages, param):
    with pytest.raises(BadRequest) as e:
        _conversation(messages)
    assert e.value.param == param and "\n" not in str(e.value)


# through the server -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["off", "auto", "draft", "lookup", "hybrid"])
def test_a_message_is_the_chat_completion_it_means(server, mode):
    client = _client(server)
    for prompt in PROMPTS[:4] + [PROMPTS[9]]:  # (PROMPTS[9] holds control-token names: text, never tokens)
        want = _chat(server, [{"role": "system", "content": "Be terse."}, {"role": "user", "content": prompt}],
                     max_tokens=24, extra_body={"speculative": {"mode": "off"}})
        m = client.messages.create(model="x", max_tokens=24, system=[{"type": "text", "text": "Be terse."}],
                                   messages=[{"role": "user", "content": prompt}],
                                   extra_body={**GREEDY, "speculative": {"mode": mode, "draft_max": 4}})
        assert [b.type for b in m.content] == ["text"] and m.content[0].text == want.choices[0].message.content
        assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
        assert m.usage.input_tokens + m.usage.cache_read_input_tokens == want.usage.prompt_tokens
        assert m.usage.cache_read_input_tokens > 0  # (the same prompt was just read for `want`)
        assert m.usage.output_tokens == want.usage.completion_tokens
        assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[want.choices[0].finish_reason]
        count = client.messages.count_tokens(model="x", system="Be terse.",
                                             messages=[{"role": "user", "content": prompt}])
        assert count.input_tokens == want.usage.prompt_tokens


def test_a_stream_adds_up_to_the_message_in_one_piece(server):
    client = _client(server)
    for prompt in PROMPTS[:3]:
        kw = dict(model="x", max_tokens=30, messages=[{"role": "user", "content": prompt}], extra_body=GREEDY)
        whole = client.messages.create(**kw)
        with client.messages.stream(**kw) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text == final.content[0].text == whole.content[0].text
        assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
        assert final.usage.cache_read_input_tokens > 0  # (message_delta's usage is cumulative: input and cache too)
        assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
            whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    # on the wire: Anthropic's named events in their order
    with httpx.stream("POST", server.url + "/v1/messages", timeout=60,
                      json={"max_tokens": 5, "messages": [{"role": "user", "content": PROMPTS[0]}], "stream": True,
                            "temperature": 0}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = [f for f in r.read().decode().split("\n\n") if f]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    events = [json.loads(f.split("\n")[1].removeprefix("data: ")) for f in frames]
    assert [e["type"] for e in events] == names
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert events[-2]["delta"]["stop_reason"] == "max_tokens" and events[-2]["usage"]["output_tokens"] == 5


def test_stop_sequences_say_which_ended_the_text(server):
    client = _client(server)
    whole = client.messages.create(model="x", max_tokens=20, messages=[{"role": "user", "content": PROMPTS[0]}],
                                   extra_body=GREEDY).content[0].text
    word = whole.split()[2] if len(whole.split()) > 2 else whole[3:6]
    m = client.messages.create(model="x", max_tokens=20, messages=[{"role": "user", "content": PROMPTS[0]}],
                               stop_sequences=["\x00never", word], extra_body=GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == word
    assert m.content[0].text == whole[:whole.index(word)]


def test_structured_output_is_held_to_its_schema(server):
    jsonschema = pytest.importorskip("jsonschema")
    client, schema = _client(server), SCHEMAS["get_weather"]
    want = _chat(server, [{"role": "user", "content": PROMPTS[2]}], max_tokens=200,
                 response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    for fields in ({"output_config": {"format": {"type": "json_schema", "schema": schema}}},  # and the beta's name
                   {"output_format": {"type": "json_schema", "schema": schema}}):
        m = client.messages.create(model="x", max_tokens=200, messages=[{"role": "user", "content": PROMPTS[2]}],
                                   extra_body={**GREEDY, **fields})
        assert m.content[0].text == want.choices[0].message.content and m.stop_reason == "end_turn"
        jsonschema.validate(json.loads(m.content[0].text), schema)


def _uses(message):
    return [(b.name, b.input) for b in message.content if b.type == "tool_use"]


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_tool_use_is_the_chat_endpoints_and_validates(server, choice):
    jsonschema = pytest.importorskip("jsonschema")
    client = _client(server)
    chat_choice = "required" if choice["type"] == "any" else {"type": "function", "function": {"name": "get_weather"}}
    for prompt in PROMPTS[:2]:
        want = _chat(server, [{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=chat_choice,
                     max_tokens=200)
        m = client.messages.create(model="x", max_tokens=200, tools=CLIENT_TOOLS, tool_choice=choice,
                                   messages=[{"role": "user", "content": prompt}],
                                   extra_body={**GREEDY, "speculative": {"mode": "hybrid"}})
        got = _uses(m)
        assert got and got == [(c.function.name, json.loads(c.function.arguments))
                               for c in want.choices[0].message.tool_calls]
        assert m.stop_reason == "tool_use" and all(b.type == "tool_use" for b in m.content)
        for name, args in got:
            jsonschema.validate(args, SCHEMAS[name])
        with client.messages.stream(model="x", max_tokens=200, tools=CLIENT_TOOLS, tool_choice=choice,
                                    messages=[{"role": "user", "content": prompt}], extra_body=GREEDY) as stream:
            final = stream.get_final_message()
        assert _uses(final) == got and final.stop_reason == "tool_use"
        # the caller runs the tools and answers in tool_result blocks: the chat endpoint's answer to the same
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": "21"} for b in m.content]
        after = client.messages.create(model="x", max_tokens=8, tools=CLIENT_TOOLS, tool_choice={"type": "none"},
                                       messages=[{"role": "user", "content": prompt},
                                                 {"role": "assistant", "content": m.content},
                                                 {"role": "user", "content": results}], extra_body=GREEDY)
        calls = [{"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
                 for b in m.content]
        want = _chat(server, [{"role": "user", "content": prompt}, {"role": "assistant", "content": "",
                                                                      "tool_calls": calls}]
                     + [{"role": "tool", "tool_call_id": b.id, "content": "21"} for b in m.content],
                     tools=TOOLS, tool_choice="none", max_tokens=8)
        assert after.content[0].text == want.choices[0].message.content
        assert after.usage.input_tokens + after.usage.cache_read_input_tokens == want.usage.prompt_tokens


@pytest.mark.parametrize("body,status,param", [
    ([], 400, None),
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "max_tokens"),
    ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, 400, "max_tokens"),
    ({"max_tokens": 5, "messages": []}, 400, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 7}, 400, "temperature"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "x"}, 400, "stop_sequences"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "system": 5}, 400, "system"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400, "tools[0].type"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tools": [{"name": "f", "input_schema": "x"}]}, 400, "tools[0].input_schema"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": CLIENT_TOOLS,
      "tool_choice": {"type": "tool", "name": "nope"}}, 400, "tool_choice"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}}, 400,
     "tool_choice"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x" * 20000}]}, 400, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "output_config": "json"}, 400, "output_config"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "output_config": {"format": {"type": "xml"}}},
     400, "output_config.format"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": CLIENT_TOOLS,
      "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, 400, "output_config.format"),
])
def test_bad_requests_are_anthropic_errors(server, body, status, param):
    r = server.post("/v1/messages", body)
    assert r.status_code == status, r.text
    out = r.json()
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    assert out["error"]["param"] == param and "\n" not in out["error"]["message"]
    assert "'stop'" not in out["error"]["message"] and ".function." not in out["error"]["message"]
    r = server.post("/v1/messages/count_tokens", {"messages": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_a_prefill_is_continued_alike_by_every_api(server, engine):
    """The assistant's words last (Anthropic's prefill; llama-server's default for chat completions): each API
    answers with what follows them, the target's own continuation."""
    for prompt, start in [(PROMPTS[0], "Sure: "), (PROMPTS[2], "```python\n"), (PROMPTS[9], "<|im_end|>")]:
        msgs = [{"role": "user", "content": prompt}, {"role": "assistant", "content": start}]
        want = engine.generate(engine.tokenize_chat(msgs), max_tokens=12, speculative=False).text
        chat = _chat(server, msgs, max_tokens=12).choices[0].message.content
        claude = _client(server).messages.create(model="x", max_tokens=12, messages=msgs, extra_body=GREEDY)
        responses = server.client().responses.create(model="x", input=msgs, max_output_tokens=12, temperature=0)
        assert chat == claude.content[0].text == responses.output_text == want, (prompt, start)
