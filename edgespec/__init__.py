"""edgespec: lossless speculative decoding for local GGUF models, on llama.cpp.

    import edgespec
    engine = edgespec.Engine.load("target.gguf", draft="draft.gguf")
    result = engine.generate("def fib(n):", max_tokens=64)
    result.text, result.stats.tokens_per_s
"""
from .engine import Engine, GenerationResult, Response
from .errors import BackendError, ContextOverflowError, EdgespecError, ModelLoadError, PairError
from .sampling import GREEDY, SamplingConfig
from .stats import GenerationStats

__version__ = "0.1.0"

__all__ = [
    "Engine", "GenerationResult", "Response", "SamplingConfig", "GREEDY", "GenerationStats",
    "EdgespecError", "ModelLoadError", "PairError", "ContextOverflowError", "BackendError", "__version__",
]
