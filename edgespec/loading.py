"""Model files -> what an Engine runs on: the target's context and its proposer (a draft model checked against the
target, prompt lookup over the target's vocabulary, or both: the hybrid). Engine.load is its front door."""
from __future__ import annotations

import os
from typing import Sequence

from .backend import Context, Model
from .errors import EdgespecError
from .pairing import VocabInfo, check_pair
from .proposers import DraftModelProposer, HybridProposer, PromptLookupProposer, Proposer


def load(target: str | os.PathLike, draft: str | os.PathLike | None = None, *, n_ctx: int, n_threads: int | None,
         n_gpu_layers: int, draft_n_ctx: int | None, draft_n_gpu_layers: int | None, draft_n_threads: int | None,
         draft_p_min: float, lookup: bool, draft_max: int, tree_width: int, rpc: Sequence[str],
         draft_rpc: Sequence[str], tensor_split: Sequence[float], output_here: bool = False,
         kv_cache: str | Sequence[str] = "f16") -> tuple[Context, Proposer | None]:
    """The target's context and its proposer (None: plain decoding); settings as Engine.load takes them."""
    if n_ctx < 1:
        raise EdgespecError(f"context size must be at least 1, got {n_ctx}")
    if draft_max < 0:
        raise EdgespecError(f"draft length must be >= 0, got {draft_max}")
    if tree_width < 1:
        raise EdgespecError(f"tree width must be >= 1, got {tree_width}")
    tm = Model(target, n_gpu_layers, rpc=rpc, tensor_split=tensor_split, output_here=output_here, kv_cache=kv_cache)
    proposer = None
    if draft is not None:
        dm = Model(draft, n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers, rpc=draft_rpc,
                   kv_cache=kv_cache)
        check_pair(VocabInfo.of(tm), VocabInfo.of(dm))
        proposer = DraftModelProposer(Context(dm, draft_n_ctx or n_ctx, draft_n_threads or n_threads,
                                              branches=min(tree_width, 2)), tm.n_vocab, p_min=draft_p_min)
    if lookup:
        found = PromptLookupProposer.for_model(tm)
        proposer = found if proposer is None else HybridProposer(proposer, found)
    if proposer is not None and (tm.is_recurrent or (draft is not None and dm.is_recurrent)):
        raise EdgespecError("speculative decoding needs a target whose KV cache can be rolled back; recurrent "
                            "and hybrid models cannot (run without --draft or --lookup)")
    return Context(tm, n_ctx, n_threads, branches=tree_width), proposer
