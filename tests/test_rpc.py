"""A target split over rpc-servers (llama.cpp's RPC backend), on one machine: two `rpc-server` processes on
127.0.0.1, greedy output identical to the target run locally (F16 SmolLM2, so exactly), speculation with the local
draft rolling the remote caches back, servers checked before llama.cpp is given them, and a server that dies
mid-generation ending the process with one line and exit code 75 after what was generated."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import edgespec
from edgespec.backend import rpc
from http_server import free_port

SERVER = Path(sys.prefix) / "bin" / "rpc-server"  # scripts/build-rpc-server.sh (scripts/test.sh runs it)
pytestmark = pytest.mark.skipif(not SERVER.exists(), reason="no rpc-server: run scripts/build-rpc-server.sh")


class Server:
    """An rpc-server on a free loopback port, ready (it answers HELLO) when made."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(self.port), "-t", "1"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            try:
                rpc.check(self.endpoint, timeout=2)
                return
            except rpc.RpcError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"rpc-server on {self.endpoint} did not start")
                time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def servers():
    two = [Server(), Server()]
    yield [s.endpoint for s in two]
    for s in two:
        s.stop()


PROMPTS = ["List the planets in order, one per line.", "Write a Python function that reverses a list.",
           "Explain in two sentences why the sky is blue."]


def spec_engine(target, **kwargs):
    from edgespec import default_model

    return edgespec.Engine.load(target, default_model.path(), n_ctx=1024, draft_max=4, adaptive=False, **kwargs)


def test_a_target_split_over_two_servers_writes_what_it_writes_locally(smollm_f16, servers):
    """The target over both servers, the draft on this machine: plain, and speculative (the remote caches rolled
    back after every round), against the same engine all local; then the caches they are left with."""
    local, e = spec_engine(smollm_f16), spec_engine(smollm_f16, rpc=servers, tensor_split=(1, 1))
    try:
        assert e.model.rpc == servers and e.model.n_gpu_layers == -1
        assert e._profile_key() == {**local._profile_key(), "gpu_layers": -1, "rpc": servers, "tensor_split": [1, 1]}
        for prompt in PROMPTS:
            tokens = e.tokenize(prompt, chat_format=True)
            want = local.generate(tokens, max_tokens=40, speculative=False).tokens
            assert e.generate(tokens, max_tokens=40, speculative=False).tokens == want, prompt
            spec, here = e.generate(tokens, max_tokens=40), local.generate(tokens, max_tokens=40)
            assert spec.tokens == want == here.tokens, prompt
            assert spec.stats.n_rounds < 40  # drafts were verified in batches over the network
        # after the same rounds, both caches hold the same text, and a next row is the same from either
        assert e.target.tokens == local.target.tokens
        probe = e.tokenize(" and", chat_format=False)
        row, expected = (x.target.decode(probe, [len(probe) - 1])[0] for x in (e, local))
        assert np.abs(row - expected).max() < 1e-3
    finally:
        e.close(), local.close()


def test_over_servers_the_calibration_times_the_way_back_to_a_plain_step(smollm_f16, servers):
    """Over a link a decode of another shape than the last sends the server its graph again: the calibration times a
    one-row decode right after decodes of 2, 4, 8 and 16 rows (WayBack); locally it times none."""
    local, e = spec_engine(smollm_f16), spec_engine(smollm_f16, rpc=servers[:1])
    try:
        for x in (local, e):
            x.target.read(x.tokenize("The capital of France is", chat_format=False))
            x.calibrate()
        assert local.back_curve == {} and sorted(e.back_curve) == [2, 4, 8, 16]
        assert all(abs(s) < e._cost.verify_s[16] for s in e.back_curve.values())
    finally:
        e.close(), local.close()


def test_the_output_layer_kept_here_writes_what_it_writes_locally(smollm_f16, servers):
    """--output-here: the target's layers on the servers but its output layer on this machine (a decode brings back
    each row's hidden state, not its logits): plain and speculative output as locally, the caches left alike (the
    same next row, after the same rounds: the KV values of a verify batch differ slightly from a step's, so the two
    engines run the same calls), and a profile of its own (another verify curve)."""
    local, e = spec_engine(smollm_f16), spec_engine(smollm_f16, rpc=servers, output_here=True)
    try:
        assert e.model.output_here
        assert e._profile_key() == {**local._profile_key(), "gpu_layers": -1, "rpc": servers, "output_here": True}
        for prompt in PROMPTS[:2]:
            tokens = e.tokenize(prompt, chat_format=True)
            want = local.generate(tokens, max_tokens=32, speculative=False).tokens
            assert e.generate(tokens, max_tokens=32, speculative=False).tokens == want, prompt
            spec, here = e.generate(tokens, max_tokens=32), local.generate(tokens, max_tokens=32)
            assert spec.tokens == want == here.tokens, prompt
        probe = e.tokenize(" and", chat_format=False)
        row, expected = (x.target.decode(probe, [len(probe) - 1])[0] for x in (e, local))
        assert np.abs(row - expected).max() < 1e-3
    finally:
        e.close(), local.close()
    with pytest.raises(edgespec.EdgespecError, match="give --rpc too"):
        edgespec.Engine.load(smollm_f16, n_ctx=256, output_here=True)


def test_a_prompt_read_over_a_server_is_the_prompts_time(smollm_f16, servers):
    """An rpc-server computes asynchronously: a decode that asks for no logits returns once it is sent. The prompt's
    read waits until it is computed, so its time is the prompt's (stats.prompt_s) and the first round costs a
    step, not the prompt (it did: 3.9 ms for a prompt, 97.7 ms for its first round, 12.5 ms for the next ones;
    bench/results/prompt-read.log)."""
    e = edgespec.Engine.load(smollm_f16, n_ctx=2048, rpc=servers[:1])
    try:
        words = "The quick brown fox jumps over the lazy dog by the river at dawn. " * 80
        tokens = e.tokenize(words)[:900]
        r = e.generate(tokens, max_tokens=6, speculative=False)
        assert r.stats.n_prompt_evaluated == len(tokens)  # (the first token's row is the prompt's last)
        first, later = r.stats.rounds[0].seconds, max(x.seconds for x in r.stats.rounds[1:])
        assert first < r.stats.prompt_s / 4, (first, r.stats.prompt_s, later)
    finally:
        e.close()


def test_the_draft_on_a_server_of_its_own_and_the_target_here(smollm_f16, servers):
    local, e = spec_engine(smollm_f16), spec_engine(smollm_f16, draft_rpc=servers[1:])
    try:
        assert e.model.rpc == [] and e.proposer.ctx.model.rpc == servers[1:]
        for prompt in PROMPTS[:2]:
            tokens = e.tokenize(prompt, chat_format=True)
            want = local.generate(tokens, max_tokens=32, speculative=False).tokens
            assert e.generate(tokens, max_tokens=32).tokens == want, prompt
    finally:
        e.close(), local.close()


def test_servers_are_checked_before_llama_cpp_is_given_them():
    with pytest.raises(edgespec.InvalidArgument, match="HOST:PORT"):
        rpc.parse("127.0.0.1:notaport")
    assert rpc.parse("a:1, b") == ["a:1", f"b:{rpc.DEFAULT_PORT}"]
    with pytest.raises(rpc.RpcError, match="cannot reach rpc-server at 127.0.0.1"):
        rpc.check(f"127.0.0.1:{free_port()}", timeout=2)
    # something listening that is not an rpc-server of this protocol: it says another version, or hangs up
    for reply in (b"\x1c" + bytes(7) + bytes([6, 0, 0, 0]) + bytes(24), b""):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def answer(reply=reply, listener=listener):
            conn, _ = listener.accept()
            conn.recv(64)
            conn.sendall(reply)
            conn.close()

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(rpc.RpcError, match="protocol 6.0.0|closed the connection"):
            rpc.check(f"127.0.0.1:{listener.getsockname()[1]}", timeout=5)
        listener.close()


def run(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "edgespec", *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kwargs)


def test_the_command_line_refuses_a_bad_or_unreachable_server_in_one_line(tiny_pair):
    r = run("generate", "-m", tiny_pair[0], "--prompt", "hi", "-n", "4", "--rpc", "nohost:port")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run("generate", "-m", tiny_pair[0], "--prompt", "hi", "-n", "4", "--rpc", f"127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach rpc-server at 127.0.0.1" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run("generate", "-m", tiny_pair[0], "--prompt", "hi", "-n", "4", "--tensor-split", "1,-1")
    assert r.returncode == 2 and "proportions" in r.stderr, r.stderr
    r = run("generate", "-m", tiny_pair[0], "--prompt", "hi", "-n", "4", "--output-here")
    assert r.returncode == 2 and "give --rpc too" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run("serve", "-m", tiny_pair[0], "--port", free_port(), "--rpc", f"127.0.0.1:{free_port()}")
    assert r.returncode == 1 and "cannot reach rpc-server" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_generate_over_rpc_from_the_command_line_equals_local(smollm_f16, servers):
    common = ["generate", "-m", smollm_f16, "--prompt", "The capital of France is", "-n", "24", "-t", "0", "--json",
              "--no-spec"]
    local, remote = run(*common), run(*common, "--rpc", ",".join(servers))
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["tokens"] == json.loads(local.stdout)["tokens"]


def test_chat_over_rpc_says_where_the_time_goes(smollm_f16, servers):
    r = run("chat", "-m", smollm_f16, "--rpc", servers[0], "-n", "6", "--no-color", input="Hello\n/stats\n")
    assert r.returncode == 0, r.stderr
    assert f"rpc-servers {servers[0]}: verify holds their network round trips" in r.stdout + r.stderr


def test_a_server_that_dies_mid_generation_ends_the_process_in_one_line_keeping_the_text(smollm_f16):
    server = Server()
    proc = subprocess.Popen([sys.executable, "-m", "edgespec", "generate", "-m", str(smollm_f16), "--rpc",
                             server.endpoint, "--prompt", "Count from one to one thousand in words:", "-n", "2000",
                             "-t", "0", "--no-spec", "-c", "4096"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        first = proc.stdout.read(1)  # the first token is out: the model is loaded and decoding over the network
        assert first, proc.stderr.read()
        server.stop()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    err = err.decode()
    assert proc.returncode == rpc.EXIT_LOST, err
    assert "rpc-server went away" in err and len(err.strip().splitlines()) == 1, err
    assert len(first + out) > 0
