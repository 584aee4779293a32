"""`SeqContext`: one KV cache shared by many sequences, one decode carrying rows of all (the batch a server steps).
Like `Context`, it knows which tokens each sequence holds and checks every removal."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ..errors import BackendError, ContextOverflowError, ModelLoadError
from . import rpc
from .contexts import _Context, common_prefix
from .llama import _last_error, default_threads, ll
from .model import Model


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
        params.type_k, params.type_v = (getattr(ll, f"GGML_TYPE_{t.upper()}") for t in model.kv_cache)
        self._ptr = ll.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not create {n_seq} sequences of {n_ctx} tokens for {model.path}: "
                                 f"{_last_error()}")
        self._mem = ll.llama_get_memory(self._ptr)
        if model.rpc:
            rpc.track(self)
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


