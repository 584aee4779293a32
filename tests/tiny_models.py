"""Tiny llama-architecture GGUF models written with llama.cpp's own `gguf` package (a few hundred KB each).

They load and decode in milliseconds, so the engine is tested against real llama.cpp kernels and KV caches, not
mocks. A draft is the target's weights plus noise: same vocabulary, different model, partial agreement.
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

# N_CTX: the context the models say they were trained on, past any the tests ask for (a larger --ctx-size is noted)
N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF, N_CTX = 64, 2, 4, 2, 128, 32768
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _byte_tokens() -> list[str]:
    # GPT-2's byte -> printable character map: every byte is one token, so any text tokenizes.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


MERGES = ["Ġ t", "h e", "Ġt he", "i n"]


# Fill-in-the-middle tokens as Qwen2.5-Coder names them (llama.cpp finds them by these texts), in place of the byte
# tokens of \x01-\x06, which no test text holds.
FIM = {1: "<|fim_prefix|>", 2: "<|fim_suffix|>", 3: "<|fim_middle|>", 4: "<|fim_pad|>", 5: "<|repo_name|>",
       6: "<|file_sep|>"}


# A thinking model's tags (Qwen3, DeepSeek-R1), tokens of their own, in place of the byte tokens of \x07 and \x08.
THINK = {7: "<think>", 8: "</think>"}


def vocab(rename: dict[int, str] | None = None, fim: bool = False, think: bool = False) -> tuple[list[str], list[int]]:
    tokens = _byte_tokens() + [m.replace(" ", "") for m in MERGES] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - 3) + [gguf.TokenType.CONTROL] * 3
    for i, text in (rename or {}).items():
        tokens[i] = text
    for i, text in (FIM if fim else {}).items():
        tokens[i], types[i] = text, gguf.TokenType.CONTROL
    for i, text in (THINK if think else {}).items():
        tokens[i], types[i] = text, gguf.TokenType.USER_DEFINED
    return tokens, types


N_VOCAB = len(vocab()[0])
EOT = N_VOCAB - 3


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    kv = N_EMBD // N_HEAD * N_HEAD_KV

    def w(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    out = w(N_VOCAB, N_EMBD, scale=3.0)
    out[-3:] *= 0.1  # special tokens rarely win, so texts run long unless a test picks its own end token
    t = {"token_embd.weight": w(N_VOCAB, N_EMBD, scale=8.0), "output_norm.weight": np.ones(N_EMBD, np.float32),
         "output.weight": out}
    for i in range(N_LAYER):
        t |= {f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, np.float32), f"blk.{i}.attn_q.weight": w(N_EMBD, N_EMBD),
              f"blk.{i}.attn_k.weight": w(kv, N_EMBD), f"blk.{i}.attn_v.weight": w(kv, N_EMBD),
              f"blk.{i}.attn_output.weight": w(N_EMBD, N_EMBD), f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, np.float32),
              f"blk.{i}.ffn_gate.weight": w(N_FF, N_EMBD), f"blk.{i}.ffn_up.weight": w(N_FF, N_EMBD),
              f"blk.{i}.ffn_down.weight": w(N_EMBD, N_FF)}
    return t


def perturbed(base: dict[str, np.ndarray], noise: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (v + noise * v.std() * rng.standard_normal(v.shape)).astype(np.float32) if v.ndim > 1 else v
            for k, v in base.items()}


# A template that refuses a system message, as Gemma- and Mistral-style Jinja templates do (markup llama.cpp does not
# recognise, so the Jinja itself runs).
NO_SYSTEM = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
             "{% for message in messages %}{{ '### ' + message['role'] + ': ' + message['content'] + '\n' }}"
             "{% endfor %}{% if add_generation_prompt %}{{ '### answer: ' }}{% endif %}")


def write(path: Path, tensors: dict[str, np.ndarray], eos: int = EOT, rename: dict[int, str] | None = None,
          chat_template: str | None = CHATML, fim: bool = False, think: bool = False) -> Path:
    """Write one model. `eos` picks the end-of-generation token; `rename` changes token texts (pair-check tests);
    chat_template None writes none; fim: with fill-in-the-middle tokens (FIM); think: with a thinking model's tags.
    A tensor given as (bytes, type) is written as that quantised type (the bytes from gguf.quants.quantize)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("edgespec-tiny")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens, types = vocab(rename, fim, think)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(EOT)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for name, arr in tensors.items():
        if isinstance(arr, tuple):
            w.add_tensor(name, arr[0], raw_dtype=arr[1])
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
