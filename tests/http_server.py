"""A real `edgespec serve` process on a free loopback port, for the tests that talk to it over HTTP."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import openai


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ignoring(signals=()):
    """A child's preexec_fn that starts it with these signals ignored, as `nohup` (SIGHUP) or a shell script's
    background job (SIGINT) starts it; None for none (conftest.py: the others at their defaults)."""
    if not signals:
        return None

    def ignore():
        for signum in signals:
            signal.signal(signum, signal.SIG_IGN)

    return ignore


class Server:
    def __init__(self, *args, env=None, ignore=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # (its stderr, a line per request, to a file: a pipe nobody reads would fill and stop the server)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "edgespec", "serve", "--port", str(self.port), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=self.stderr,
                                     env={**os.environ, "EDGESPEC_CONFIG": "", **(env or {})},
                                     preexec_fn=ignoring(ignore))
        end = time.time() + 60
        while time.time() < end:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited: {self.log()}")
            time.sleep(0.1)
        raise AssertionError("the server did not come up in 60 s")

    def log(self) -> str:
        """What the server has written on stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace")

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0,
                             timeout=kw.pop("timeout", 60))

    def post(self, path, body, **kw):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.post(self.url + path, content=data, **{"timeout": 60, **kw})

    def metric(self, name: str) -> float:
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line.startswith(f"edgespec_{name} ") or line.startswith(f"edgespec_{name}{{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self, sig=signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
