"""Tiny randomly initialised causal LMs (Llama and GPT-2 architectures) for generation tests."""

from __future__ import annotations

import torch

LLAMA32_VOCAB = 128256


def tiny_llama(seed: int = 0, vocab_size: int = LLAMA32_VOCAB):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=128000, eos_token_id=128001,
    )
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(seed: int = 0, vocab_size: int = LLAMA32_VOCAB):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4, n_positions=2048,
                        bos_token_id=128000, eos_token_id=128001)
    return GPT2LMHeadModel(config).eval()
