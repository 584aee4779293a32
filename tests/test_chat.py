"""`edgespec chat`: the Conversation it keeps, piped use, and a real terminal session driven through a pty."""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from edgespec import EdgespecError
from edgespec.chat import Conversation


def test_conversation_round_trips_through_json(tmp_path):
    c = Conversation("be brief")
    c.add("user", "héllo")
    c.add("assistant", "hi")
    c.save(tmp_path / "c.json")
    d = Conversation.load(tmp_path / "c.json")
    assert (d.system, d.turns) == ("be brief", [("user", "héllo"), ("assistant", "hi")])


def test_dropping_the_oldest_exchange_keeps_the_system_prompt_and_the_history():
    c = Conversation("sys", [("user", "a"), ("assistant", "b"), ("user", "c")])
    assert c.drop_oldest_exchange() == 2 and c.messages() == [("system", "sys"), ("user", "c")]
    assert not c.drop_oldest_exchange()
    # what left the model's window is still part of the conversation, and of what /save writes
    assert [m["content"] for m in json.loads(c.to_json())["messages"]] == ["sys", "a", "b", "c"]


def test_loading_a_broken_file_is_a_clear_error(tmp_path):
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(EdgespecError, match="is not a saved chat"):
        Conversation.load(tmp_path / "bad.json")
    with pytest.raises(EdgespecError, match="cannot read"):
        Conversation.load(tmp_path / "missing.json")


def test_piped_chat_answers_each_line_and_remembers(tiny_pair, tmp_path):
    save = tmp_path / "s.json"
    script = f"first message\n/stats\nsecond message\n/save {save}\n"
    r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-d", str(tiny_pair[1]),
                        "--fixed", "-n", "12", "-t", "0"], input=script, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    msgs = json.loads(save.read_text())["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert "session: 1 replies, 12 tokens" in r.stderr and "acceptance" in r.stderr
    assert "\x1b[" not in r.stdout  # no colour when not a terminal


def test_save_and_load_read_a_tilde_as_the_home_folder(tiny_pair, tmp_path):
    script = "hello\n/save ~/c.json\n/reset\n/load ~/c.json\n/stats\n"
    r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-n", "4", "-t", "0"],
                       input=script, capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert f"saved 2 messages to {tmp_path / 'c.json'}" in r.stderr and "loaded 2 messages" in r.stderr
    assert [m["role"] for m in json.loads((tmp_path / "c.json").read_text())["messages"]] == ["user", "assistant"]


def test_a_template_that_cannot_run_as_jinja_is_said_once(tiny_pair, tmp_path):
    """llama.cpp's rendering of the family it looks like stands in (chat.tokenize): the chat says so, once; a template
    that runs says nothing."""
    template = tmp_path / "t.jinja"
    template.write_text("{{ no_such_function() }}<|im_start|>{% for m in messages %}{{ m.content }}{% endfor %}")
    for fmt, noted in ((str(template), True), ("chatml", False)):
        r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-n", "3", "-t", "0",
                            "--chat-format", fmt], input="hi\nagain\n", capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("llama.cpp's built-in rendering of that template family is used instead") == noted, \
            r.stderr


class Terminal:
    """A program on a pseudo-terminal: what a person at a terminal sees and types (Ctrl-C included)."""

    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(sys.executable, [sys.executable, *args])
        self.buf = b""

    def read_until(self, marker: bytes, timeout: float = 60, after: bytes = b"") -> bytes:
        """Read the screen until marker shows (after the last occurrence of `after`, if given)."""
        if not self._read_while(lambda: marker not in (self.buf.rsplit(after, 1)[-1] if after else self.buf),
                                timeout):
            raise AssertionError(f"no {marker!r} within {timeout}s; screen so far: {self.buf[-2000:]!r}")
        return self.buf

    def read_more(self, n: int, timeout: float = 60) -> bytes:
        """Read until at least n more bytes have shown (a reply under way), whatever they are."""
        start = len(self.buf)
        self._read_while(lambda: len(self.buf) - start < n, timeout)
        return self.buf

    def _read_while(self, waiting, timeout: float) -> bool:
        """Read while waiting() holds; False if the time ran out first."""
        end = time.time() + timeout
        while waiting():
            if time.time() > end:
                return False
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self._add(os.read(self.fd, 65536))
                except OSError:
                    return True
        return True

    def _add(self, data: bytes) -> None:
        """What the screen shows: readline's switches of bracketed paste (on while it reads a line) are modes of the
        terminal, not text on it."""
        self.buf = (self.buf + data).replace(b"\x1b[?2004h", b"").replace(b"\x1b[?2004l", b"")

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = 30) -> int:
        end = time.time() + timeout
        while time.time() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.1)[0]:
                try:
                    self._add(os.read(self.fd, 65536))
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("did not exit")


def test_terminal_session_with_slash_commands_colour_and_utf8(tiny_pair, tmp_path):
    t = Terminal(["-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-d", str(tiny_pair[1]), "--fixed", "-n", "40",
                  "-t", "0"])
    t.read_until(b"/help for commands")
    t.type(b"/help\r")
    t.read_until(b"/save FILE")
    t.read_until(b"\n> ", after=b"/save FILE")
    t.type("tell me about Zürich ☃\r".encode())
    t.read_until("Zürich ☃\r\n".encode())  # (its echo first: a prompt found before it would be the last one)
    t.read_until(b"\n> ", after="Zürich ☃\r\n".encode())
    t.type(b"and then?\r")  # a second turn on the same caches
    t.read_until(b"and then?\r\n")
    t.read_until(b"\n> ", after=b"and then?\r\n")
    time.sleep(0.3)
    t.type(b"/stats\r")
    t.read_until(b"session: 2 replies")
    t.type(f"/save {tmp_path / 'c.json'}\r".encode())
    t.read_until(b"saved 4 messages")
    t.read_until(b"messages to " + str(tmp_path / "c.json").encode() + b"\x1b[0m\r\n> ")
    time.sleep(0.5)
    t.type(b"\x04")  # Ctrl-D leaves
    assert t.wait() == 0
    screen = t.buf
    screen.decode("utf-8")  # strict: a character split across tokens was never printed broken
    assert b"\x1b[36m" in screen  # drafted tokens are coloured on a terminal
    assert json.loads((tmp_path / "c.json").read_text())["messages"][0]["content"] == "tell me about Zürich ☃"


def test_a_message_of_several_lines_on_a_terminal(tiny_pair, tmp_path):
    """Pasted code is one message: pasted whole (the terminal's bracketed paste), between lines of three double
    quotes, or lines ending in a backslash."""
    t = Terminal(["-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-n", "3", "-t", "0", "--no-color"])
    t.read_until(b"/help for commands")
    for keys in (b"\x1b[200~pasted(\n  code)\x1b[201~", b"\r", b'"""def f(x):\r', b'\r', b"    return x  # not a /command\r", b'"""\r',
                 b"first\\\r", b"second\r", b'"""one line"""\r', b'""""""\r'):
        t.type(keys)
        time.sleep(0.2)
    t.read_until(b"> ", after=b'""""""')  # (the empty message asks nothing: the prompt again)
    time.sleep(0.3)
    t.type(f"/save {tmp_path / 'c.json'}\r".encode())
    t.read_until(b"\n> ", after=b"saved 8 messages")  # (Ctrl-D once the prompt is back, as a person would type it)
    time.sleep(0.5)
    t.type(b"\x04")
    assert t.wait() == 0
    users = [m["content"] for m in json.loads((tmp_path / "c.json").read_text())["messages"] if m["role"] == "user"]
    assert users == ["pasted(\n  code)", "def f(x):\n\n    return x  # not a /command", "first\nsecond", "one line"]


@pytest.mark.realmodel
def test_ctrl_c_stops_a_reply_keeps_it_and_the_chat_goes_on(tmp_path):
    from edgespec import default_model

    t = Terminal(["-m", "edgespec", "chat", "-m", str(default_model.path()), "-n", "3000", "-t", "0", "--no-color"])
    t.read_until(b"/help for commands")
    t.type(b"Write a very long story about a dragon who learns to count to one thousand.\r")
    # some of the reply (greedy SmolLM2 begins it so): counting bytes from the echoed line on, a busy machine's
    # reading line could take them all and leave 20 characters of reply
    t.read_until(b"Once upon a time", after=b"thousand.")
    t.read_more(60)
    assert b"\x1b[" not in t.buf.rsplit(b"thousand.", 1)[-1]  # --no-color: the reply as written (a reset code
    # after every token was printed)
    t.type(b"\x03")  # Ctrl-C mid-reply
    t.read_until(b"the reply so far is kept")
    t.type(f"/save {tmp_path / 'c.json'}\r".encode())
    t.read_until(f"saved 2 messages to {tmp_path / 'c.json'}\r\n> ".encode())
    # A signal landing between the prompt's printing and readline's wait is only seen at the next key (a Python
    # readline race); a person is never that fast, so the test pauses as a person would.
    time.sleep(0.5)
    t.type(b"\x03")
    t.read_until(b"Ctrl-C again or Ctrl-D to leave)\r\n> ")
    time.sleep(0.5)
    t.type(b"\x03")  # a second Ctrl-C at the prompt leaves
    assert t.wait() == 0, t.buf[-3000:]
    reply = json.loads((tmp_path / "c.json").read_text())["messages"][1]
    assert reply["role"] == "assistant" and len(reply["content"]) > 20


def test_piped_chat_context_full_reset_system_and_load(tiny_pair, tmp_path):
    """A 256-token context fills after a few turns: the oldest exchanges go, the chat goes on and says so."""
    saved = tmp_path / "s.json"
    saved.write_text(json.dumps({"messages": [{"role": "system", "content": "from file"},
                                              {"role": "user", "content": "earlier question"},
                                              {"role": "assistant", "content": "earlier answer"}]}))
    long = "tell me more about the weather today " * 3
    script = "\n".join([long] * 4 + ["/system be brief", "/reset", "short", f"/load {saved}", "next", f"/save {saved}"])
    r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-c", "256", "-n", "60",
                        "-t", "0"], input=script + "\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "context full: dropped the" in r.stderr
    assert "system prompt set" in r.stderr and "conversation cleared" in r.stderr and "loaded 2 messages" in r.stderr
    msgs = json.loads(saved.read_text())["messages"]
    assert [m["content"] for m in msgs[:4]] == ["from file", "earlier question", "earlier answer", "next"]
    assert r.stdout.endswith("\n")  # replies on stdout (random-model text: not countable by lines)


def test_what_left_the_context_is_still_saved_and_counted_right(tiny_pair, tmp_path):
    save = tmp_path / "all.json"
    long = "tell me more about the weather today " * 3
    script = "\n".join([f"{long} {i}" for i in range(4)] + [f"/save {save}"]) + "\n"
    r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-c", "256", "-n", "60",
                        "-t", "0"], input=script, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    msgs = json.loads(save.read_text())["messages"]
    assert [m["content"] for m in msgs if m["role"] == "user"] == [f"{long} {i}" for i in range(4)]
    assert len(msgs) == 8
    dropped = [int(n) for n in re.findall(r"dropped the oldest (\d+) message", r.stderr)]
    assert dropped and all(n % 2 == 0 for n in dropped)  # a user message and its reply, counted as two
    assert f"saved 8 messages to {save}" in r.stderr


def test_an_unexpected_error_in_a_turn_still_keeps_the_conversation(tmp_path, monkeypatch):
    """A bug of ours mid-reply ends the chat (exit 70, one line), but what was said is saved first."""
    import io
    from types import SimpleNamespace

    from edgespec import GREEDY
    from edgespec.repl import Repl

    class Broken:
        target = SimpleNamespace(n_ctx=4096)

        def tokenize_chat(self, messages, template=None):
            return [1, 2, 3]

        def stream(self, tokens, **kw):
            yield SimpleNamespace(text="half a rep", from_draft=False, result=None)
            raise RuntimeError("a bug")

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    repl = Repl(Broken(), GREEDY, 10, (), None, None, False)
    with pytest.raises(RuntimeError):
        repl.run()
    saved = list((tmp_path / "chats").glob("chat-*.json"))
    assert len(saved) == 1
    assert json.loads(saved[0].read_text())["messages"] == [{"role": "user", "content": "hello"},
                                                            {"role": "assistant", "content": "half a rep"}]


def test_a_system_prompt_from_the_settings_does_not_break_generate(tiny_pair, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('system = "Answer briefly."\n')
    env = {**os.environ, "EDGESPEC_CONFIG": str(cfg)}
    r = subprocess.run([sys.executable, "-m", "edgespec", "generate", "-m", str(tiny_pair[0]), "-p", "hi", "-n", "3"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "edgespec", "generate", "-m", str(tiny_pair[0]), "-p", "hi", "-n", "3",
                        "--system", "x"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "--system needs --chat" in r.stderr


def test_set_changes_the_replies_from_then_on_and_refuses_bad_values(tiny_pair, tmp_path):
    """/set NAME VALUE, as Ollama's /set parameter: greedy from then on (the reply is the target's greedy text),
    max_tokens obeyed; a bad name or value is a line that says so and changes nothing."""
    import edgespec

    save = tmp_path / "c.json"
    script = "\n".join(["/set temperature 0", "/set max_tokens 7", "/set top_k lots", "/set top_p 3", "/set colour 1",
                        "/set", "hello there", f"/save {save}"]) + "\n"
    r = subprocess.run([sys.executable, "-m", "edgespec", "chat", "-m", str(tiny_pair[0]), "-c", "256"],
                       input=script, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "/set top_k: 'lots' is not an integer (unchanged)" in r.stderr
    assert "/set top_p: top_p must be in [0, 1], got 3.0 (unchanged)" in r.stderr
    assert "unknown setting colour" in r.stderr
    assert "temperature 0.0, top_k 40, top_p 0.95" in r.stderr and "max_tokens 7" in r.stderr
    reply = json.loads(save.read_text())["messages"][-1]["content"]
    with edgespec.Engine.load(tiny_pair[0], n_ctx=256, n_threads=2) as e:
        want = e.generate(e.tokenize_chat([("user", "hello there")]), max_tokens=7, speculative=False)
    assert reply == want.text
