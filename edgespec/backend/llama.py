"""llama.cpp itself: the library handle (`ll`, imported here and nowhere else in edgespec), its log (kept for error
messages, shown with --verbose), Ctrl-C during its long calls, and process-wide helpers."""
from __future__ import annotations

import _thread
import collections
import ctypes
import os
import signal
import sys
import threading

import llama_cpp as ll

from ..errors import BackendError

# llama.cpp's log goes through here: kept (for error messages) and printed only when verbose.
_recent_log: collections.deque[str] = collections.deque(maxlen=200)
_log_count = 0  # lines logged so far: a call's own lines are those after the count taken before it
_verbose = False


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    global _log_count
    try:
        line = text.decode("utf-8", "replace")
        _recent_log.append(line)
        _log_count += 1
        if _verbose:
            sys.stderr.write(line)
    except KeyboardInterrupt:  # an exception cannot cross into C (ctypes would print it and carry on): re-raise
        _thread.interrupt_main()  # Ctrl-C once back in Python
    except Exception:
        pass


ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
ll.llama_backend_init()


def set_verbose(verbose: bool) -> None:
    """Show llama.cpp's own log on stderr (off by default)."""
    global _verbose
    _verbose = verbose


def log_since(since: int | None = None) -> list[str]:
    """llama.cpp's kept log lines (the last 200), only those logged after the count `since` when given."""
    lines = list(_recent_log)
    return lines if since is None else lines[max(0, len(lines) - (_log_count - since)):]


def _last_error(since: int | None = None) -> str:
    """The most telling error line llama.cpp logged (since the count `since`, when given): the first one of the
    failed call says why ("model is corrupted or incomplete"); the later ones only that it failed."""
    lines = log_since(since)
    errors = [ln.strip() for ln in lines if ln.strip() and ("error" in ln.lower() or "failed" in ln.lower())]
    if not errors:
        return "no reason given (run with --verbose to see llama.cpp's log)"
    first = errors[0] if since is not None else errors[-1]
    return first.split(": ", 1)[1] if first.startswith(("llama_", "gguf_", "ggml_")) and ": " in first else first


class _Interruptible:
    """Ctrl-C during a long C call (loading a model) would be raised inside a ctypes callback, which swallows it:
    while the call runs, SIGINT only sets a flag, the progress callback asks llama.cpp to stop, and the
    KeyboardInterrupt is raised once the call has returned."""

    def __init__(self) -> None:
        self.interrupted = False
        self._old = None

    def __enter__(self) -> "_Interruptible":
        # (where the process was started with Ctrl-C ignored, it stays ignored: exits.ignored)
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._old = signal.signal(signal.SIGINT, self._flag)
        return self

    def _flag(self, signum, frame) -> None:
        self.interrupted = True

    def progress(self, fraction: float, user_data: ctypes.c_void_p) -> bool:
        return not self.interrupted  # False aborts the load

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if self.interrupted and exc[0] is None:
            raise KeyboardInterrupt


def default_threads() -> int:
    """One thread per physical core of the CPUs this process may use (a container limited to 2 of a host's 64 gets
    2, not 32 threads that spin against each other)."""
    from ..profile import usable_cpus

    n = usable_cpus()
    return n if n <= 4 else n // 2  # beyond 4 logical CPUs, assume SMT: one thread per physical core


def builtin_templates() -> list[str]:
    """The chat template names llama.cpp formats itself (chatml, llama3, gemma, ...)."""
    n = ll.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    ll.llama_chat_builtin_templates(arr, n)
    return [name.decode() for name in arr]


def system_info() -> str:
    """llama.cpp's build and CPU features, and llama-cpp-python's version: what a timing on this machine depends on
    beyond the hardware."""
    return f"llama-cpp-python {getattr(ll, '__version__', '?')} | {ll.llama_print_system_info().decode()}"


class _Freed:
    """Something llama.cpp allocated: close() frees it, and so does garbage collection."""

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:
        try:
            self.close()
        except (AttributeError, TypeError):  # at interpreter exit llama_cpp may be gone already: nothing to free
            pass


def quantize(src: str | os.PathLike, dst: str | os.PathLike, ftype: str = "Q8_0", threads: int | None = None) -> None:
    """Write a re-quantized copy of a GGUF model with llama.cpp's quantize API (used to make test drafts)."""
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{ftype.upper()}")
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    rc = ll.llama_model_quantize(os.fspath(src).encode(), os.fspath(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise BackendError(f"llama_model_quantize failed with code {rc}: {_last_error()}")
