"""The only module that imports llama_cpp: load models, tokenize, decode batches, edit the KV cache.

A `Context` owns one KV cache and knows exactly which tokens it holds (`tokens`). Every decode appends to that
list and every removal is checked, so callers can reconcile by common prefix instead of counting.
"""
from __future__ import annotations

import _thread
import collections
import ctypes
import os
import re
import signal
import sys
import threading
import time
from typing import Sequence

import numpy as np

import llama_cpp as ll

from .errors import BackendError, ContextOverflowError, EdgespecError, InvalidArgument, ModelLoadError

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


def _last_error(since: int | None = None) -> str:
    """The most telling error line llama.cpp logged (since the count `since`, when given): the first one of the
    failed call says why ("model is corrupted or incomplete"); the later ones only that it failed."""
    lines = list(_recent_log)
    if since is not None:
        lines = lines[max(0, len(lines) - (_log_count - since)):]
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
        if threading.current_thread() is threading.main_thread():
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
    n = os.cpu_count() or 1
    return n if n <= 4 else n // 2  # beyond 4 logical CPUs, assume SMT: one thread per physical core


def builtin_templates() -> list[str]:
    """The chat template names llama.cpp formats itself (chatml, llama3, gemma, ...)."""
    n = ll.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    ll.llama_chat_builtin_templates(arr, n)
    return [name.decode() for name in arr]


def system_info() -> str:
    return ll.llama_print_system_info().decode()


class Model:
    """A loaded GGUF model: weights and vocabulary, no KV cache."""

    def __init__(self, path: str | os.PathLike, n_gpu_layers: int = 0, vocab_only: bool = False) -> None:
        self.path = os.fspath(path)
        self._ptr = None
        if os.path.isdir(self.path):
            raise ModelLoadError(f"{self.path} is a directory, not a model file; name the .gguf file inside it")
        if not os.path.exists(self.path):
            raise ModelLoadError(f"model file not found: {self.path}")
        try:
            with open(self.path, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise ModelLoadError(f"cannot read model file {self.path}: {e.strerror}") from None
        if magic != b"GGUF":
            raise ModelLoadError(f"not a GGUF model file: {self.path} (edgespec loads llama.cpp's .gguf files)")
        params = ll.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only  # metadata and vocabulary without the weights: instant, for checks
        since = _log_count
        with _Interruptible() as guard:
            progress = ll.llama_progress_callback(guard.progress)  # kept alive for the call
            params.progress_callback = progress
            self._ptr = ll.llama_model_load_from_file(self.path.encode(), params)
            if not self._ptr and guard.interrupted:
                return  # KeyboardInterrupt is raised on leaving the block
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not load {self.path}: {_last_error(since)}")
        self._vocab = ll.llama_model_get_vocab(self._ptr)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = ll.llama_model_n_ctx_train(self._ptr)
        self.is_recurrent = bool(ll.llama_model_is_recurrent(self._ptr) or ll.llama_model_is_hybrid(self._ptr))
        self._pieces: dict[int, bytes] = {}
        self._special: tuple[re.Pattern | None, dict[str, int]] | None = None

    def _open(self):
        """The vocabulary pointer, or a clear error once the model has been freed (never a dangling pointer)."""
        if not self._ptr:
            raise EdgespecError(f"the model {self.path} has been closed; load it again")
        return self._vocab

    def check_tokens(self, tokens: Sequence[int]) -> None:
        """Token ids outside the vocabulary make llama.cpp abort the process: refuse them here."""
        self._open()
        for t in tokens:
            if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or not 0 <= t < self.n_vocab:
                raise InvalidArgument(f"token id {t!r} is not in this model's vocabulary (0..{self.n_vocab - 1})")

    # vocabulary ------------------------------------------------------------------------------------------
    @property
    def vocab_type(self) -> int:
        return ll.llama_vocab_type(self._open())

    @property
    def bos(self) -> int:
        return ll.llama_vocab_bos(self._open())

    @property
    def eos(self) -> int:
        return ll.llama_vocab_eos(self._open())

    @property
    def add_bos(self) -> bool:
        return bool(ll.llama_vocab_get_add_bos(self._open()))

    @property
    def add_eos(self) -> bool:
        return bool(ll.llama_vocab_get_add_eos(self._open()))

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry as stored (what the pair check compares)."""
        self.check_tokens([token])
        return ll.llama_vocab_get_text(self._vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        return 0 <= token < self.n_vocab and bool(ll.llama_vocab_is_eog(self._open(), token))

    def tokenize(self, text: str | bytes, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> tokens. parse_special: text such as "<|im_end|>" becomes that control token (for prompts the
        user writes in the model's own format); False keeps it literal text (for message content)."""
        self._open()
        if isinstance(text, str):
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 where the text came from
                raise EdgespecError("the text is not valid UTF-8 (it holds undecodable bytes)") from None
        else:
            data = text
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            raise BackendError("llama.cpp could not tokenize the prompt")
        return list(buf[:n])

    def tokenize_literal(self, text: str, literal: Sequence[tuple[int, int]], add_special: bool = True) -> list[int]:
        """Text in which only what lies outside the `literal` (start, end) spans may name control tokens: the chat
        template's markup is special, the messages' content never is. Gives the same tokens as tokenize() with
        parse_special wherever the content holds no control-token text (llama.cpp splits at control tokens
        first and tokenizes the text between them on its own, as is done here)."""
        pattern, ids = self._special_tokens()
        cuts: list[tuple[int, int, int]] = []  # (start, end, token id) of control tokens in the markup
        edges = [0, *[i for span in sorted(literal) for i in span], len(text)]
        for start, end in zip(edges[::2], edges[1::2]):  # the markup between literal spans
            if pattern is not None and start < end:
                cuts += [(m.start(), m.end(), ids[m.group()]) for m in pattern.finditer(text, start, end)]
        out: list[int] = []
        pos = 0
        for start, end, tok in cuts:
            attr = ll.llama_vocab_get_attr(self._vocab, tok)
            before = text[pos:start].rstrip() if attr & ll.LLAMA_TOKEN_ATTR_LSTRIP else text[pos:start]
            if before:
                out += self.tokenize(before, add_special=False, parse_special=False)
            out.append(tok)
            pos = end
            if attr & ll.LLAMA_TOKEN_ATTR_RSTRIP:
                while pos < len(text) and text[pos].isspace():
                    pos += 1
        if pos < len(text):
            out += self.tokenize(text[pos:], add_special=False, parse_special=False)
        if add_special and self.add_bos and (not out or out[0] != self.bos):
            out.insert(0, self.bos)
        if add_special and self.add_eos:
            out.append(self.eos)
        return out

    def control_pattern(self) -> re.Pattern | None:
        """A regex matching the text of any control token (None when the vocabulary has none)."""
        return self._special_tokens()[0]

    def _special_tokens(self) -> tuple[re.Pattern | None, dict[str, int]]:
        """The control tokens llama.cpp's parse_special recognises in text, longest first (as it matches them)."""
        if self._special is None:
            vocab, ids = self._open(), {}
            wanted = ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_UNKNOWN
            for t in range(self.n_vocab):
                if ll.llama_vocab_get_attr(vocab, t) & wanted:
                    text = (ll.llama_vocab_get_text(vocab, t) or b"").decode("utf-8", "replace")
                    if text:
                        ids.setdefault(text, t)
            alternatives = sorted(ids, key=len, reverse=True)
            self._special = (re.compile("|".join(map(re.escape, alternatives))) if ids else None, ids)
        return self._special

    def piece(self, token: int) -> bytes:
        """The bytes a generated token adds to the text (special tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        self.check_tokens([token])
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        out = buf.raw[: max(n, 0)]
        self._pieces[token] = out
        return out

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        self.check_tokens(tokens)
        return b"".join(self.piece(t) for t in tokens)

    # metadata --------------------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        self._open()
        buf = ctypes.create_string_buffer(4096)
        n = ll.llama_model_meta_val_str(self._ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            ll.llama_model_meta_val_str(self._ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        self._open()
        tmpl = ll.llama_model_chat_template(self._ptr, None)
        return tmpl.decode("utf-8", "replace") if tmpl else None

    def describe(self) -> str:
        self._open()
        buf = ctypes.create_string_buffer(256)
        ll.llama_model_desc(self._ptr, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            ll.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        try:
            self.close()
        except (AttributeError, TypeError):  # at interpreter exit llama_cpp may be gone already: nothing to free
            pass


def apply_builtin_template(template: str, messages: Sequence[tuple[str, str]], add_assistant: bool) -> str | None:
    """llama.cpp's own chat formatting for the templates it recognises; None when it does not know this one."""
    arr = (ll.llama_chat_message * len(messages))()
    keep = []  # the C structs borrow these bytes
    for i, (role, content) in enumerate(messages):
        r, c = role.encode(), content.encode()
        keep += [r, c]
        arr[i].role, arr[i].content = r, c
    size = 4096 + 2 * sum(len(c) for c in keep)
    buf = ctypes.create_string_buffer(size)
    n = ll.llama_chat_apply_template(template.encode(), arr, len(messages), add_assistant, buf, size)
    if n < 0:
        return None
    if n > size:
        buf = ctypes.create_string_buffer(n)
        n = ll.llama_chat_apply_template(template.encode(), arr, len(messages), add_assistant, buf, n)
    return buf.raw[:n].decode("utf-8", "replace")


class _Context:
    """What both kinds of cache share: a llama.cpp context and batch, freed once, refused after."""

    _ptr = None

    def _open(self) -> None:
        if not self._ptr:
            raise EdgespecError(f"the context of {self.model.path} has been closed; load the model again")

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        try:
            self.close()
        except (AttributeError, TypeError):  # at interpreter exit llama_cpp may be gone already: nothing to free
            pass


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Context(_Context):
    """One KV cache (sequence 0) of a model, with the list of tokens it holds."""

    def __init__(self, model: Model, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512) -> None:
        self.model = model
        self._ptr = None
        model._open()
        threads = n_threads or default_threads()
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = threads
        self._ptr = ll.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not create a {n_ctx}-token context for {model.path}: {_last_error()}")
        self._mem = ll.llama_get_memory(self._ptr)
        self.n_ctx: int = ll.llama_n_ctx(self._ptr)
        self.n_batch: int = min(n_batch, n_ctx)
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []
        self.llama_s = 0.0  # wall time spent inside llama.cpp calls, for the overhead figure

    @property
    def room(self) -> int:
        return self.n_ctx - len(self.tokens)

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = ()) -> np.ndarray:
        """Append tokens to the cache; return logits (float32, one row per index in logit_rows, in that order).

        Only the rows asked for are computed, which is what makes a batched verify cheap in memory.
        """
        self._open()
        if len(tokens) > self.room:
            raise ContextOverflowError(
                f"{len(self.tokens) + len(tokens)} tokens do not fit in the {self.n_ctx}-token context; "
                "use a larger --ctx-size or a shorter prompt"
            )
        want = {r: i for i, r in enumerate(logit_rows)}
        out = np.empty((len(logit_rows), self.model.n_vocab), dtype=np.float32)
        b = self._batch
        t0 = time.perf_counter()
        before = len(self.tokens)
        try:
            for start in range(0, len(tokens), self.n_batch):
                chunk = tokens[start : start + self.n_batch]
                base = len(self.tokens)
                for j, tok in enumerate(chunk):
                    b.token[j] = tok
                    b.pos[j] = base + j
                    b.n_seq_id[j] = 1
                    b.seq_id[j][0] = 0
                    b.logits[j] = (start + j) in want
                b.n_tokens = len(chunk)
                self.tokens.extend(chunk)  # before the call: on any failure the except below rolls it back
                rc = ll.llama_decode(self._ptr, b)
                if rc != 0:
                    raise BackendError(f"llama_decode failed with code {rc}: {_last_error()}")
                for j in range(len(chunk)):
                    row = want.get(start + j)
                    if row is not None:
                        ptr = ll.llama_get_logits_ith(self._ptr, j)
                        out[row] = np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))
        except BaseException:
            # A failed or interrupted decode (Ctrl-C lands right after the C call) leaves the cache as it was.
            if not ll.llama_memory_seq_rm(self._mem, 0, before, -1):
                self.clear()
            del self.tokens[before:]
            raise
        finally:
            self.llama_s += time.perf_counter() - t0
        return out

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the cache, drop the rest (llama_memory_seq_rm, result checked)."""
        if n >= len(self.tokens):
            return
        self._open()
        t0 = time.perf_counter()
        ok = ll.llama_memory_seq_rm(self._mem, 0, n, -1)
        self.llama_s += time.perf_counter() - t0
        if not ok:
            # Partial removal is refused by caches that cannot rewind (recurrent models); start over cleanly.
            self.clear()
            raise BackendError(f"llama.cpp could not roll back the cache of {self.model.path} to {n} tokens")
        del self.tokens[n:]

    def clear(self) -> None:
        self._open()
        ll.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def sync(self, seq: Sequence[int]) -> int:
        """Make the cache hold exactly seq, keeping the prefix it already shares with seq; returns tokens decoded."""
        keep = self.common_prefix(seq)
        self.truncate(keep)
        self.decode(seq[keep:])
        return len(seq) - keep

    def common_prefix(self, seq: Sequence[int]) -> int:
        return common_prefix(self.tokens, seq)


class SeqContext(_Context):
    """One KV cache shared by n_seq sequences (llama.cpp sequence ids 0..n_seq-1, n_ctx tokens each), with the
    tokens each one holds. One decode() call carries rows of several sequences: the batch a server steps."""

    def __init__(self, model: Model, n_ctx: int, n_seq: int, n_threads: int | None = None, n_batch: int = 512) -> None:
        self.model = model
        self._ptr = None
        model._open()
        threads = n_threads or default_threads()
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx * n_seq
        params.n_seq_max = n_seq
        params.kv_unified = False  # each sequence its own n_ctx cells
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = threads
        self._ptr = ll.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not create {n_seq} sequences of {n_ctx} tokens for {model.path}: "
                                 f"{_last_error()}")
        self._mem = ll.llama_get_memory(self._ptr)
        self.n_seq = n_seq
        self.n_ctx: int = ll.llama_n_ctx(self._ptr) // n_seq  # per sequence
        self.n_batch = n_batch
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]
        self.llama_s = 0.0

    def room(self, seq: int) -> int:
        return self.n_ctx - len(self.tokens[seq])

    def decode(self, items: Sequence[tuple[int, Sequence[int], Sequence[int]]]) -> list[np.ndarray]:
        """items: (sequence, tokens to append, rows wanted); returns the logits of each item's rows (float32, one
        row per index asked for, in that order). Items share llama.cpp calls of up to n_batch tokens."""
        self._open()
        for seq, tokens, _ in items:
            if len(tokens) > self.room(seq):
                raise ContextOverflowError(f"{len(self.tokens[seq]) + len(tokens)} tokens do not fit in a "
                                           f"{self.n_ctx}-token sequence; use a larger --ctx-size")
        n_vocab = self.model.n_vocab
        outs = [np.empty((len(rows), n_vocab), dtype=np.float32) for _, _, rows in items]
        before = {seq: len(self.tokens[seq]) for seq, _, _ in items}
        # (item, index in the item's tokens) of every token, cut into llama.cpp calls of n_batch
        flat = [(i, j) for i, (_, tokens, _) in enumerate(items) for j in range(len(tokens))]
        wants = [{r: k for k, r in enumerate(rows)} for _, _, rows in items]
        b = self._batch
        t0 = time.perf_counter()
        try:
            for start in range(0, len(flat), self.n_batch):
                chunk = flat[start:start + self.n_batch]
                for n, (i, j) in enumerate(chunk):
                    seq, tokens, _ = items[i]
                    b.token[n] = tokens[j]
                    b.pos[n] = len(self.tokens[seq])
                    b.n_seq_id[n] = 1
                    b.seq_id[n][0] = seq
                    b.logits[n] = j in wants[i]
                    self.tokens[seq].append(tokens[j])  # before the call: on failure the except rolls it back
                b.n_tokens = len(chunk)
                rc = ll.llama_decode(self._ptr, b)
                if rc != 0:
                    raise BackendError(f"llama_decode failed with code {rc}: {_last_error()}")
                for n, (i, j) in enumerate(chunk):
                    k = wants[i].get(j)
                    if k is not None:
                        ptr = ll.llama_get_logits_ith(self._ptr, n)
                        outs[i][k] = np.ctypeslib.as_array(ptr, shape=(n_vocab,))
        except BaseException:
            for seq, n in before.items():  # a failed or interrupted decode leaves every sequence as it was
                if not ll.llama_memory_seq_rm(self._mem, seq, n, -1):
                    self.clear(seq)
                del self.tokens[seq][n:]
            raise
        finally:
            self.llama_s += time.perf_counter() - t0
        return outs

    def truncate(self, seq: int, n: int) -> None:
        """Keep the first n tokens of a sequence (llama_memory_seq_rm, result checked)."""
        if n >= len(self.tokens[seq]):
            return
        self._open()
        if not ll.llama_memory_seq_rm(self._mem, seq, n, -1):
            self.clear(seq)
            raise BackendError(f"llama.cpp could not roll back sequence {seq} of {self.model.path} to {n} tokens")
        del self.tokens[seq][n:]

    def clear(self, seq: int) -> None:
        self._open()
        ll.llama_memory_seq_rm(self._mem, seq, -1, -1)
        self.tokens[seq] = []

    def common_prefix(self, seq: int, tokens: Sequence[int]) -> int:
        return common_prefix(self.tokens[seq], tokens)


def quantize(src: str | os.PathLike, dst: str | os.PathLike, ftype: str = "Q8_0", threads: int | None = None) -> None:
    """Write a re-quantized copy of a GGUF model with llama.cpp's quantize API (used to make test drafts)."""
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{ftype.upper()}")
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    rc = ll.llama_model_quantize(os.fspath(src).encode(), os.fspath(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise BackendError(f"llama_model_quantize failed with code {rc}: {_last_error()}")
