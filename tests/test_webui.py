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
    for name in ("markdown.js", "chat.js"):  # (in this order: chat.js uses markdown.js)
        assert f'<script src="{name}" defer></script>' in page.text
        script = httpx.get(keyed.url + "/" + name, timeout=10)
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert script.content == (WEB / name).read_bytes()
    assert page.text.index('src="markdown.js"') < page.text.index('src="chat.js"')
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
        assert httpx.get(s.url + "/markdown.js", timeout=10).status_code == 404
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
const chat = require(process.argv[2]), md = require(require("path").join(process.argv[2], "..", "markdown.js"));
const base = process.argv[3], key = "sesame";
(async () => {
  const out = {};
  out.events = chat.takeEvents('data: {"a":1}\r\n\r\ndata: [DONE]\n\ndata: {"b"');
  out.body = chat.requestBody({system: " be brief ", temperature: "0", max_tokens: "12", mode: "draft"},
    [{role: "user", content: "hi"}, {role: "assistant", content: ""}, {role: "assistant", content: "yo", reasoning: "hm"}]);
  out.pieces = [md.pieces("Here:\n```python\ndef f():\n```\nDone."), md.pieces("so\n```js\nlet x")];
  out.plain = chat.requestBody({system: "", temperature: "", max_tokens: "", mode: "auto"}, [{role: "user", content: "x"}]);
  let text = "";
  const body = {messages: [{role: "user", content: "Hello there"}], temperature: 0, max_tokens: 20};
  out.end = await chat.streamChat(fetch, base, body, {apiKey: key, onDelta(c) { text += c; }});
  out.text = text;
  out.stats = chat.statsLine(out.end);
  out.progress = [];  // a prompt of several batches: how far its reading has come, before the reply
  await chat.streamChat(fetch, base, {messages: [{role: "user", content: "A slow fox naps. ".repeat(45)}],
    max_tokens: 2}, {apiKey: key, onDelta() { out.progress.push("text"); }, onProgress(p) { out.progress.push(p); }});
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
    reading = out["progress"][:out["progress"].index("text")]
    assert len(reading) >= 2 and reading[-1]["processed"] == reading[-1]["total"] > reading[0]["processed"]
    again = keyed.client(api_key="sesame").chat.completions.create(
        model="x", messages=[{"role": "user", "content": "Hello there"}], temperature=0, max_tokens=20)
    assert again.choices[0].message.content == want.choices[0].message.content  # (the stopped stream left no trace)


MARKDOWN = r"""
const md = require(require("path").join(process.argv[2], "..", "markdown.js"));
const texts = JSON.parse(require("fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(texts.map(md.blocks)));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's script")
def test_replies_markdown_is_read_as_models_write_it(tmp_path):
    """What the page makes elements of: headings, lists (nested, numbered from where they start), quotes, rules,
    tables, `code`, **strong**, *em*, http(s) links; arithmetic, snake_case, an unclosed mark, HTML and a link to
    javascript: stay text."""
    driver = tmp_path / "md.js"
    driver.write_text(MARKDOWN)
    texts = ["# Title #\nSome **bold** and *em* and `a | b` and [site](https://x.org/a?b=1).",
             "- a\n- b **c**\n  - nested\n  going on\n\n3. three\n4) four",
             "> quoted *word*\n> more\n\n---\n\n| h1 | h2 |\n|:---|---:|\n| x | **y** |\nafter",
             "2 * 3 * 4 = 24, snake_case_name, a*b*c, __init__ and **open",
             "<b>html</b> & [x](javascript:alert(1)) [y](ftp://h/f)"]
    r = subprocess.run(["node", str(driver), str(WEB / "chat.js")], input=json.dumps(texts), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    title, lists, quote, prose, html = json.loads(r.stdout)

    def text(kids):
        return [(k["t"], k.get("text") or text(k["kids"]), *([k["href"]] if "href" in k else [])) for k in kids]

    assert title[0]["b"] == "h" and title[0]["level"] == 1 and text(title[0]["kids"]) == [("text", "Title")]
    assert text(title[1]["kids"]) == [("text", "Some "), ("strong", [("text", "bold")]), ("text", " and "),
                                      ("em", [("text", "em")]), ("text", " and "), ("code", "a | b"),
                                      ("text", " and "), ("link", [("text", "site")], "https://x.org/a?b=1"),
                                      ("text", ".")]
    ul, ol = lists
    assert ul["b"] == "ul" and [it["depth"] for it in ul["items"]] == [0, 0, 1]
    assert text(ul["items"][1]["kids"]) == [("text", "b "), ("strong", [("text", "c")])]
    assert text(ul["items"][2]["kids"]) == [("text", "nested\ngoing on")]
    assert ol["b"] == "ol" and ol["start"] == 3 and len(ol["items"]) == 2
    assert [b["b"] for b in quote] == ["quote", "hr", "table", "p"]
    assert text(quote[0]["kids"]) == [("text", "quoted "), ("em", [("text", "word")]), ("text", "\nmore")]
    table = quote[2]
    assert [text(c) for c in table["head"]] == [[("text", "h1")], [("text", "h2")]]
    assert [text(c) for c in table["rows"][0]] == [[("text", "x")], [("strong", [("text", "y")])]]
    assert text(prose[0]["kids"]) == [("text", "2 * 3 * 4 = 24, snake_case_name, a"), ("em", [("text", "b")]),
                                      ("text", "c, "), ("strong", [("text", "init")]), ("text", " and **open")]
    assert text(html[0]["kids"]) == [("text", "<b>html</b> & [x](javascript:alert(1)) [y](ftp://h/f)")]


def _jsdom() -> bool:
    return shutil.which("node") is not None and subprocess.run(
        ["node", "-e", "require.resolve('jsdom')"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _jsdom(), reason="needs Node.js with jsdom (npm install jsdom; NODE_PATH)")
def test_the_page_as_a_user_drives_it(keyed):
    """A refused send (no key) puts the message back with the reason; with the key a reply streams in with its
    figures and the markup typed stays text; Stop keeps what came; a reload keeps the conversation, the settings
    and a message not sent, and shows a reply's Markdown as elements (fenced code as a code block, headings, lists,
    a table, a link; HTML the model wrote and a javascript: link still text); Copy and Regenerate; a conversation
    past the context is sent without its oldest exchanges (the page keeps them); New chat keeps it among the
    earlier conversations to open again, Delete asks first; full storage is said (tests/webui_dom.js)."""
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
