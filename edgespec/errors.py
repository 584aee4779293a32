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


class InvalidArgument(EdgespecError, ValueError):
    """A value passed to the library is out of range or of the wrong type."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: stop as Ctrl-C would (keeping what was generated), then exit."""
