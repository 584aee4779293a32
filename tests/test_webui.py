"""The chat page `edgespec serve` gives a browser at /: served without a key to a browser alone, locked down by its
headers; its script (edgespec/web/chat.js) run in Node against a real server: a streamed reply equal to the API's
answer, the server's refusals as their messages, a stop mid-reply."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

import edgespec

WEB = Path(edgespec.__file__).parent / "web"


@pytest.fixture(scope="module")
def keyed(tiny_pair):
    from http_server import Server

    s = Server("-m", tiny_pair[0], "-d", tiny_pair[1], "--lookup", "-c", "1024", "--parallel", "2", "-k", "4",
               "--threads", "2", "--api-key", "sesame")
    yield s
    assert s.stop() == 0


def test_a_browser_gets_the_page_and_clients_the_greeting(keyed):
    page = httpx.get(keyed.url + "/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")  # (no key: it is static)
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy and "default-src 'none'" in policy
    assert '<script src="chat.js" defer></script>' in page.text
    script = httpx.get(keyed.url + "/chat.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.content == (WEB / "chat.js").read_bytes()
    for accept in ("*/*", "application/json", None):  # Ollama's clients, curl, Python's
        r = httpx.get(keyed.url + "/", headers={"Accept": accept} if accept else {}, timeout=10)
        assert r.status_code == 200 and r.text.startswith("edgespec is running"), accept


def test_every_element_the_script_looks_up_is_on_the_page():
    page, script = (WEB / "index.html").read_text(), (WEB / "chat.js").read_text()
    wanted = set(re.findall(r'\$\("([\w-]+)"\)', script))
    assert wanted >= {"log", "input", "send", "notice", "new", "mode"}
    assert wanted <= set(re.findall(r'id="([\w-]+)"', page))


def test_no_webui_leaves_the_greeting_alone(tiny_pair):
    from http_server import Server

    s = Server("-m", tiny_pair[0], "-c", "512", "--threads", "2", "--no-webui")
    try:
        r = httpx.get(s.url + "/", headers={"Accept": "text/html"}, timeout=10)
        assert r.text.startswith("edgespec is running")
        assert httpx.get(s.url + "/chat.js", timeout=10).status_code == 404
    finally:
        assert s.stop() == 0


def _node(script: str, url: str, tmp_path) -> dict:
    """What a Node script that requires the page's chat.js (argv[2]) and talks to the server at argv[3] prints, as
    JSON."""
    driver = tmp_path / "driver.js"
    driver.write_text(script)
    r = subprocess.run(["node", str(driver), str(WEB / "chat.js"), url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


DRIVER = r"""
const chat = require(process.argv[2]);
const base = process.argv[3], key = "sesame";
(async () => {
  const out = {};
  out.events = chat.takeEvents('data: {"a":1}\r\n\r\ndata: [DONE]\n\ndata: {"b"');
  out.body = chat.requestBody({system: " be brief ", temperature: "0", max_tokens: "12", mode: "draft"},
    [{role: "user", content: "hi"}, {role: "assistant", content: ""}, {role: "assistant", content: "yo", reasoning: "hm"}]);
  out.pieces = [chat.pieces("Here:\n```python\ndef f():\n```\nDone."), chat.pieces("so\n```js\nlet x")];
  out.plain = chat.requestBody({system: "", temperature: "", max_tokens: "", mode: "auto"}, [{role: "user", content: "x"}]);
  let text = "";
  const body = {messages: [{role: "user", content: "Hello there"}], temperature: 0, max_tokens: 20};
  out.end = await chat.streamChat(fetch, base, body, {apiKey: key, onDelta(c) { text += c; }});
  out.text = text;
  out.stats = chat.statsLine(out.end);
  const refusal = async (b, k) => {
    try { await chat.streamChat(fetch, base, b, {apiKey: k, onDelta() {}}); return null; }
    catch (e) { return [e.message, e.status]; }
  };
  out.refused = await refusal({messages: "x"}, key);
  out.badKey = await refusal(body, "wrong");
  const controller = new AbortController();
  let n = 0;
  try {
    await chat.streamChat(fetch, base, {messages: [{role: "user", content: "Tell me a long story"}], max_tokens: 300},
      {apiKey: key, signal: controller.signal, onDelta() { if (++n === 3) controller.abort(); }});
    out.stopped = "not stopped";
  } catch (e) { out.stopped = e.name; }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's script")
def test_the_pages_script_streams_a_reply_as_the_api_answers_it(keyed, tmp_path):
    out = _node(DRIVER, keyed.url, tmp_path)
    assert out["events"] == [['{"a":1}', "[DONE]"], 'data: {"b"']
    assert out["body"] == {"messages": [{"role": "system", "content": " be brief "}, {"role": "user", "content": "hi"},
                                        {"role": "assistant", "content": "yo"}],
                           "temperature": 0, "max_tokens": 12, "speculative": {"mode": "draft"}}
    assert out["pieces"] == [  # (code between fences, one still open while a reply streams)
        [{"code": False, "text": "Here:\n"}, {"code": True, "lang": "python", "text": "def f():"},
         {"code": False, "text": "Done."}],
        [{"code": False, "text": "so\n"}, {"code": True, "lang": "js", "text": "let x"}]]
    assert out["plain"] == {"messages": [{"role": "user", "content": "x"}]}  # (unset: the server's defaults)
    want = keyed.client(api_key="sesame").chat.completions.create(
        model="x", messages=[{"role": "user", "content": "Hello there"}], temperature=0, max_tokens=20)
    assert out["text"] == want.choices[0].message.content
    end = out["end"]
    assert not end["cut"] and end["finish_reason"] == want.choices[0].finish_reason
    assert end["timings"]["predicted_n"] == want.usage.completion_tokens == end["usage"]["completion_tokens"]
    assert re.fullmatch(r"\d+ tokens · [\d.]+ tok/s · (\d+ of \d+ drafted tokens accepted|no drafts)"
                        r"( · \d+ of \d+ prompt tokens cached)?( · stopped at the token limit)?", out["stats"])
    assert out["refused"] == ["'messages' must be a non-empty list of {role, content} objects", 400]
    assert out["badKey"][1] == 401 and "API key" in out["badKey"][0]
    assert out["stopped"] == "AbortError"
    again = keyed.client(api_key="sesame").chat.completions.create(
        model="x", messages=[{"role": "user", "content": "Hello there"}], temperature=0, max_tokens=20)
    assert again.choices[0].message.content == want.choices[0].message.content  # (the stopped stream left no trace)


def _jsdom() -> bool:
    return shutil.which("node") is not None and subprocess.run(
        ["node", "-e", "require.resolve('jsdom')"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _jsdom(), reason="needs Node.js with jsdom (npm install jsdom; NODE_PATH)")
def test_the_page_as_a_user_drives_it(keyed):
    """A refused send (no key) puts the message back with the reason; with the key a reply streams in with its
    figures and the markup typed stays text; Stop keeps what came; a reload keeps the conversation, the settings
    and a message not sent, and shows a reply's fenced code as a code block (its text still text); a conversation
    past the context is sent without its oldest exchanges (the page keeps them); New chat clears it
    (tests/webui_dom.js)."""
    r = subprocess.run(["node", str(Path(__file__).parent / "webui_dom.js"), keyed.url], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr + r.stdout


THINKING = r"""
const chat = require(process.argv[2]);
(async () => {
  let content = "", reasoning = "";
  const body = {messages: [{role: "user", content: "hi"}, {role: "assistant", content: "<think>"}], max_tokens: 12,
                temperature: 0};
  const end = await chat.streamChat(fetch, process.argv[3], body, {onDelta(c, r) { content += c; reasoning += r; }});
  console.log(JSON.stringify({content, reasoning, end}));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's script")
def test_the_pages_script_keeps_a_thinking_models_reasoning_apart(think_target, tmp_path):
    """reasoning_content deltas reach the page as reasoning (shown folded, apart from the answer), as the API's
    whole answer has them."""
    from http_server import Server

    s = Server("-m", think_target, "-c", "1024", "--threads", "2", "--no-request-log")
    try:
        out = _node(THINKING, s.url, tmp_path)
        want = s.client().chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>"}],
            max_tokens=12, temperature=0).choices[0].message
        assert out["reasoning"].strip() == want.reasoning_content and out["reasoning"].strip()
        assert out["content"] == (want.content or "") and not out["end"]["cut"]
    finally:
        assert s.stop() == 0
