"""A loaded GGUF model: weights and vocabulary, tokenization (literal or with control tokens), chat templates."""
from __future__ import annotations

import ctypes
import os
import re
import threading
from typing import Sequence

import numpy as np

from ..errors import BackendError, EdgespecError, InvalidArgument, ModelLoadError
from . import llama, rpc as rpc_backend
from .llama import _Freed, _Interruptible, _last_error, ll

# llama.cpp's --cache-type-k/-v, those kept: each token's K and V are rounded to the type as they are written, and a
# verify batch computes them a hair differently from one token at a time; q8_0's rounding seldom turns that into
# another token (greedy output stays the target's, or parts at a measured near-tie), but q4_0's coarser steps turned
# it into differences at clear margins (bench/kv_identity.py, bench/results/kv-identity.log), and lossless comes first.
KV_TYPES = ("f16", "f32", "q8_0")
KV_BYTES = {"f16": 2.0, "f32": 4.0, "q8_0": 34 / 32}  # a value's bytes in the cache (q8_0: 32 values, 2-byte scale)


def kv_types(kv_cache: str | Sequence[str]) -> tuple[str, str]:
    """A KV cache's number types, (K, V), from one name for both or a pair; an unknown name is InvalidArgument."""
    pair = (kv_cache, kv_cache) if isinstance(kv_cache, str) else tuple(kv_cache)
    if len(pair) != 2 or any(t not in KV_TYPES for t in pair):
        raise InvalidArgument(f"KV cache type {kv_cache!r}: use one of {', '.join(KV_TYPES)} (for K and V alike, or "
                              f"a pair)")
    return pair


class Model(_Freed):
    """A loaded GGUF model: weights and vocabulary, no KV cache (its contexts' caches take kv_cache's types)."""

    def __init__(self, path: str | os.PathLike, n_gpu_layers: int = 0, vocab_only: bool = False,
                 rpc: str | Sequence[str] = (), tensor_split: Sequence[float] = (), repack: bool = True,
                 output_here: bool = False, kv_cache: str | Sequence[str] = "f16") -> None:
        """rpc: endpoints of rpc-servers (rpc.py) whose devices take this model's offloaded layers before the local
        GPUs' (n_gpu_layers 0 then means all of them); without it, once a process uses servers, a model stays on
        this machine. tensor_split: the proportion of layers for each device, in that order. repack=False: the
        CPU's weights in the file's own layout (llama.cpp's --no-repack; what an rpc-server computes from, which
        gets the weights over the network as plain buffers), else repacked where llama.cpp has faster CPU kernels
        for the layout (Q4_0 and Q4_K among others, on AVX2 and ARM). output_here: with rpc, the output layer stays on
        this machine (rpc.output_here), so a decode brings back each row's hidden state instead of its logits.
        kv_cache: the number type of its contexts' KV caches (kv_types; llama.cpp's --cache-type-k/-v): q8_0 halves
        the f16 cache's memory; a quantized V cache needs flash attention, which llama.cpp turns on where it can."""
        self.path = os.fspath(path)
        self.n_gpu_layers = n_gpu_layers = -1 if rpc and n_gpu_layers == 0 else n_gpu_layers
        self.rpc = rpc_backend.parse(rpc) if rpc else []
        self.tensor_split = rpc_backend.proportions(tensor_split) if tensor_split else []
        if output_here and not self.rpc:
            raise InvalidArgument("--output-here keeps a target's output layer here when its other layers are on "
                                  "rpc-servers: give --rpc too")
        self.output_here = bool(output_here)
        self.kv_cache = kv_types(kv_cache)
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
        params.use_extra_bufts = repack
        devices = split = overrides = None  # kept alive for the load
        if self.rpc or (rpc_backend.uses_servers() and not vocab_only):
            devices = rpc_backend.device_list((rpc_backend.devices(self.rpc) if self.rpc else [])
                                              + rpc_backend.local_devices())
            params.devices = ctypes.cast(devices, ctypes.c_void_p)
        if self.tensor_split:
            split = rpc_backend.tensor_split(self.tensor_split)
            params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
        if self.output_here:
            overrides = rpc_backend.output_here()
            params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
        since = llama._log_count
        with _Interruptible() as guard:
            progress = ll.llama_progress_callback(guard.progress)  # kept alive for the call
            params.progress_callback = progress
            self._ptr = ll.llama_model_load_from_file(self.path.encode(), params)
            if not self._ptr and guard.interrupted:
                return  # KeyboardInterrupt is raised on leaving the block
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not load {self.path}: {_last_error(since)}")
        if self.rpc:
            rpc_backend.track(self, model=True)
        self._vocab = ll.llama_model_get_vocab(self._ptr)
        self.n_vocab: int = ll.llama_vocab_n_tokens(self._vocab)
        self.n_ctx_train: int = ll.llama_model_n_ctx_train(self._ptr)
        self.is_recurrent = bool(ll.llama_model_is_recurrent(self._ptr) or ll.llama_model_is_hybrid(self._ptr))
        self._pieces: dict[int, bytes] = {}
        self._special: tuple[re.Pattern | None, dict[str, int]] | None = None
        self._llg = None
        self._llg_lock = threading.Lock()  # a server warms it in the background while requests may ask
        self._eog: list[int] | None = None
        self._attrs: list[int] | None = None
        self._control: frozenset[int] | None = None
        if not vocab_only:
            self._check_kv_cache()

    def kv_shape(self) -> tuple[int, int, int, int] | None:
        """(layers, KV heads, K values and V values a head holds) of a token in the KV cache, from the metadata;
        None where it does not say (per-layer head counts, say)."""
        arch = self.meta("general.architecture")

        def num(key: str) -> int | None:
            value = self.meta(f"{arch}.{key}") or ""
            return int(value) if value.isdigit() and int(value) > 0 else None

        layers, heads, embd = num("block_count"), num("attention.head_count"), num("embedding_length")
        k = num("attention.key_length") or (embd // heads if embd and heads else None)
        v = num("attention.value_length") or k
        kv_heads = num("attention.head_count_kv") or heads
        return (layers, kv_heads, k, v) if layers and kv_heads and k and v else None

    def kv_bytes_per_token(self, kv_cache: Sequence[str] | None = None) -> int | None:
        """What a token takes in the KV cache of every layer, in bytes, with these types (default: its own)."""
        shape, (tk, tv) = self.kv_shape(), kv_cache or self.kv_cache
        if shape is None:
            return None
        layers, heads, k, v = shape
        return round(layers * heads * (k * KV_BYTES[tk] + v * KV_BYTES[tv]))

    def _check_kv_cache(self) -> None:
        """A q8_0 cache rounds blocks of 32 values: a model whose attention heads hold another multiple is refused
        here, in words, rather than by llama.cpp's context without a reason."""
        shape = self.kv_shape()
        for kind, t, size in zip("KV", self.kv_cache, shape[2:] if shape else ()):
            if t == "q8_0" and size % 32:
                self.close()
                raise InvalidArgument(f"a q8_0 {kind} cache needs attention heads of a multiple of 32 values; "
                                      f"{os.path.basename(self.path)}'s hold {size} (use f16)")

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

    @property
    def fim_ids(self) -> tuple[int, int, int] | None:
        """Fill in the middle: the (prefix, suffix, middle) tokens, or None where the vocabulary lacks them."""
        vocab = self._open()
        ids = (ll.llama_vocab_fim_pre(vocab), ll.llama_vocab_fim_suf(vocab), ll.llama_vocab_fim_mid(vocab))
        return None if min(ids) < 0 else ids

    @property
    def fim_repo_ids(self) -> tuple[int | None, int | None]:
        """Fill in the middle across files: the (repository name, file separator) tokens, each None if absent."""
        vocab = self._open()
        return tuple(t if t >= 0 else None for t in (ll.llama_vocab_fim_rep(vocab), ll.llama_vocab_fim_sep(vocab)))

    def token_text(self, token: int) -> bytes:
        """The vocabulary entry as stored (what the pair check compares)."""
        self.check_tokens([token])
        return ll.llama_vocab_get_text(self._vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        return 0 <= token < self.n_vocab and bool(ll.llama_vocab_is_eog(self._open(), token))

    def constraint_tokenizer(self):
        """llguidance's tokenizer for this vocabulary, every end-of-generation token an end for it (built once: a
        pass over the vocabulary, about a second for 150k tokens)."""
        with self._llg_lock:
            return self._constraint_tokenizer()

    def _constraint_tokenizer(self):
        if self._llg is None:
            from llguidance import LLTokenizer

            # Each token's bytes as llama.cpp renders it; control tokens (and user-defined ones shaped like them)
            # marked with a leading 0xff, llguidance's sign for a special token (as its llamacpp helper does).
            vocab, buf, pieces, attrs = self._open(), ctypes.create_string_buffer(4096), [], self._token_attrs()
            for t in range(self.n_vocab):
                n = ll.llama_token_to_piece(vocab, t, buf, len(buf), 0, True)
                piece = bytes(buf[:max(n, 0)])
                attr = attrs[t]
                if attr & ll.LLAMA_TOKEN_ATTR_CONTROL or (attr & ll.LLAMA_TOKEN_ATTR_USER_DEFINED
                                                          and piece.startswith(b"<") and piece.endswith(b">")):
                    piece = b"\xff" + piece
                pieces.append(piece)
            tokenize = ctypes.cast(ll.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
            self._llg = LLTokenizer.from_llamacpp(tokens=pieces, vocab_ptr=vocab, tokenize_fptr=tokenize,
                                                  eos_token=self.eog_ids or [self.eos], slices=None)
        return self._llg

    @property
    def eog_ids(self) -> list[int]:
        """Every end-of-generation token of the vocabulary."""
        if self._eog is None:
            vocab = self._open()
            self._eog = [t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(vocab, t)]
        return self._eog

    @property
    def control_ids(self) -> frozenset[int]:
        """The vocabulary's control tokens (a chat template's markers, end-of-text): structure, not text."""
        if self._control is None:
            self._control = frozenset(t for t, attr in enumerate(self._token_attrs())
                                      if attr & ll.LLAMA_TOKEN_ATTR_CONTROL)
        return self._control

    def _token_attrs(self) -> list[int]:
        """Each token's llama.cpp attributes (control, unknown, user-defined...), read once for the vocabulary."""
        if self._attrs is None:
            vocab = self._open()
            self._attrs = [ll.llama_vocab_get_attr(vocab, t) for t in range(self.n_vocab)]
        return self._attrs

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
            for t, attr in enumerate(self._token_attrs()):
                if attr & wanted:
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

    def n_params(self) -> int:
        self._open()
        return int(ll.llama_model_n_params(self._ptr))

    def size(self) -> int:
        """The bytes of its weights."""
        self._open()
        return int(ll.llama_model_size(self._ptr))

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            lock = getattr(self, "_llg_lock", None)
            if lock is not None:
                lock.acquire()  # not while a thread still reads the vocabulary for the grammar engine
            try:
                if self._ptr:
                    ll.llama_model_free(self._ptr)
                    self._ptr = None
            finally:
                if lock is not None:
                    lock.release()


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


