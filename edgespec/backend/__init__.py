"""The only package that imports llama_cpp: load models, tokenize, decode batches, edit KV caches.

llama.py owns the library (its log, interrupts, helpers), model.py a model and its vocabulary, contexts.py and
seqcontext.py the KV caches, rpc.py other hosts' rpc-servers. A `Context` owns one KV cache and knows exactly which
tokens it holds (`tokens`). Every decode appends to that list and every removal is checked, so callers can reconcile
by common prefix instead of counting.
"""
from .contexts import Context, common_prefix
from .llama import builtin_templates, default_threads, ll, quantize, set_verbose, system_info
from .model import Model, apply_builtin_template
from .seqcontext import SeqContext

__all__ = ["Context", "SeqContext", "Model", "apply_builtin_template", "builtin_templates", "common_prefix",
           "default_threads", "ll", "quantize", "set_verbose", "system_info"]
