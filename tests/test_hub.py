"""Hub downloads against a local server that speaks the hub's file protocol (no network): cache, checksum, a
connection dropped midway and resumed with a Range request, offline mode, and the preset file's schema."""
import hashlib
import http.server
import json
import threading

import pytest

from edgespec import EdgespecError
from edgespec.hub import download
from edgespec.presets import PRESETS_FILE, ModelRef, load_presets

PAYLOAD = bytes(range(256)) * (4096 * 24)  # 24 MiB: past huggingface-hub's 10 MiB read chunk, so a drop loses some
SHA = hashlib.sha256(PAYLOAD).hexdigest()
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub(http.server.BaseHTTPRequestHandler):
    drop_first_get = True
    requests: list = []
    payload, sha = PAYLOAD, SHA

    def log_message(self, *args):
        pass

    def _head(self, status, length, extra=()):
        self.send_response(status)
        self.send_header("ETag", f'"{Hub.sha}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    def do_HEAD(self):
        Hub.requests.append(("HEAD", self.path, None))
        if not self.path.endswith("/resolve/main/model.gguf"):
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.end_headers()
            return
        self._head(200, len(Hub.payload))

    def do_GET(self):
        rng = self.headers.get("Range")
        Hub.requests.append(("GET", self.path, rng))
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        body = Hub.payload[start:]
        if rng:
            self._head(206, len(body), [("Content-Range", f"bytes {start}-{len(Hub.payload) - 1}/{len(Hub.payload)}")])
        else:
            self._head(200, len(body))
        if Hub.drop_first_get:
            Hub.drop_first_get = False
            self.wfile.write(body[: len(body) * 2 // 3])  # then the connection drops
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "cache"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Hub.requests, Hub.drop_first_get, Hub.payload, Hub.sha = [], True, PAYLOAD, SHA
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_download_survives_a_dropped_connection_and_checks_the_checksum(hub):
    path = download(ModelRef("owner/repo", "model.gguf", SHA), endpoint=hub)
    assert path.read_bytes() == PAYLOAD
    gets = [r for r in Hub.requests if r[0] == "GET"]
    # The second request asks only for what the first did not deliver.
    assert gets[0][2] is None and gets[1][2].startswith("bytes="), Hub.requests
    resumed_at = int(gets[1][2][6:-1])
    assert 0 < resumed_at <= len(PAYLOAD) * 2 // 3
    # A second call is served from the cache: no new GET.
    assert download(ModelRef("owner/repo", "model.gguf", SHA), endpoint=hub) == path
    assert len([r for r in Hub.requests if r[0] == "GET"]) == 2


def test_checksum_mismatch_is_an_error(hub):
    with pytest.raises(EdgespecError, match="checksum mismatch"):
        download(ModelRef("owner/repo", "model.gguf", "0" * 64), endpoint=hub)


def test_missing_file_is_a_clear_error(hub):
    with pytest.raises(EdgespecError, match="owner/repo has no file nope.gguf"):
        download(ModelRef("owner/repo", "nope.gguf"), endpoint=hub)


def test_offline_mode_uses_only_the_cache(hub, monkeypatch):
    download(ModelRef("owner/repo", "model.gguf"), endpoint=hub)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    assert download(ModelRef("owner/repo", "model.gguf"), endpoint=hub).read_bytes() == PAYLOAD
    with pytest.raises(EdgespecError, match="not in the local cache"):
        download(ModelRef("owner/other", "model.gguf"), endpoint=hub)


def test_a_hub_whose_name_does_not_resolve_is_said_at_once(monkeypatch, tmp_path):
    """No network (the hub's name does not resolve): one line at once, where huggingface-hub would retry for some
    25 s, printing each retry; it is not even asked. Behind a proxy, which resolves names itself, it is."""
    import socket

    import huggingface_hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    real = socket.getaddrinfo

    def resolve(host, *args, **kw):
        if host == "hub.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kw)

    asked = []

    def hf_hub_download(*args, **kw):
        asked.append(args)
        raise OSError("the proxy refused the connection")

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    with pytest.raises(EdgespecError, match="hub.invalid does not resolve") as e:
        download(ModelRef("owner/repo", "model.gguf"), endpoint="https://hub.invalid")
    assert "\n" not in str(e.value) and not asked
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    with pytest.raises(EdgespecError, match="proxy refused"):
        download(ModelRef("owner/repo", "model.gguf"), endpoint="https://hub.invalid")
    assert len(asked) == 1


def test_preset_file_schema():
    raw = json.loads(PRESETS_FILE.read_text())
    presets = load_presets()
    assert len(presets) >= 4 and len({p.name for p in presets}) == len(presets)
    for entry, p in zip(raw["presets"], presets):
        assert set(entry) <= {"name", "description", "license", "target", "draft", "lookup", "verified"}
        assert p.description and p.license and p.verified
        for ref in (p.target, p.draft):
            if ref is None:
                continue
            assert ref.repo.count("/") == 1 and ref.file.endswith(".gguf") and ref.size_mb > 0
            assert ref.sha256 is None or len(ref.sha256) == 64


def test_model_named_repo_colon_file_is_downloaded_and_run(hub, tiny_pair, tmp_path):
    import subprocess
    import sys

    Hub.payload = tiny_pair[0].read_bytes()
    Hub.sha = hashlib.sha256(Hub.payload).hexdigest()
    env = {**__import__("os").environ, "HF_ENDPOINT": hub, "HF_HUB_CACHE": str(tmp_path / "cli-cache")}
    r = subprocess.run([sys.executable, "-m", "edgespec", "generate", "-m", "owner/tiny:model.gguf", "-p", "Hello",
                        "-n", "5", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["tokens"]) == 5
