"""Errors a user can cause. Each message says what went wrong and what to do; the CLI prints it on one line."""


class EdgespecError(Exception):
    """Base class: anything edgespec raises on purpose."""


class ModelLoadError(EdgespecError):
    """A model file is missing, unreadable, or llama.cpp refused it."""


class PairError(EdgespecError):
    """Target and draft cannot be paired (different vocabularies)."""


class ContextOverflowError(EdgespecError):
    """The prompt does not fit in the context window."""


class BackendError(EdgespecError):
    """llama.cpp reported a failure while decoding or editing its cache."""
