"""A KV cache that knows which tokens it holds: `Context` (one sequence, and the trees and branches speculation grows
beside it; many sequences: seqcontext.py). Every decode appends to the token list and every removal is checked, so
callers reconcile by common prefix."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..errors import BackendError, ContextOverflowError, EdgespecError, ModelLoadError
from . import rpc
from .llama import _Freed, _last_error, default_threads, ll
from .model import Model

class _Context(_Freed):
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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix. It runs every round on the whole text (a draft model re-syncing),
    so lists are compared by slices (C speed): one comparison when one extends the other, the usual case, else a
    binary search."""
    a, b = (x if isinstance(x, list) else list(x) for x in (a, b))
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Context(_Context):
    """One KV cache (sequence 0) of a model, with the list of tokens it holds. branches > 1: it can also decode a
    verification tree of up to that many leaves (decode_tree), its cells shared by the branches through them, or
    grow branches beside sequence 0 a token at a time (fork / decode_rows / end_fork: a draft model's)."""

    def __init__(self, model: Model, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 branches: int = 1) -> None:
        self.model = model
        self._ptr = None
        model._open()
        threads = n_threads or default_threads()
        self.n_threads = threads
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = self.branches = max(1, branches)
        params.kv_unified = self.branches > 1  # a cell may belong to several sequences only in a unified cache
        params.n_threads = params.n_threads_batch = threads
        params.type_k, params.type_v = (getattr(ll, f"GGML_TYPE_{t.upper()}") for t in model.kv_cache)
        self._ptr = ll.llama_init_from_model(model._ptr, params)
        if not self._ptr:
            raise ModelLoadError(f"llama.cpp could not create a {n_ctx}-token context for {model.path}: {_last_error()}")
        self._mem = ll.llama_get_memory(self._ptr)
        if model.rpc:
            rpc.track(self)
        self.n_ctx: int = ll.llama_n_ctx(self._ptr)
        self.n_batch: int = min(n_batch, n_ctx)
        self._batch = ll.llama_batch_init(self.n_batch, 0, self.branches)
        self.tokens: list[int] = []
        self.llama_s = 0.0  # wall time spent inside llama.cpp calls, for the overhead figure
        self._tree: _Pending | None = None  # a decoded tree waiting for keep_path()
        self._fork: tuple[int, dict[int, list[int]]] | None = None  # forks: where, and each branch's own tokens

    @property
    def room(self) -> int:
        return self.n_ctx - len(self.tokens)

    def decode(self, tokens: Sequence[int], logit_rows: Sequence[int] = (),
               progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Append tokens to the cache; return logits (float32, one row per index in logit_rows, in that order).

        Only the rows asked for are computed, which is what makes a batched verify cheap in memory. progress, if
        given, is called with the number of tokens decoded so far after each llama.cpp call (of n_batch tokens),
        once they are computed.
        """
        self._open()
        self._settle()
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
                if progress is not None:
                    ll.llama_synchronize(self._ptr)  # (a GPU's decode returns before it is computed)
                    progress(start + len(chunk))
        except BaseException:
            # A failed or interrupted decode (Ctrl-C lands right after the C call) leaves the cache as it was.
            if not ll.llama_memory_seq_rm(self._mem, 0, before, -1):
                self.clear()
            del self.tokens[before:]
            raise
        finally:
            self.llama_s += time.perf_counter() - t0
        return out

    def decode_tree(self, root: int, tokens: Sequence[int], parents: Sequence[int]) -> np.ndarray:
        """Append root and, below it, a tree of tokens (parents[i]: -1 for the root, else an earlier node) in one
        decode, each node seeing the cache, the root and its own ancestors only: a llama.cpp sequence per leaf, a
        cell carrying the sequence of every branch through it (the cache's own tokens are lent to the branches for
        the call). Returns the logits of the root and of every node, in that order. The cache then holds the whole
        tree until keep_path() keeps one path of it; any other use of the cache first drops the tree."""
        self._open()
        self._settle()
        n = len(tokens)
        kids = [0] * n
        for i, p in enumerate(parents):
            if not -1 <= p < i:
                raise EdgespecError(f"tree node {i} has parent {p}: a parent must be an earlier node or -1")
            if p >= 0:
                kids[p] += 1
        leaves = [i for i in range(n) if kids[i] == 0]
        if len(leaves) > self.branches:
            raise EdgespecError(f"a tree of {len(leaves)} branches needs a context made with branches >= "
                                f"{len(leaves)}, this one has {self.branches}")
        if n + 1 > min(self.room, self.n_batch):
            raise ContextOverflowError(f"a tree of {n} tokens does not fit in the context (room {self.room}) or "
                                       f"one batch ({self.n_batch})")
        seqs: list[set[int]] = [set() for _ in range(n)]
        for b, leaf in enumerate(leaves):
            node = leaf
            while node >= 0:
                seqs[node].add(b)
                node = parents[node]
        depth = [0] * n
        for i, p in enumerate(parents):
            depth[i] = 1 if p < 0 else depth[p] + 1
        base = len(self.tokens)
        out = np.empty((n + 1, self.model.n_vocab), dtype=np.float32)
        b = self._batch
        t0 = time.perf_counter()
        self._tree = _Pending(base, max(1, len(leaves)), list(tokens), list(parents), seqs)
        self.tokens.append(root)
        try:
            for s in range(1, len(leaves)):
                ll.llama_memory_seq_cp(self._mem, 0, s, -1, -1)  # the branches see the cache (cells shared)
            rows = [(root, base, range(max(1, len(leaves))))] + \
                   [(tokens[i], base + depth[i], sorted(seqs[i])) for i in range(n)]
            for j, (tok, pos, ids) in enumerate(rows):
                b.token[j], b.pos[j], b.logits[j] = tok, pos, True
                b.n_seq_id[j] = len(ids)
                for k, s in enumerate(ids):
                    b.seq_id[j][k] = s
            b.n_tokens = n + 1
            rc = ll.llama_decode(self._ptr, b)
            if rc != 0:
                raise BackendError(f"llama_decode failed with code {rc}: {_last_error()}")
            for j in range(n + 1):
                out[j] = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ptr, j), shape=(self.model.n_vocab,))
        except BaseException:
            self._drop_tree(keep_root=False)
            raise
        finally:
            self.llama_s += time.perf_counter() - t0
        return out

    def keep_path(self, path: Sequence[int]) -> None:
        """After decode_tree: keep the root and the nodes of `path` (from a child of the root down, each the child
        of the one before), remove every other node's cells and the branches' sequences (results checked)."""
        tree = self._tree
        if tree is None:
            raise EdgespecError("keep_path() needs a tree decoded by decode_tree() first")
        for i, node in enumerate(path):
            if not 0 <= node < len(tree.tokens) or tree.parents[node] != (path[i - 1] if i else -1):
                self._drop_tree()
                raise EdgespecError(f"{list(path)} is not a path from the root of the decoded tree")
        t0 = time.perf_counter()
        first, n = tree.base + 1, len(path)
        branch = min(tree.seqs[path[-1]]) if path else 0
        if branch:  # the path is not sequence 0's own: sequence 0 takes the path's cells instead of its own
            ok = ll.llama_memory_seq_rm(self._mem, 0, first, -1)
            ll.llama_memory_seq_cp(self._mem, branch, 0, first, first + n)
        else:
            ok = ll.llama_memory_seq_rm(self._mem, 0, first + n, -1)
        for s in range(1, tree.branches):
            ok = ll.llama_memory_seq_rm(self._mem, s, -1, -1) and ok
        self._tree = None
        self.llama_s += time.perf_counter() - t0
        if not ok:
            self.clear()
            raise BackendError(f"llama.cpp could not remove a verification tree from the cache of {self.model.path}")
        self.tokens.extend(tree.tokens[i] for i in path)

    def fork(self, branch: int) -> None:
        """Sequence `branch` (1 to branches - 1) starts as what sequence 0 holds now, its cells shared, not copied;
        decode_rows() then grows each apart. end_fork() keeps one of them; any other use of the cache keeps 0's."""
        self._open()
        if self._tree is not None:
            self._drop_tree()
        if not 0 < branch < self.branches:
            raise EdgespecError(f"branch {branch} needs a context made with branches > {branch}, this one has "
                                f"{self.branches}")
        at, own = self._fork or (len(self.tokens), {})
        if branch in own or at != len(self.tokens):
            raise EdgespecError("a branch forks from sequence 0 once, before sequence 0 grows further")
        ll.llama_memory_seq_cp(self._mem, 0, branch, -1, -1)
        own[branch] = []
        self._fork = (at, own)

    def decode_rows(self, rows: Sequence[tuple[int, int]]) -> np.ndarray:
        """One token appended to each of several sequences (0 or a fork's branch) in one decode: (token, sequence)
        rows, one per sequence; returns their logits in that order."""
        self._open()
        at, own = self._fork or (len(self.tokens), {})
        lists = {0: self.tokens, **own}
        if len({s for _, s in rows}) != len(rows) or any(s not in lists for _, s in rows):
            raise EdgespecError(f"decode_rows takes one row for each of sequence 0 and the forked branches "
                                f"{sorted(own)}, got sequences {[s for _, s in rows]}")
        if len(rows) > self.n_batch or any(at + len(own[s]) >= self.n_ctx if s else self.room < 1 for _, s in rows):
            raise ContextOverflowError(f"{len(rows)} rows do not fit in the context ({self.n_ctx} tokens)")
        b = self._batch
        pos = [len(self.tokens) if s == 0 else at + len(own[s]) for _, s in rows]
        t0 = time.perf_counter()
        try:
            for j, (tok, s) in enumerate(rows):
                b.token[j], b.pos[j], b.logits[j], b.n_seq_id[j] = tok, pos[j], True, 1
                b.seq_id[j][0] = s
            b.n_tokens = len(rows)
            for tok, s in rows:
                lists[s].append(tok)
            rc = ll.llama_decode(self._ptr, b)
            if rc != 0:
                raise BackendError(f"llama_decode failed with code {rc}: {_last_error()}")
            return np.stack([np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ptr, j),
                                                   shape=(self.model.n_vocab,)) for j in range(len(rows))])
        except BaseException:
            ok = True
            for (_, s), p in zip(rows, pos):
                ok = ll.llama_memory_seq_rm(self._mem, s, p, -1) and ok
                del lists[s][p - (0 if s == 0 else at):]
            if not ok:
                self.clear()
            raise
        finally:
            self.llama_s += time.perf_counter() - t0

    def end_fork(self, branch: int = 0, n: int | None = None) -> None:
        """Keep what sequence 0 held at the fork, then the first n tokens (all: None) of `branch`'s own (0: sequence
        0's); remove every other cell and the branches' sequences (results checked)."""
        if self._fork is None:
            return
        (at, own), self._fork = self._fork, None
        t0 = time.perf_counter()
        grown = self.tokens[at:] if branch == 0 else own.get(branch, [])
        n = len(grown) if n is None else min(n, len(grown))
        if branch:
            ok = ll.llama_memory_seq_rm(self._mem, 0, at, -1)
            ll.llama_memory_seq_cp(self._mem, branch, 0, at, at + n)
        else:
            ok = ll.llama_memory_seq_rm(self._mem, 0, at + n, -1)
        for s in own:
            ok = ll.llama_memory_seq_rm(self._mem, s, -1, -1) and ok
        self.tokens[at:] = grown[:n]
        self.llama_s += time.perf_counter() - t0
        if not ok:
            self.clear()
            raise BackendError(f"llama.cpp could not remove a drafted branch from the cache of {self.model.path}")

    def _settle(self) -> None:
        """A tree left undecided (an error between decode_tree and keep_path): drop it, keep the root. Branches
        left forked: drop them, keep sequence 0's own."""
        if self._tree is not None:
            self._drop_tree()
        if self._fork is not None:
            self.end_fork()

    def _drop_tree(self, keep_root: bool = True) -> None:
        tree, self._tree = self._tree, None
        ok = ll.llama_memory_seq_rm(self._mem, 0, tree.base + keep_root, -1)
        for s in range(1, tree.branches):
            ok = ll.llama_memory_seq_rm(self._mem, s, -1, -1) and ok
        del self.tokens[tree.base + keep_root:]
        if not ok:
            self.clear()

    def truncate(self, n: int) -> None:
        """Keep the first n tokens of the cache, drop the rest (llama_memory_seq_rm, result checked)."""
        self._settle()
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
        self._tree = self._fork = None

    def sync(self, seq: Sequence[int]) -> int:
        """Make the cache hold exactly seq, keeping the prefix it already shares with seq; returns tokens decoded.
        (A draft model's prompt; the target's is read(), which needs its last row anyway.)

        It returns once they are computed. Where the backend computes asynchronously a decode that asks for no
        logits returns once it is queued, and the next call that reads logits waits for it: a prompt's time went
        to the first decode after it (bench/prompt_read.py). llama_synchronize waits for a GPU; an rpc-server
        answers no command that computes, and llama_synchronize only waits until the commands are sent, so there
        the last token's logits are asked for (one row: the server answers once it has computed)."""
        keep = self.common_prefix(seq)
        self.truncate(keep)
        new = seq[keep:]
        self.decode(new, [len(new) - 1] if new and self.model.rpc else [])
        if new:
            self.synchronize()
        return len(new)

    def read(self, seq: Sequence[int], progress: Callable[[int, int], None] | None = None) -> tuple[int, np.ndarray]:
        """Make the cache hold exactly seq and return how many tokens that decoded and the logits of its last row
        (where seq is held whole already, its last token is decoded again for them). Reading logits waits for the
        computation, on every backend. progress(processed, cached): after each llama.cpp call, how much of seq the
        cache holds, and how much of that it held before."""
        keep = min(self.common_prefix(seq), len(seq) - 1)
        self.truncate(keep)
        new = seq[keep:]
        rows = [len(new) - 1]
        return len(new), (self.decode(new, rows) if progress is None else
                          self.decode(new, rows, lambda n: progress(keep + n, keep)))[0]

    def synchronize(self) -> None:
        """Wait until what was decoded is computed (on a GPU; see sync() for an rpc-server)."""
        self._open()
        t0 = time.perf_counter()
        try:
            ll.llama_synchronize(self._ptr)
        finally:
            self.llama_s += time.perf_counter() - t0

    def common_prefix(self, seq: Sequence[int]) -> int:
        return common_prefix(self.tokens, seq)


@dataclass
class _Pending:
    """A tree decode_tree() put in the cache: where its root is, its shape and each node's branches."""

    base: int
    branches: int
    tokens: list[int]
    parents: list[int]
    seqs: list[set[int]]
