"""Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/ps`, `/api/version`) through
`edgespec serve`, with the `ollama` client (what Open WebUI, Continue and Zed speak): every answer is the chat or
text completion the request means (so speculation stays lossless: greedy answers equal the chat endpoint's, which its
own tests hold to the target alone), a stream's lines add up to the answer, tools and thinking come in Ollama's
fields, and errors are {"error": ...} with a 4xx. Every request loop here is bounded in count and time."""
import json

import httpx
import pytest

from conftest import PROMPTS
from edgespec.ollama_api import _messages
from edgespec.openai_api import BadRequest
from test_reasoning import THOUGHT, ANSWER, CUTS
from test_tools import SCHEMAS, TOOLS

ollama = pytest.importorskip("ollama")
GREEDY = {"temperature": 0}


def _client(server):
    return ollama.Client(host=server.url, timeout=60)


def _chat(server, messages, **kw):
    return server.client().chat.completions.create(model="x", messages=messages, temperature=0, **kw)


def _lines(response: httpx.Response) -> list[dict]:
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line]


# without a model ------------------------------------------------------------------------------------------------------
def test_messages_are_the_conversation_they_stand_for():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add 2 and 3, twice"},
                {"role": "assistant", "content": "", "thinking": "easy",
                 "tool_calls": [{"function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
                                {"id": "c9", "function": {"name": "mul", "arguments": {"a": 2}}}]},
                {"role": "tool", "content": "5", "tool_name": "add"},
                {"role": "tool", "content": "4", "tool_call_id": "c9"}, {"role": "tool", "content": "?"}]
    assert _messages(messages) == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "add 2 and 3, twice"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_2_0", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}},
            {"id": "c9", "type": "function", "function": {"name": "mul", "arguments": {"a": 2}}}]},
        {"role": "tool", "content": "5", "tool_call_id": "call_2_0"},
        {"role": "tool", "content": "4", "tool_call_id": "c9"}, {"role": "tool", "content": "?", "tool_call_id": ""}]


@pytest.mark.parametrize("messages,param", [
    ("hi", "messages"), ([{"role": "developer", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": "what is this", "images": ["aGk="]}], "messages[0].images"),
    ([{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}], "messages[0].tool_calls"),
])
def test_bad_messages_name_the_field(messages, param):
    with pytest.raises(BadRequest) as e:
        _messages(messages)
    assert e.value.param == param and "\n" not in str(e.value)


# through the server -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["off", "auto", "draft", "lookup", "hybrid"])
def test_a_chat_is_the_chat_completion_it_means(server, mode):
    for prompt in PROMPTS[:3] + [PROMPTS[9]]:  # (PROMPTS[9] holds control-token names: text, never tokens)
        msgs = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": prompt}]
        want = _chat(server, msgs, max_tokens=24, extra_body={"speculative": {"mode": "off"}})
        body = {"model": "x", "messages": msgs, "options": {**GREEDY, "num_predict": 24},
                "speculative": {"mode": mode, "draft_max": 4}}
        whole = server.post("/api/chat", {**body, "stream": False}).json()
        assert whole["message"] == {"role": "assistant", "content": want.choices[0].message.content}
        assert whole["done"] and whole["done_reason"] == "length"
        assert (whole["prompt_eval_count"], whole["eval_count"]) == (want.usage.prompt_tokens,
                                                                    want.usage.completion_tokens)
        lines = _lines(server.post("/api/chat", body))  # (a stream unless told not to)
        assert "".join(x["message"]["content"] for x in lines) == whole["message"]["content"]
        assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
        assert lines[-1]["eval_count"] == whole["eval_count"] and lines[-1]["total_duration"] > 0


def test_the_ollama_client_reads_it(server):
    client = _client(server)
    msgs = [{"role": "user", "content": PROMPTS[1]}]
    want = _chat(server, msgs, max_tokens=16).choices[0].message.content
    got = client.chat(model="x", messages=msgs, options={**GREEDY, "num_predict": 16})
    assert got.message.content == want and got.done_reason == "length"
    parts = list(client.chat(model="x", messages=msgs, options={**GREEDY, "num_predict": 16}, stream=True))
    assert "".join(p.message.content for p in parts) == want and parts[-1].done
    # stop strings end it where the chat endpoint's do, with done_reason stop
    stop = want[3:5]
    got = client.chat(model="x", messages=msgs, options={**GREEDY, "num_predict": 16, "stop": [stop]})
    assert got.message.content == _chat(server, msgs, max_tokens=16, stop=[stop]).choices[0].message.content
    assert got.done_reason == "stop"
    # log-probabilities, as Ollama gives them
    got = client.chat(model="x", messages=msgs, options={**GREEDY, "num_predict": 4}, logprobs=True, top_logprobs=2)
    assert len(got.logprobs) == 4 and all(len(lp.top_logprobs) == 2 for lp in got.logprobs)
    raw = server.post("/api/chat", {"messages": msgs, "options": {**GREEDY, "num_predict": 4}, "logprobs": True,
                                    "stream": False}).json()  # (a token can be part of a character: its bytes add up)
    assert bytes(b for lp in raw["logprobs"] for b in lp["bytes"]).decode("utf-8", "replace") == got.message.content


def test_generate_is_the_completion_it_means(server):
    client = _client(server)
    for prompt in PROMPTS[3:6] + [PROMPTS[9]]:  # (PROMPTS[9] holds control-token names: text, unless raw)
        # the prompt as a user's turn in the chat template, after the system prompt
        want = _chat(server, [{"role": "system", "content": "Be terse."}, {"role": "user", "content": prompt}],
                     max_tokens=12)
        got = client.generate(model="x", prompt=prompt, system="Be terse.", options={**GREEDY, "num_predict": 12})
        assert got.response == want.choices[0].message.content and got.prompt_eval_count == want.usage.prompt_tokens
        # raw: the prompt as written, as /v1/completions reads it
        text = server.client().completions.create(model="x", prompt=prompt, max_tokens=12, temperature=0)
        raw = client.generate(model="x", prompt=prompt, raw=True, options={**GREEDY, "num_predict": 12})
        assert raw.response == text.choices[0].text
        parts = list(client.generate(model="x", prompt=prompt, raw=True, stream=True,
                                     options={**GREEDY, "num_predict": 12}))
        assert "".join(p.response for p in parts) == raw.response and parts[-1].done
        # an answer's context (its prompt and reply, as tokens) continues in the next request
        assert raw.context[:raw.prompt_eval_count] == server.post("/tokenize", {"content": prompt}).json()["tokens"]
        more = client.generate(model="x", prompt=" and", raw=True, context=raw.context,
                               options={**GREEDY, "num_predict": 6})
        assert more.context[:len(raw.context)] == raw.context
        want = server.client().completions.create(model="x", prompt=more.context[:more.prompt_eval_count],
                                                  max_tokens=6, temperature=0)
        assert more.response == want.choices[0].text


def test_structured_output_is_held_to_its_schema(server):
    jsonschema = pytest.importorskip("jsonschema")
    client, schema = _client(server), SCHEMAS["get_weather"]
    msgs = [{"role": "user", "content": PROMPTS[2]}]
    want = _chat(server, msgs, max_tokens=200,
                 response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}})
    got = client.chat(model="x", messages=msgs, format=schema, options={**GREEDY, "num_predict": 200})
    assert got.message.content == want.choices[0].message.content and got.done_reason == "stop"
    jsonschema.validate(json.loads(got.message.content), schema)
    want = _chat(server, msgs, max_tokens=200, response_format={"type": "json_object"})
    got = client.generate(model="x", prompt=PROMPTS[2], format="json", options={**GREEDY, "num_predict": 200})
    assert got.response == want.choices[0].message.content


def test_tool_calls_go_both_ways(server, think_state):
    """The model's calls come whole in message.tool_calls (arguments as objects); the caller's answers, in tool
    messages that name the tool, give the prompt the chat endpoint builds from the same conversation."""
    from edgespec import ollama_api
    from edgespec.sequences import Event
    from edgespec.stats import GenerationStats

    req, how = ollama_api.parse_chat({"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}, think_state)
    pieces = ["Let me add. <tool", '_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n<tool_call>',
              '{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']
    a = ollama_api.OllamaAnswer(think_state, req, how)
    lines = []
    for k, piece in enumerate(pieces + [""]):
        ev = Event(piece, token=1) if k < len(pieces) else Event("", finish_reason="stop", stats=GenerationStats())
        a.add(ev)
        lines += [json.loads(line) for line in a.frames(ev)]
    calls = [c for x in lines for c in x["message"].get("tool_calls", [])]
    assert [(c["function"]["name"], c["function"]["arguments"], c["function"]["index"]) for c in calls] == [
        ("add", {"a": 2, "b": 3}, 0), ("get_weather", {"city": "Paris"}, 1)]
    assert "".join(x["message"]["content"] for x in lines).strip() == "Let me add."
    assert lines[-1]["done_reason"] == "stop"

    prompt = PROMPTS[0]
    ours = [{"role": "user", "content": prompt},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
            {"role": "tool", "content": "5", "tool_name": "add"}]
    got = ollama.ChatResponse(**server.post("/api/chat", {  # (the client's own Tool type drops schema keywords)
        "model": "x", "messages": ours, "tools": TOOLS, "options": {**GREEDY, "num_predict": 8},
        "stream": False}).json())
    want = _chat(server, [{"role": "user", "content": prompt},
                          {"role": "assistant", "content": "", "tool_calls": [
                              {"id": "call_1_0", "type": "function",
                               "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                          {"role": "tool", "tool_call_id": "call_1_0", "content": "5"}],
                 tools=TOOLS, max_tokens=8)
    assert got.prompt_eval_count == want.usage.prompt_tokens
    message = want.choices[0].message
    assert got.message.content == (message.content or "")
    assert [(c.function.name, dict(c.function.arguments)) for c in got.message.tool_calls or []] == [
        (c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_a_thinking_models_reasoning_comes_as_thinking(think_state):
    """A thinking model's reasoning in message.thinking (response's `thinking` for /api/generate), whole or
    streamed, apart from its answer."""
    from edgespec import ollama_api
    from edgespec.sequences import Event
    from edgespec.stats import GenerationStats

    for api, parse, field in [("chat", ollama_api.parse_chat, None), ("generate", ollama_api.parse_generate,
                                                                       "response")]:
        body = {"messages": [{"role": "user", "content": "hi"}]} if api == "chat" else {"prompt": "hi"}
        for stream in (True, False):
            req, how = parse({**body, "stream": stream, "think": True}, think_state)
            a = ollama_api.OllamaAnswer(think_state, req, how)
            lines = []
            for k, piece in enumerate(CUTS + [""]):
                ev = Event(piece, token=1) if k < len(CUTS) else Event("", finish_reason="stop",
                                                                        stats=GenerationStats())
                a.add(ev)
                lines += [json.loads(line) for line in a.frames(ev)]
            shown = [x["message"] if api == "chat" else x for x in (lines if stream else [a.body(ev)])]
            assert "".join(x.get("thinking", "") for x in shown) == THOUGHT
            assert "".join(x[field or "content"] for x in shown) == ANSWER


@pytest.mark.parametrize("path,body,param", [
    ("/api/chat", [], None),
    ("/api/chat", {"messages": "hi"}, "messages"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"temperature": 7}}, "temperature"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"num_predict": "many"}}, "num_predict"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": {"mirostat": 2}}, "mirostat"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "options": "hot"}, "options"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "format": "yaml"}, "format"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "think": True}, "thinking"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "think": "very"}, "think"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x" * 20000}]}, "ctx-size"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web"}]}, "tools"),
    ("/api/generate", {"prompt": "x", "images": ["aGk="]}, "images"),
    ("/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ("/api/generate", {"prompt": "x", "suffix": "y"}, "fill"),
    ("/api/generate", {"prompt": 5}, "prompt"),
    ("/api/generate", {"prompt": "x", "context": ["a"]}, "context"),
    ("/api/generate", {"prompt": "x", "raw": "yes"}, "raw"),
    ("/api/generate", {"prompt": "x", "logprobs": 3}, "logprobs"),
])
def test_bad_requests_are_ollama_errors(server, path, body, param):
    r = server.post(path, body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert isinstance(message, str) and "\n" not in message and (param is None or param in message), message
    with pytest.raises(ollama.ResponseError) as e:  # what the client makes of it
        _client(server).chat(model="x", messages=[{"role": "user", "content": "x"}], options={"temperature": 7})
    assert e.value.status_code == 400 and "temperature" in e.value.error


def test_the_model_is_listed_and_described(server):
    client = _client(server)
    tags = client.list().models
    assert len(tags) == 1 and tags[0].model == "target.gguf" and tags[0].details.format == "gguf"
    assert tags[0].size > 0 and tags[0].details.quantization_level == "F32"
    for name in ("target.gguf", "target.gguf:latest"):
        shown = client.show(name)
        assert "completion" in shown.capabilities and "tools" in shown.capabilities
        assert shown.modelinfo["general.architecture"] == "llama" and shown.modelinfo["llama.context_length"] == 1024
        assert "im_start" in shown.template and "num_ctx 1024" in shown.parameters.splitlines()
    with pytest.raises(ollama.ResponseError) as e:
        client.show("llama3.2")
    assert e.value.status_code == 404
    assert server.post("/api/show", {}).status_code == 400  # (no name at all)
    assert client.ps().models[0].model == "target.gguf"
    version = httpx.get(server.url + "/api/version").json()["version"]
    assert tuple(map(int, version.split("."))) >= (0, 6, 4)
    assert httpx.get(server.url + "/").status_code == 200
    # a request without a prompt loads the model (it is loaded), as clients warm one up
    assert client.generate(model="x", prompt="").done_reason == "load"
    assert server.post("/api/chat", {"model": "x", "messages": []}).json()["done_reason"] == "load"
    # what edgespec does not do is a 404 in Ollama's shape, saying why
    r = server.post("/api/pull", {"model": "llama3.2"})
    assert r.status_code == 404 and "started with" in r.json()["error"]
