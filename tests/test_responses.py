"""OpenAI's Responses API (`/v1/responses`) through `edgespec serve`, with the `openai` client: every answer is the
chat completion the request means (so speculation stays lossless: greedy answers equal the target alone's through
the chat endpoint, whose own tests hold it to that), a stream's events add up to the answer in one piece in the
order the SDK's accumulator demands, stored responses continue conversations, and what cannot be honoured is an
OpenAI-style 4xx. Every request loop here is bounded in count and time."""
import json

import httpx
import pytest

from conftest import PROMPTS
from edgespec.openai_api import BadRequest
from edgespec.responses_api import _conversation
from test_tools import SCHEMAS, TOOLS

FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]  # Responses' form of the same tools


def _chat(client, messages, **kw):
    return client.chat.completions.create(model="x", messages=messages, temperature=0, **kw)


# without a model ------------------------------------------------------------------------------------------------------
def test_input_items_are_the_conversation_they_stand_for():
    items = [{"role": "developer", "content": "be brief"},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add 2 "},
                                                             {"type": "input_text", "text": "and 3"}]},
             {"type": "reasoning", "id": "rs_1", "summary": []},  # another model's thoughts: left out
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Adding."}]},
             {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
             {"type": "function_call", "call_id": "c2", "name": "add", "arguments": '{"a": 0, "b": 0}'},
             {"type": "function_call_output", "call_id": "c1", "output": "5"},
             {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "0"}]}]
    assert _conversation(items) == [
        {"role": "developer", "content": "be brief"}, {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": "Adding.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 0, "b": 0}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}, {"role": "tool", "tool_call_id": "c2", "content": "0"}]
    assert _conversation("hi") == [{"role": "user", "content": "hi"}]
    # a call with no assistant text before it gets an assistant message of its own
    alone = _conversation([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}])
    assert alone[0]["content"] == ""


@pytest.mark.parametrize("items,param", [
    (None, "input"), ([], "input"), (42, "input"), (["hi"], "input[0]"),
    ([{"role": "robot", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}], "input[0].content"),
    ([{"role": "user", "content": 7}], "input[0].content"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ([{"type": "function_call_output", "output": "5"}], "input[0].call_id"),
    ([{"role": "user", "content": "ok"}, {"type": "web_search_call", "id": "ws"}], "input[1].type"),
])
def test_bad_input_items_name_the_item(items, param):
    with pytest.raises(BadRequest) as e:
        _conversation(items)
    assert e.value.param == param and "\n" not in str(e.value)


# through the server -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["off", "auto", "draft", "lookup", "hybrid"])
def test_a_response_is_the_chat_completion_it_means(server, mode):
    client = server.client()
    spec = {"speculative": {"mode": mode, "draft_max": 4}}
    for prompt in PROMPTS[:4] + [PROMPTS[9]]:  # (PROMPTS[9] holds control-token names: text, never tokens)
        want = _chat(client, [{"role": "system", "content": "Be terse."}, {"role": "user", "content": prompt}],
                     max_tokens=24, extra_body={"speculative": {"mode": "off"}})
        r = client.responses.create(model="x", instructions="Be terse.", input=prompt, max_output_tokens=24,
                                    temperature=0, extra_body=spec)
        assert r.output_text == want.choices[0].message.content, prompt
        assert r.object == "response" and r.id.startswith("resp_") and r.instructions == "Be terse."
        assert r.usage.input_tokens == want.usage.prompt_tokens
        assert r.usage.output_tokens == want.usage.completion_tokens
        finished = want.choices[0].finish_reason == "stop"
        assert r.status == ("completed" if finished else "incomplete")
        assert (r.incomplete_details is None) == finished
        assert not finished or r.incomplete_details is None
        if not finished:
            assert r.incomplete_details.reason == "max_output_tokens"


def test_a_stream_adds_up_to_the_response_in_one_piece(server):
    client = server.client()
    weather = {"format": {"type": "json_schema", "name": "weather", "schema": SCHEMAS["get_weather"]}}
    for prompt in PROMPTS[:3]:  # (a schema, so that the tiny model's answer ends: the SDK wants it completed)
        kw = dict(model="x", input=prompt, max_output_tokens=400, temperature=0, text=weather)
        whole = client.responses.create(**kw)
        with client.responses.stream(**kw) as stream:  # the SDK's accumulator checks the order of the events
            deltas = [ev.delta for ev in stream if ev.type == "response.output_text.delta"]
            final = stream.get_final_response()
        assert "".join(deltas) == final.output_text == whole.output_text
        assert final.status == whole.status == "completed" and final.usage.output_tokens == whole.usage.output_tokens
    # on the wire: named events, numbered in order, the lifecycle around one message, no [DONE]
    with httpx.stream("POST", server.url + "/v1/responses", timeout=60,
                      json={"input": PROMPTS[0], "max_output_tokens": 5, "stream": True, "temperature": 0}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        frames = [f for f in r.read().decode().split("\n\n") if f]
    names = [f.split("\n")[0].removeprefix("event: ") for f in frames]
    events = [json.loads(f.split("\n")[1].removeprefix("data: ")) for f in frames]
    assert [e["type"] for e in events] == names and [e["sequence_number"] for e in events] == list(range(len(events)))
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert set(names[4:-4]) == {"response.output_text.delta"}
    end = events[-1]["response"]
    assert end["status"] == "incomplete" and end["usage"]["output_tokens"] == 5
    assert events[0]["response"]["id"] == end["id"] and events[0]["response"]["status"] == "in_progress"


def test_previous_response_id_continues_the_conversation(server):
    client = server.client()
    first = client.responses.create(model="x", input=PROMPTS[0], max_output_tokens=12, temperature=0,
                                    instructions="Be terse.")
    second = client.responses.create(model="x", input=PROMPTS[1], previous_response_id=first.id,
                                     max_output_tokens=12, temperature=0)
    # the earlier turns, not the earlier instructions (as OpenAI's API has it)
    want = _chat(client, [{"role": "user", "content": PROMPTS[0]}, {"role": "assistant", "content": first.output_text},
                          {"role": "user", "content": PROMPTS[1]}], max_tokens=12)
    assert second.output_text == want.choices[0].message.content
    assert second.usage.input_tokens == want.usage.prompt_tokens and second.previous_response_id == first.id
    kept = client.responses.retrieve(first.id)
    assert kept.id == first.id and kept.output_text == first.output_text and kept.status == first.status
    assert server.post(f"/v1/responses/{first.id}", b"", headers={}).status_code == 405
    assert httpx.delete(f"{server.url}/v1/responses/{first.id}", timeout=10).json()["deleted"] is True
    for r in (httpx.get(f"{server.url}/v1/responses/{first.id}", timeout=10),
              httpx.delete(f"{server.url}/v1/responses/{first.id}", timeout=10)):
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = server.post("/v1/responses", {"input": "x", "previous_response_id": first.id})
    assert r.status_code == 404 and r.json()["error"]["code"] == "previous_response_not_found"
    assert r.json()["error"]["param"] == "previous_response_id"
    # a prefill and what continued it are one assistant message to the response after it
    start = client.responses.create(model="x", input=[{"role": "user", "content": PROMPTS[0]},
                                                      {"role": "assistant", "content": "Sure: "}],
                                    max_output_tokens=6, temperature=0)
    then = client.responses.create(model="x", input=PROMPTS[1], previous_response_id=start.id, max_output_tokens=6,
                                   temperature=0)
    want = _chat(client, [{"role": "user", "content": PROMPTS[0]},
                          {"role": "assistant", "content": "Sure: " + start.output_text},
                          {"role": "user", "content": PROMPTS[1]}], max_tokens=6)
    assert then.output_text == want.choices[0].message.content
    assert then.usage.input_tokens == want.usage.prompt_tokens
    unkept = client.responses.create(model="x", input="hi", max_output_tokens=2, store=False)
    assert httpx.get(f"{server.url}/v1/responses/{unkept.id}", timeout=10).status_code == 404


def _calls(response):
    return [(o.name, json.loads(o.arguments)) for o in response.output if o.type == "function_call"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_function_calls_are_the_chat_endpoints_and_validate(server, choice):
    jsonschema = pytest.importorskip("jsonschema")
    client = server.client()
    chat_choice = choice if isinstance(choice, str) else {"type": "function", "function": {"name": choice["name"]}}
    for prompt in PROMPTS[:2]:
        want = _chat(client, [{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=chat_choice,
                     max_tokens=200)
        r = client.responses.create(model="x", input=prompt, tools=FLAT_TOOLS, tool_choice=choice,
                                    max_output_tokens=200, temperature=0,
                                    extra_body={"speculative": {"mode": "hybrid"}})
        got = _calls(r)
        assert got and got == [(c.function.name, json.loads(c.function.arguments))
                               for c in want.choices[0].message.tool_calls]
        assert r.status == "completed" and (r.tool_choice if isinstance(choice, str) else
                                            r.tool_choice.model_dump(exclude_none=True)) == choice
        assert [o.type for o in r.output] == ["function_call"] * len(got)
        assert len({o.call_id for o in r.output} | {o.id for o in r.output}) == 2 * len(got)
        for name, args in got:
            jsonschema.validate(args, SCHEMAS[name])
        # streamed: the same calls, each item added, its arguments, done
        with client.responses.stream(model="x", input=prompt, tools=FLAT_TOOLS, tool_choice=choice,
                                     max_output_tokens=200, temperature=0) as stream:
            kinds = [ev.type for ev in stream]
            final = stream.get_final_response()
        assert _calls(final) == got and kinds.count("response.function_call_arguments.done") == len(got)
        # the caller runs the call and hands its output back: the conversation goes on from the stored response
        outputs = [{"type": "function_call_output", "call_id": o.call_id, "output": "21"} for o in r.output]
        after = client.responses.create(model="x", previous_response_id=r.id, input=outputs, tools=FLAT_TOOLS,
                                        tool_choice="none", max_output_tokens=8, temperature=0)
        calls = [{"id": o.call_id, "type": "function", "function": {"name": o.name, "arguments": o.arguments}}
                 for o in r.output]
        want = _chat(client, [{"role": "user", "content": prompt}, {"role": "assistant", "content": "",
                                                                      "tool_calls": calls}]
                     + [{"role": "tool", "tool_call_id": o.call_id, "content": "21"} for o in r.output],
                     tools=TOOLS, tool_choice="none", max_tokens=8)
        assert after.output_text == want.choices[0].message.content
        assert after.usage.input_tokens == want.usage.prompt_tokens


def test_text_format_json_schema_is_held_to(server):
    jsonschema = pytest.importorskip("jsonschema")
    client = server.client()
    schema = SCHEMAS["get_weather"]
    r = client.responses.create(model="x", input=PROMPTS[2], max_output_tokens=200, temperature=0,
                                text={"format": {"type": "json_schema", "name": "weather", "schema": schema,
                                                 "strict": True}})
    want = _chat(client, [{"role": "user", "content": PROMPTS[2]}], max_tokens=200,
                 response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}})
    assert r.output_text == want.choices[0].message.content and r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def test_logprobs_when_included(server):
    client = server.client()
    r = client.responses.create(model="x", input=PROMPTS[0], max_output_tokens=6, temperature=0, top_logprobs=2,
                                include=["message.output_text.logprobs"])
    want = _chat(client, [{"role": "user", "content": PROMPTS[0]}], max_tokens=6, logprobs=True, top_logprobs=2)
    got = r.output[0].content[0].logprobs
    assert [(e.token, round(e.logprob, 4)) for e in got] == \
        [(e.token, round(e.logprob, 4)) for e in want.choices[0].logprobs.content]
    assert all(len(e.top_logprobs) == 2 for e in got)
    plain = client.responses.create(model="x", input=PROMPTS[0], max_output_tokens=6, temperature=0)
    assert plain.output[0].content[0].logprobs == []


@pytest.mark.parametrize("body,status,param,code", [
    ([], 400, None, None),
    ({"input": []}, 400, "input", None),
    ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens", None),
    ({"input": "x", "temperature": 5}, 400, "temperature", None),
    ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools[0].type", "unsupported_value"),
    ({"input": "x", "tools": [{"type": "function", "name": "has space"}]}, 400, "tools[0].name", None),
    ({"input": "x", "tools": FLAT_TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice",
     None),
    ({"input": "x", "text": {"format": {"type": "xml"}}}, 400, "text.format", None),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, 400, "text.format.schema", None),
    ({"input": "x", "text": "json"}, 400, "text", None),
    ({"input": "x", "tools": FLAT_TOOLS, "text": {"format": {"type": "json_object"}}}, 400, "text.format", None),
    ({"input": "x", "background": True}, 400, "background", "unsupported_value"),
    ({"input": "x", "truncation": "auto"}, 400, "truncation", "unsupported_value"),
    ({"input": "x", "store": "yes"}, 400, "store", None),
    ({"input": "x", "instructions": ["be brief"]}, 400, "instructions", None),
    ({"input": "x", "include": "all"}, 400, "include", None),
    ({"input": "x", "previous_response_id": "resp_nope"}, 404, "previous_response_id", "previous_response_not_found"),
    ({"input": "x" * 20000}, 400, "input", "context_length_exceeded"),
])
def test_bad_requests_are_openai_errors(server, body, status, param, code):
    r = server.post("/v1/responses", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["code"] == code and err["type"] == "invalid_request_error"
    assert "\n" not in err["message"] and "messages" not in err["message"] and "max_tokens" not in err["message"]
