"""What reading one prompt costs each model of a pair: one llama.cpp decode of the whole text per model (the
draft model's reading is what edgespec/reading.py weighs against what drafting can save). Run it alone:

    git show cd6eb10:README.md | head -c 6000 | tail -c 5000 > /tmp/long.txt
    .venv/bin/python bench/read_cost.py /tmp/long.txt

Models from ~/.cache/edgespec-bench (../shared/models/fetch-bench-models.sh): the 0.5B Q4_K_M draft and the 1.5B
Q4_K_M target, 2 threads. Prints the tokens, the seconds and the milliseconds a token for each."""
import sys
import time
from pathlib import Path

from edgespec.backend import Context
from edgespec.backend.model import Model

B = Path.home() / ".cache/edgespec-bench"
text = Path(sys.argv[1]).read_text()
for name in ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"):
    model = Model(str(B / name))
    ctx = Context(model, 4096, 2)
    tokens = model.tokenize(text)
    t0 = time.perf_counter()
    ctx.decode(tokens, [len(tokens) - 1])
    seconds = time.perf_counter() - t0
    print(f"{name}: {len(tokens)} tokens in {seconds:.1f} s, {1000 * seconds / len(tokens):.1f} ms a token", flush=True)
    ctx.close()
    model.close()
