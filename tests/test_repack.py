"""Model(repack=False), llama.cpp's --no-repack: the CPU computes from the file's own layout. On a Q4_0 tiny model
(a layout llama.cpp repacks on AVX2 and ARM) both loads decode the same function, and only the default one puts
weights in the repacked buffer (llama.cpp's load log names it CPU_REPACK)."""
import gguf
import numpy as np
import pytest

import tiny_models
from edgespec.backend import Context, Model, llama

PROMPT = [5, 17, 42, 99, 3, 8, 64, 120, 7, 33]


@pytest.fixture(scope="module")
def q4_0_model(tmp_path_factory):
    """The tiny target with its matrices in Q4_0 (what the repacked kernels take), norms in F32."""
    path = tmp_path_factory.mktemp("repack") / "target-q4_0.gguf"
    tensors = {}
    for name, arr in tiny_models.weights(0).items():
        if arr.ndim == 2 and name != "token_embd.weight":
            tensors[name] = (gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q4_0), gguf.GGMLQuantizationType.Q4_0)
        else:
            tensors[name] = arr
    return tiny_models.write(path, tensors)


def load(path, **kwargs):
    """The model, whether llama.cpp put weights in its repacked buffer, and the prompt's last rows' logits."""
    since = llama._log_count
    model = Model(path, **kwargs)
    lines = llama.log_since(since)
    ctx = Context(model, n_ctx=64)
    try:
        logits = ctx.decode(PROMPT, list(range(len(PROMPT) - 3, len(PROMPT))))
    finally:
        ctx.close()
        model.close()
    return any("CPU_REPACK" in line for line in lines), logits


def test_the_files_own_layout_computes_what_the_repacked_one_does(q4_0_model):
    repacked, a = load(q4_0_model)
    plain, b = load(q4_0_model, repack=False)
    assert not plain, "repack=False still put weights in llama.cpp's repacked buffer"
    if not repacked:
        pytest.skip("llama.cpp has no repacked Q4_0 kernels for this CPU (they need AVX2 or ARM's dot products)")
    # the same quantised weights; kernels that sum in another order (and may quantise the activations otherwise)
    np.testing.assert_allclose(a, b, rtol=0, atol=0.02 * float(np.abs(a).max()))
    assert (a.argmax(axis=1) == b.argmax(axis=1)).all()
