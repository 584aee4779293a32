"""A long prompt with a short answer, end to end: where the draft model's reading of the prompt (after the first
token, before it can draft) costs more than drafting saves. One process per run, so run each mode alone:

    .venv/bin/python bench/long_prompt.py plain|hybrid N [TEXT_FILE [INSTRUCTION]]

TEXT_FILE (default: 5,000 characters of the README; bench/results/long-prompt-reading.log used the file that
bench/read_cost.py's docstring writes) follows INSTRUCTION (default "Summarise this part of a README in a few
sentences:") in the chat template; F16 Qwen2.5-Coder-1.5B target (../shared/models/make-f16-target.py) and the
0.5B Q4_K_M draft from ~/.cache/edgespec-bench (the profile `edgespec tune` wrote is used). Prints the wall time, the prompt's and the generation's seconds, what was drafted, the first fallbacks'
reasons and a hash of the tokens (equal across modes: lossless)."""
import sys
import time
from pathlib import Path

import edgespec

B = Path.home() / ".cache/edgespec-bench"
mode, n = sys.argv[1], int(sys.argv[2])
text = Path(sys.argv[3]).read_text() if len(sys.argv) > 3 else \
    (Path(__file__).parent.parent / "README.md").read_text()[1000:6000]
kw = {"draft": B / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "lookup": True} if mode == "hybrid" else {}
e = edgespec.Engine.load(B / "qwen2.5-coder-1.5b-instruct-f16.gguf", n_threads=2, n_ctx=4096, **kw)
ask = sys.argv[4] if len(sys.argv) > 4 else "Summarise this part of a README in a few sentences:"
toks = e.tokenize(ask + "\n\n" + text, chat_format=True)
t = time.perf_counter()
r = e.generate(toks, max_tokens=n, speculative=mode != "plain")
el = time.perf_counter() - t
s = r.stats
print(f"{mode:7} n={n} prompt {len(toks)} out {len(r.tokens)} wall {el:6.1f}s prompt_s {s.prompt_s:5.1f} "
      f"gen {s.generation_s:5.1f} drafted {s.n_drafted} accepted {s.n_accepted}",
      [f["why"][:90] for f in s.fallbacks][:2], hash(tuple(r.tokens)), flush=True)
e.close(remember=False)
