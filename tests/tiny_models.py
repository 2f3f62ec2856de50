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


BYTE_EOS = "<|eos|>"


def byte_tokenizer():
    """A byte-level ``transformers`` tokenizer: every token is one byte (ids 0-255 in GPT-2's byte
    alphabet order), plus ``<|eos|>`` = 256. Each text has exactly one tokenization, so a forced text has
    one token path, whatever the decoder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_of = {ch: b for b, ch in _gpt2_byte_chars().items()}
    vocab = {ch: byte_of[ch] for ch in alphabet}
    vocab[BYTE_EOS] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([BYTE_EOS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=BYTE_EOS, pad_token=BYTE_EOS)


def _gpt2_byte_chars() -> dict[int, str]:
    """GPT-2's byte → printable character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
