from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tiny_models  # noqa: E402

# measured profiles (profile.py) go to a folder of this run, never the user's cache; servers and CLIs started by the
# tests inherit it
if "EDGESPEC_PROFILES" not in os.environ:
    os.environ["EDGESPEC_PROFILES"] = _run_profiles = tempfile.mkdtemp(prefix="edgespec-test-profiles-")
    atexit.register(shutil.rmtree, _run_profiles, ignore_errors=True)  # nothing left in /tmp after the run

# A runner started with signals ignored (nohup's SIGHUP, a shell script's background job's SIGINT) keeps ignoring them,
# but the programs the tests start must get them as from a terminal (edgespec keeps an inherited ignore): caught by a
# handler that does nothing rather than ignored, they are back at their defaults in a child after exec.
for _signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, lambda signum, frame: None)


@pytest.fixture(autouse=True)
def own_profiles(tmp_path_factory, monkeypatch):
    """Each test its own profile folder: an engine adds what it learned to the profile when it closes, and a test
    must not start from what an earlier one taught (a draft model standing aside, say)."""
    monkeypatch.setenv("EDGESPEC_PROFILES", str(tmp_path_factory.mktemp("profiles")))


DRAFT_NOISE = 0.06  # the draft agrees with the target on roughly 60% of tokens: full, partial and no acceptance


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="session")
def tiny_pair(tiny_dir) -> tuple[Path, Path]:
    """(target, draft): same vocabulary, different weights."""
    base = tiny_models.weights(0)
    return (tiny_models.write(tiny_dir / "target.gguf", base),
            tiny_models.write(tiny_dir / "draft.gguf", tiny_models.perturbed(base, DRAFT_NOISE, 1)))


@pytest.fixture(scope="session")
def fim_pair(tiny_dir) -> tuple[Path, Path]:
    """The tiny pair with fill-in-the-middle tokens (tiny_models.FIM)."""
    base = tiny_models.weights(0)
    return (tiny_models.write(tiny_dir / "target-fim.gguf", base, fim=True),
            tiny_models.write(tiny_dir / "draft-fim.gguf", tiny_models.perturbed(base, DRAFT_NOISE, 1), fim=True))


@pytest.fixture(scope="session")
def smollm_f16(tmp_path_factory) -> Path:
    """SmolLM2 in F16: its batched and single-row logits agree, so greedy identity is exact (its Q4_1 file drafts)."""
    from edgespec import backend, default_model

    target = tmp_path_factory.mktemp("smollm") / "smollm2-f16.gguf"
    backend.quantize(default_model.path(), target, "F16")
    return target


@pytest.fixture(scope="module")
def server(tiny_pair):
    """`edgespec serve` on the tiny pair (draft and lookup, 4 sequences), one process per test module."""
    from http_server import Server

    s = Server("-m", tiny_pair[0], "-d", tiny_pair[1], "--lookup", "-c", "1024", "--parallel", "4", "-k", "4",
               "--threads", "2")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="session")
def think_target(tiny_dir):
    """A tiny thinking model: <think> and </think> are tokens of its own."""
    return tiny_models.write(tiny_dir / "target-think.gguf", tiny_models.weights(0), think=True)


@pytest.fixture(scope="module")
def think_state(think_target):
    """A server's state over the tiny thinking model, without HTTP: for the APIs' parsing and rendering."""
    import edgespec
    from edgespec.sampling import SamplingConfig
    from edgespec.server import ServerState

    e = edgespec.Engine.load(think_target, n_ctx=1024, n_threads=2)
    yield ServerState("m", SamplingConfig(), engine=e)
    e.close()


@pytest.fixture(scope="session")
def make_pair(tiny_dir):
    """The tiny pair rewritten with another end-of-generation token (the weights are the same)."""

    def make(eos: int) -> tuple[Path, Path]:
        base = tiny_models.weights(0)
        return (tiny_models.write(tiny_dir / f"target-eos{eos}.gguf", base, eos=eos),
                tiny_models.write(tiny_dir / f"draft-eos{eos}.gguf", tiny_models.perturbed(base, DRAFT_NOISE, 1), eos=eos))

    return make


@pytest.fixture(scope="session")
def engine(tiny_pair):
    import edgespec

    # Fixed K: the tiny draft costs as much as the target, so an adaptive engine would rightly stop drafting.
    e = edgespec.Engine.load(tiny_pair[0], draft=tiny_pair[1], n_ctx=1024, n_threads=2, draft_max=4, adaptive=False)
    yield e
    e.close()


PROMPTS = ["Hello world", "the cat sat on the", "def f(x):\n    return", "1, 2, 3, 4,", "abc", "The", "in the in",
           "Once upon a time", "SELECT * FROM", "<|im_start|>user\nhi<|im_end|>\n", "zzzz", "ÄÖÜ ß 日本語",
           "x = [i for i in", "q", "The quick brown fox", "then", "42", "fn main() {", "Lorem ipsum dolor", "\n\n"]
