"""Signals and broken output streams, as a user meets them: SIGTERM and SIGHUP keep what was generated (and an
unsaved chat), Ctrl-C at any moment is exit 130 without a traceback, a full disk or a closed pipe on stdout is one
line (or, for a pipe, silence), never a traceback."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from http_server import ignoring

LONG = ["-c", "16384", "-n", "16000", "-t", "0", "--no-spec"]  # the tiny model writes for several seconds


def start(args, env=None, ignore=(), **kw):
    return subprocess.Popen([sys.executable, "-m", "edgespec", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=kw.pop("stdin", subprocess.DEVNULL),
                            env={**os.environ, **(env or {})}, preexec_fn=ignoring(ignore), **kw)


def wait_for_output(proc, timeout=30):
    """Block until the program has written something to stdout (the model is loaded and generating)."""
    os.set_blocking(proc.stdout.fileno(), False)
    end, got = time.time() + timeout, b""
    while time.time() < end and not got:
        try:
            got = proc.stdout.read(1) or b""
        except BlockingIOError:
            pass
        time.sleep(0.05)
    os.set_blocking(proc.stdout.fileno(), True)
    assert got, "no output"
    return got


@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_during_generate_json_prints_what_was_generated(tiny_pair, sig, rc):
    proc = start(["generate", "-m", tiny_pair[0], "-p", "Once upon a time", *LONG, "--json"])
    time.sleep(2.0)
    assert proc.poll() is None, "finished before the signal: make the generation longer"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == rc, err
    data = json.loads(out)
    assert data["finish_reason"] == ("interrupted" if sig == signal.SIGINT else "terminated")
    assert data["tokens"] and data["text"]  # (hundreds on an idle machine)
    assert b"Traceback" not in err and err.count(b"\n") == 1


def test_sigterm_during_streamed_text_keeps_the_text(tiny_pair):
    proc = start(["generate", "-m", tiny_pair[0], "-p", "Once upon a time", *LONG])
    first = wait_for_output(proc)
    time.sleep(0.5)
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.decode().strip() == "edgespec: terminated", err
    assert len(first + out) > 20 and (first + out).endswith(b"\n")


@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_chat_saves_the_unsaved_conversation(tiny_pair, tmp_path, sig, rc):
    proc = start(["chat", "-m", tiny_pair[0], *LONG], env={"EDGESPEC_HOME": str(tmp_path)}, stdin=subprocess.PIPE)
    proc.stdin.write("first question\n".encode())
    proc.stdin.flush()
    wait_for_output(proc)  # the reply is being written
    time.sleep(0.5)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == rc, err
    saved = list((tmp_path / "chats").glob("chat-*.json"))
    assert len(saved) == 1, err
    msgs = json.loads(saved[0].read_text())["messages"]
    assert msgs[0] == {"role": "user", "content": "first question"}
    assert msgs[1]["role"] == "assistant" and msgs[1]["content"]  # the partial reply too
    assert f"saved to {saved[0]}".encode() in err and b"Traceback" not in err


def test_a_signal_with_nothing_unsaved_writes_nothing(tiny_pair, tmp_path):
    proc = start(["chat", "-m", tiny_pair[0]], env={"EDGESPEC_HOME": str(tmp_path)}, stdin=subprocess.PIPE)
    time.sleep(1.5)
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == 143 and not (tmp_path / "chats").exists()


@pytest.mark.parametrize("delay", [0.3, 0.6, 1.0])
def test_ctrl_c_at_any_moment_of_start_up_is_exit_130(tiny_pair, delay):
    """Imports, model load, prefill: wherever Ctrl-C lands it is one line and exit 130 (never swallowed)."""
    proc = start(["generate", "-m", tiny_pair[0], "-p", "Once upon a time", *LONG])
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and err.strip().endswith(b"edgespec: interrupted")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_the_parent_ignored_stays_ignored(tiny_pair, sig):
    """`nohup edgespec serve &` must outlive its terminal (SIGHUP ignored), a shell script's background job ignores
    Ctrl-C: a signal ignored when edgespec starts stays ignored, at start-up as later (it used to be ignored only
    until the handlers were in: 0 or 129/130 by timing)."""
    proc = start(["generate", "-m", tiny_pair[0], "-p", "Once upon a time", "-n", "1500", "-t", "0", "--no-spec"],
                  ignore=(sig,))
    time.sleep(0.02)
    proc.send_signal(sig)  # while it starts
    wait_for_output(proc)
    proc.send_signal(sig)  # while it writes
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err.strip().endswith(b"finish: length"), err


IMPORT_SIGNAL = """
import os, signal, sys
class Signal:  # sends the signal while the command line's own modules import
    def find_spec(self, name, path=None, target=None):
        if name == "edgespec.options":
            os.kill(os.getpid(), signal.{sig})
        return None
sys.meta_path.insert(0, Signal())
sys.argv = ["edgespec", "generate", "-m", {model!r}, "-p", "hi", "-n", "4"]
from edgespec.exits import launch
launch()
"""


@pytest.mark.parametrize("sig,rc,word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_a_signal_while_the_command_line_imports_is_one_line(tiny_pair, sig, rc, word):
    """Before the handlers of exits.run are in place (click, the options importing: on a busy machine a Ctrl-C in
    the first 0.1-0.2 s was a traceback): the signal is held, then ends the process as later."""
    proc = subprocess.run([sys.executable, "-c", IMPORT_SIGNAL.format(sig=sig, model=str(tiny_pair[0]))],
                          capture_output=True, timeout=60)
    assert proc.returncode == rc, proc.stderr
    assert proc.stderr.decode().strip() == f"edgespec: {word}" and not proc.stdout


DROPPED_INTERRUPT = """
import os, signal, time, click
from edgespec.exits import run

class Finalised:
    def __del__(self):  # Python can only print and drop an exception raised here
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)

@click.command()
def work():
    Finalised()
    time.sleep(5)
    print("ran to the end")

run(work, [], KeyboardInterrupt)
"""


def test_an_interrupt_python_would_drop_still_stops_the_command():
    """Ctrl-C landing in a __del__ (or a ctypes callback) used to be printed and dropped, the command running on to
    its end with exit 0 (seen once at start-up): it is sent again and stops the command."""
    proc = subprocess.run([sys.executable, "-c", DROPPED_INTERRUPT], capture_output=True, timeout=60)
    assert proc.returncode == 130 and b"ran to the end" not in proc.stdout, proc.stderr
    assert proc.stderr.decode().strip() == "edgespec: interrupted"


def test_the_cli_starts_without_loading_llama_cpp():
    """Keeps the window in which Ctrl-C could land outside the CLI's own handling to a fraction of a second."""
    code = "import sys, edgespec.cli; assert 'llama_cpp' not in sys.modules and 'numpy' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_ctrl_c_during_a_model_load_stops_the_load(tiny_pair, monkeypatch, request):
    """SIGINT arriving inside llama.cpp's load used to be swallowed by a ctypes callback (exit 0 later)."""
    from edgespec import backend

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:  # ignored under nohup or a background job
        old = signal.signal(signal.SIGINT, signal.default_int_handler)
        request.addfinalizer(lambda: signal.signal(signal.SIGINT, old))

    real = backend.ll.llama_model_load_from_file
    seen = {}

    def load(path, params):
        os.kill(os.getpid(), signal.SIGINT)  # arrives while "inside" the C call
        time.sleep(0.05)
        seen["kept_going"] = params.progress_callback(0.5, None)  # what llama.cpp would ask at its next step
        return real(path, params) if seen["kept_going"] else None

    monkeypatch.setattr(backend.ll, "llama_model_load_from_file", load)
    with pytest.raises(KeyboardInterrupt):
        backend.Model(tiny_pair[0])
    assert seen["kept_going"] is False
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_stdout_on_a_full_disk_is_one_line(tiny_pair):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "edgespec", "generate", "-m", str(tiny_pair[0]), "-p", "hi",
                            "-n", "50"], stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 1
    assert r.stderr.decode() == "edgespec: error: cannot write the output: No space left on device\n"


def test_a_closed_pipe_stops_quietly(tiny_pair):
    proc = start(["generate", "-m", tiny_pair[0], "-p", "Once upon a time", *LONG])
    wait_for_output(proc)
    proc.stdout.close()  # like `edgespec generate ... | head -c 1`
    proc.wait(timeout=60)
    assert proc.returncode == 1 and proc.stderr.read() == b""


def unreadable_file(tmp_path) -> Path:
    """A path open() refuses: a file of mode 000 (for root, which reads any file, a write-only sysctl file)."""
    if os.geteuid() != 0:
        path = tmp_path / "secret.gguf"
        path.write_bytes(b"GGUF")
        path.chmod(0o000)
        return path
    path = Path("/proc/sys/vm/compact_memory")
    try:
        path.open("rb").close()
    except PermissionError:
        return path
    pytest.skip("no file here that this user cannot read")


def test_an_unreadable_model_file_is_one_line(tiny_pair, tmp_path):
    model = unreadable_file(tmp_path)
    for args in (["generate", "-m", model, "-p", "hi"], ["generate", "-m", tiny_pair[0], "-d", model, "-p", "hi"],
                 ["check", model, tiny_pair[1]]):
        r = subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1, r.stderr
        assert r.stderr == f"edgespec: error: cannot read model file {model}: Permission denied\n"
