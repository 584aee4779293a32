"""edgespec: lossless speculative decoding for local GGUF models, on llama.cpp.

    import edgespec
    engine = edgespec.Engine.load("target.gguf", draft="draft.gguf")
    result = engine.generate("def fib(n):", max_tokens=64)
    result.text, result.stats.tokens_per_s
    engine.generate(prompt, constraint=edgespec.Constraint.json_schema({"type": "object", ...}))
"""
from .errors import (BackendError, ContextOverflowError, EdgespecError, InvalidArgument, ModelLoadError, PairError)

__version__ = "0.1.0"

__all__ = [
    "Engine", "GenerationResult", "Response", "SamplingConfig", "GREEDY", "GenerationStats", "Constraint",
    "EdgespecError", "ModelLoadError", "PairError", "ContextOverflowError", "BackendError", "InvalidArgument",
    "__version__",
]

# The engine (and llama.cpp with it) loads on first use, so `edgespec --help` and the CLI's signal handling
# start before the heavy imports: Ctrl-C while llama.cpp loads is then an ordinary, handled interrupt.
_LAZY = {"Engine": "engine", "GenerationResult": "results", "Response": "results", "SamplingConfig": "sampling",
         "GREEDY": "sampling", "GenerationStats": "stats", "Constraint": "constraints"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'edgespec' has no attribute {name!r}")
