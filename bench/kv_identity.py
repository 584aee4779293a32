"""Whether greedy speculation stays the target's own tokens with a KV cache type (--cache-type-k/-v): for each type,
plain and speculative decoding of a few chat prompts with the same caches, and where they part, the plain top-2
margin against the batched-vs-single logit difference there (edgespec.diagnostics: a near-tie when the margin is
the smaller). Any type llama.cpp has can be tried here, also those edgespec refuses (q4_0, ...), to see why.

    .venv/bin/python bench/kv_identity.py -m TARGET_F16.gguf -d DRAFT.gguf [--types f16,q8_0,q4_0,q8_0/q4_0]
"""
from __future__ import annotations

import argparse

PROMPTS = ["Write a short story about a cat.", "Explain photosynthesis to a child.", "List five European capitals.",
           "Translate 'good morning' into French and Spanish."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-d", "--draft", required=True)
    ap.add_argument("--types", default="f16,q8_0,q4_0,q8_0/q4_0", help="K/V, or one type for both")
    ap.add_argument("-n", type=int, default=60)
    a = ap.parse_args()

    import edgespec
    from edgespec import diagnostics
    from edgespec.backend import model as backend_model

    print(f"# bench/kv_identity.py -m {a.model} -d {a.draft} --types {a.types} -n {a.n}")
    for spec in a.types.split(","):
        pair = tuple(spec.split("/")) if "/" in spec else (spec, spec)
        backend_model.KV_TYPES = tuple({*backend_model.KV_TYPES, *pair})  # (to try the types edgespec refuses)
        with edgespec.Engine.load(a.model, draft=a.draft, n_ctx=2048, n_threads=2, kv_cache=pair, draft_max=4,
                                  adaptive=False) as e:
            for prompt in PROMPTS:
                tokens = e.tokenize(prompt, chat_format=True)
                plain = e.generate(tokens, max_tokens=a.n, speculative=False).tokens
                spec_tokens = e.generate(tokens, max_tokens=a.n).tokens
                d = diagnostics.divergence(e.model, tokens, plain, spec_tokens, 4, 2)
                print(f"{spec:<10} {prompt[:28]:<28} {'identical' if d is None else d}")


if __name__ == "__main__":
    main()
