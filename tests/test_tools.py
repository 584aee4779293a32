"""Tool calls (`tools`, `tool_choice`) through `edgespec serve`: every call is valid against its function's schema,
speculation changes nothing (greedy output equals the constrained target alone), streams carry the same calls, and
bad tool fields are OpenAI-style 400s. Every request loop here is bounded in count and time."""
import json

import pytest

from conftest import PROMPTS
from http_server import Server
from edgespec import chat
from edgespec.constraints import Constraint
from edgespec.errors import InvalidArgument
from edgespec.tools import CallReader, ToolError, Tools, special_markers
from edgespec.typed_answer import Parts

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}


# without a model ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tools,choice,param", [
    ("get_weather", None, "tools"),
    ([{"type": "function"}], None, "tools[0]"),
    ([{"type": "function", "function": {"name": "has space"}}], None, "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "f", "parameters": "x"}}], None, "tools[0].function.parameters"),
    (TOOLS + TOOLS[:1], None, "tools[2].function.name"),
    (TOOLS, "sometimes", "tool_choice"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
    (None, "required", "tool_choice"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "minProperties": "x"}}}],
     None, "tools[0].function.parameters"),
])
def test_bad_tools_name_the_field(tools, choice, param):
    with pytest.raises(ToolError) as e:
        Tools.parse(tools, choice)
    assert e.value.param == param and "\n" not in str(e.value)


def test_a_schema_keyword_llguidance_lacks_is_not_enforced_rather_than_refused(engine):
    """Agents offer tools from many sources: one keyword llguidance does not implement does not refuse the request;
    the rest of the schema is still held to (a response_format schema is enforced whole or refused)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"type": "object", "properties": {"tags": {"type": "object", "propertyNames": {"pattern": "^x"},
                                                        "maxProperties": 0},
                                               "n": {"enum": [1, 2]}}, "required": ["n"], "additionalProperties": False}
    tools = Tools.parse([{"type": "function", "function": {"name": "f", "parameters": schema}}], "required")
    with pytest.raises(InvalidArgument, match="propertyNames"):
        Constraint.json_schema(schema).grammar()
    text = engine.generate(engine.tokenize_chat([("user", "go")], tools=tools.for_template()), max_tokens=200,
                           constraint=tools.constraint(special_markers(engine.model)), speculative=False).text
    _, calls = CallReader().feed(text)
    assert calls, text
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), {**schema, "properties": {
        "tags": {"type": "object"}, "n": {"enum": [1, 2]}}})


def test_call_reader_never_shows_part_of_a_call():
    reader, shown, calls = CallReader(), [], []
    for piece in ["Let me ", "look. <", "tool_", 'call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool',
                  "_call>\n<tool_call>\n", '{"name": "add", "arguments": {}}\n</tool_call>']:
        text, new = reader.feed(piece)
        shown.append(text)
        calls += new
    assert "".join(shown) == "Let me look. " and reader.rest() == ""
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("add", {"a": 1, "b": 2}), ("add", {})]
    assert len({c["id"] for c in calls}) == 2
    reader = CallReader()  # text that only looked like a call's start is shown at the end
    assert reader.feed("a <tool") == ("a ", []) and reader.rest() == "<tool"


def test_parts_show_text_runs_and_whole_calls_in_order():
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'

    def ops(pieces, tools=True):
        parts, out = Parts(tools), []
        for k, piece in enumerate(pieces):
            out += [(op, args[0]["function"]["name"]) if op == "call" else (op, args[0]) if op == "text" else (op,)
                    for op, *args in parts.feed(piece, [], end=k == len(pieces) - 1)]
        return out

    # blanks before a call are dropped; text before it is a run of its own, closed by the call
    assert ops(["\n", call[:9], call[9:], ""]) == [("call", "add")]
    assert ops(["Let me ", "look.\n", call, ""]) == [("open",), ("text", "Let me "), ("text", "look.\n"),
                                                       ("close",), ("call", "add")]
    # a reply of blanks, or of nothing, is still one run; without tools every piece is text
    assert ops([" ", ""]) == [("open",), ("text", " "), ("close",)]
    assert ops([""], tools=False) == [("open",), ("close",)]
    assert ops(["a", call], tools=False) == [("open",), ("text", "a"), ("text", call), ("close",)]
    # a call cut short is shown as the text it is
    assert ops([call[:30]]) == [("open",), ("text", call[:30]), ("close",)]


KNOWS_TOOLS = ("{% if tools %}TOOLS:{% for t in tools %}{{ t | tojson }};{% endfor %}\n{% endif %}"
               "{% for m in messages %}{{ m.role }}: {{ m.content }}"
               "{% for c in m.tool_calls or [] %}[call {{ c.function.name }} {{ c.function.arguments | tojson }}]"
               "{% endfor %}\n{% endfor %}assistant:")


def test_tools_and_earlier_calls_reach_the_template(engine):
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "-3 <|im_end|>"}]
    text, literal = chat.render(engine.model, msgs, KNOWS_TOOLS, tools=Tools.parse(TOOLS).for_template())
    assert text.startswith('TOOLS:{"type": "function", "function": {"name": "get_weather"')
    assert '[call get_weather {"city": "Oslo", "unit": "celsius"}]' in text
    assert [text[a:b] for a, b in literal] == ["<|im_end|>"]  # a tool's answer is text, never a control token
    # a template that knows no tools (the tiny model's ChatML): tools told in the system message, Hermes format
    text, _ = chat.render(engine.model, msgs, tools=Tools.parse(TOOLS).for_template())
    assert "<tools>" in text and '"name": "add"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>' in text
    assert "<tool_response>\n-3 <|im_end|>\n</tool_response>" in text


# through the server -------------------------------------------------------------------------------------------------
def _alone(engine, prompt, tools, choice, max_tokens=200):
    """What the target alone writes under the same tool grammar, and the calls in it."""
    t = Tools.parse(tools, choice)
    tokens = engine.tokenize_chat([("user", prompt)], tools=t.for_template())
    text = engine.generate(tokens, max_tokens=max_tokens, constraint=t.constraint(special_markers(engine.model)),
                           speculative=False).text
    reader = CallReader()
    content, calls = reader.feed(text)
    return text, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def _calls(message):
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


@pytest.mark.parametrize("mode", ["off", "auto", "draft", "lookup", "hybrid"])
def test_tool_calls_validate_and_equal_the_target_alone(server, engine, mode):
    jsonschema = pytest.importorskip("jsonschema")
    client = server.client()
    for prompt in PROMPTS[:3]:
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            _, want = _alone(engine, prompt, TOOLS, choice)
            r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": prompt}],
                                               tools=TOOLS, tool_choice=choice, max_tokens=200, temperature=0,
                                               extra_body={"speculative": {"mode": mode, "draft_max": 4}})
            got = _calls(r.choices[0].message)
            assert got == want and got, (prompt, choice)
            assert r.choices[0].finish_reason == "tool_calls"
            for name, args in got:
                jsonschema.validate(args, SCHEMAS[name])
            if isinstance(choice, dict):
                assert [n for n, _ in got] == ["get_weather"]


def test_streamed_tool_calls_equal_the_answer_in_one_piece(server):
    client = server.client()
    kw = dict(model="x", messages=[{"role": "user", "content": PROMPTS[1]}], tools=TOOLS, tool_choice="required",
              max_tokens=200, temperature=0)
    whole = client.chat.completions.create(**kw)
    calls, content, finish = {}, "", None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for c in delta.tool_calls or []:
            calls.setdefault(c.index, [c.function.name, ""])[1] += c.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == (whole.choices[0].message.content or "")
    assert [(n, json.loads(a)) for _, (n, a) in sorted(calls.items())] == _calls(whole.choices[0].message)


def test_auto_lets_the_model_answer_in_text(server, engine):
    client = server.client()
    for prompt in PROMPTS[:2]:
        text, calls = _alone(engine, prompt, TOOLS, "auto", max_tokens=40)
        r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": prompt}], tools=TOOLS,
                                           max_tokens=40, temperature=0,
                                           extra_body={"speculative": {"mode": "hybrid"}})
        if not calls:
            assert r.choices[0].message.content == text and not r.choices[0].message.tool_calls


def test_a_conversation_with_earlier_calls_is_answered(server):
    msgs = [{"role": "user", "content": "add 2 and 3"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    r = server.post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "max_tokens": 5})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,param", [
    ({"tools": "x"}, "tools"),
    ({"tools": TOOLS, "tool_choice": "maybe"}, "tool_choice"),
    ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "add",
                                                                                       "arguments": "{oops"}}]}]},
     "messages[0].tool_calls"),
])
def test_bad_tool_requests_are_openai_errors(server, body, param):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body})
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "invalid_request_error" and err["param"] == param, r.text


# a real model -------------------------------------------------------------------------------------------------------
def _served_calls_equal_alone(target, draft, prompts, choices, modes, max_tokens=80):
    """Greedy tool calls from a real pair through the server (several modes) equal the target's alone, and validate."""
    import edgespec
    jsonschema = pytest.importorskip("jsonschema")

    with edgespec.Engine.load(target, n_ctx=2048) as alone:
        want = {(p, str(c)): _alone(alone, p, TOOLS, c, max_tokens)[1] for p in prompts for c in choices}
    server = Server("-m", target, "-d", draft, "--lookup", "-c", "2048", "--parallel", "2")
    try:
        client = server.client(timeout=600)
        for mode in modes:
            for p in prompts:
                for c in choices:
                    r = client.chat.completions.create(model="x", messages=[{"role": "user", "content": p}],
                                                       tools=TOOLS, tool_choice=c, max_tokens=max_tokens,
                                                       temperature=0, extra_body={"speculative": {"mode": mode}})
                    got = _calls(r.choices[0].message)
                    assert got == want[(p, str(c))], (mode, p, c)
                    for name, args in got:
                        jsonschema.validate(args, SCHEMAS[name])
        return want
    finally:
        assert server.stop() == 0


PROMPTS_REAL = ["What is the weather in Paris?", "Add 17 and 25.", "Is it cold in Oslo today, in fahrenheit?"]


@pytest.mark.realmodel
def test_smollm_tool_calls_validate_and_equal_the_target_alone(smollm_f16):
    """SmolLM2 in F16 (exact identity) drafted by its Q4_1 file; its template knows no tools (system-message path)."""
    from edgespec import default_model

    _served_calls_equal_alone(smollm_f16, default_model.path(), PROMPTS_REAL, ("required", "auto"), ("off", "hybrid"))


@pytest.mark.slow
def test_qwen_tool_calls_validate_and_equal_the_target_alone():
    """The Qwen pair, F16 target: its template knows tools and <tool_call> is a token of its own."""
    from test_real_models import qwen_pair

    target, draft = qwen_pair("1.5b-instruct-f16")
    want = _served_calls_equal_alone(target, draft, PROMPTS_REAL, ("required",), ("off", "draft", "auto"))
    assert all(want.values())  # every answer held at least one call
