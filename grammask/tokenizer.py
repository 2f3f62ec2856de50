"""One view of any tokenizer: the raw bytes of every token id, the special ids and the EOS ids.

Byte-level BPE (GPT-2, Llama-3, Qwen, DeepSeek), SentencePiece byte-fallback (``<0x0A>``, ``▁``) and
raw-byte vocabularies (tiktoken rank files) all land in the same form, :class:`TokenizerInfo`,
from which every backend is built.

``vocab_size`` is the width of the model's logits, which may differ from the tokenizer's own size:
LM heads are often padded (Qwen: 151,936 columns for 151,665 tokens), and some tokenizer files
carry more ids than the model has logits (the Llama-3.2 Vision ``tokenizer.json`` has 128,257
entries while the text model has 128,256 logits). Ids at or past :attr:`TokenizerInfo.real_vocab_size`
have no token and are never allowed; tokenizer ids at or past ``vocab_size`` are dropped.
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from grammask.errors import TokenizerError

__all__ = ["TokenizerInfo", "VocabType"]

# Names that end a turn or a document across the common model families; an id among these that
# the vocabulary has is an EOS id unless the caller passes ``eos_ids`` explicitly.
_END_TOKEN_NAMES = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<｜end▁of▁sentence｜>",
    "<end_of_turn>",
    "<|end|>",
)
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class VocabType(str, enum.Enum):
    """How a tokenizer's vocabulary strings map to bytes."""

    BYTE_LEVEL = "byte_level"
    """GPT-2 style, where every byte is drawn as one printable character (``Ġ`` is a space)."""
    BYTE_FALLBACK = "byte_fallback"
    """SentencePiece, with text pieces (``▁`` is a space) and ``<0xNN>`` pieces for raw bytes."""
    RAW = "raw"
    """The vocabulary strings (or bytes) are the tokens' text as it is."""


@functools.lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte → printable-character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(code): b for b, code in chars.items()}


def _decode_byte_level(piece: str) -> bytes:
    table = _byte_level_decoder()
    try:
        return bytes(table[c] for c in piece)
    except KeyError:
        # Not drawn from the byte alphabet (some vocabularies carry such entries): its UTF-8 is its text.
        return piece.encode("utf-8")


def _decode_byte_fallback(piece: str) -> bytes:
    match = _BYTE_FALLBACK.match(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")


_DECODERS = {
    VocabType.BYTE_LEVEL: _decode_byte_level,
    VocabType.BYTE_FALLBACK: _decode_byte_fallback,
    VocabType.RAW: lambda piece: piece.encode("utf-8"),
}


def _vocab_type_of_decoder(decoder: Mapping[str, Any] | None) -> VocabType | None:
    """Read the vocabulary type off a ``tokenizer.json`` decoder section."""
    if not decoder:
        return None
    kind = decoder.get("type")
    if kind == "ByteLevel":
        return VocabType.BYTE_LEVEL
    if kind in ("ByteFallback", "Metaspace"):
        return VocabType.BYTE_FALLBACK
    if kind == "Sequence":
        found = [_vocab_type_of_decoder(d) for d in decoder.get("decoders", [])]
        if VocabType.BYTE_LEVEL in found:
            return VocabType.BYTE_LEVEL
        if VocabType.BYTE_FALLBACK in found or any(
            d.get("type") == "Replace" and d.get("pattern", {}).get("String") == "\u2581"
            for d in decoder.get("decoders", [])
        ):
            return VocabType.BYTE_FALLBACK
    return None


def _guess_vocab_type(pieces: Iterable[str]) -> VocabType:
    """Guess from the pieces themselves (slow tokenizers have no decoder section)."""
    pieces = list(pieces)
    if any(_BYTE_FALLBACK.match(p) for p in pieces) or sum("\u2581" in p for p in pieces) > len(pieces) // 10:
        return VocabType.BYTE_FALLBACK
    if sum(("\u0120" in p) or ("\u010a" in p) for p in pieces) > len(pieces) // 20:
        return VocabType.BYTE_LEVEL
    return VocabType.RAW


@dataclass(frozen=True, eq=False)
class TokenizerInfo:
    """The bytes of every token id, and which ids are special or end the sequence.

    Build one with :meth:`from_huggingface`, :meth:`from_tokenizer_json` or :meth:`from_tiktoken`.

    Attributes:
        token_bytes: ``vocab_size`` entries; the raw bytes of each ordinary token, the UTF-8 text of each
            special token (for display only: a special token is never matched as text), ``b""`` past
            :attr:`real_vocab_size`.
        vocab_size: the width of the model's logits.
        real_vocab_size: how many ids (from 0) the tokenizer defines within ``vocab_size``.
        special_ids: ids that are never allowed inside a structure (control tokens, and tokens with no bytes).
        eos_ids: ids that end a sequence; allowed exactly where a structure may end.
        vocab_type: how the vocabulary was decoded.
    """

    token_bytes: tuple[bytes, ...]
    vocab_size: int
    real_vocab_size: int
    special_ids: frozenset[int]
    eos_ids: tuple[int, ...]
    vocab_type: VocabType
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        if len(self.token_bytes) != self.vocab_size:
            raise TokenizerError(f"token_bytes has {len(self.token_bytes)} entries, vocab_size is {self.vocab_size}")
        if not 0 < self.real_vocab_size <= self.vocab_size:
            raise TokenizerError(f"real_vocab_size {self.real_vocab_size} is not in (0, vocab_size={self.vocab_size}]")
        for eos in self.eos_ids:
            if not 0 <= eos < self.real_vocab_size:
                raise TokenizerError(f"EOS id {eos} is outside the vocabulary [0, {self.real_vocab_size})")
        if not self.eos_ids:
            raise TokenizerError("no EOS id: pass eos_ids=[...]")
        digest = hashlib.sha256()
        digest.update(json.dumps([self.vocab_size, self.real_vocab_size, sorted(self.special_ids), self.eos_ids]).encode())
        for token in self.token_bytes:
            digest.update(len(token).to_bytes(4, "little"))
            digest.update(token)
        object.__setattr__(self, "fingerprint", digest.hexdigest()[:32])

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_pieces(
        cls,
        pieces: Mapping[int, bytes],
        special: Mapping[int, str],
        *,
        vocab_type: VocabType,
        vocab_size: int | None = None,
        eos_ids: Sequence[int] | None = None,
        eos_names: Sequence[str] = (),
    ) -> "TokenizerInfo":
        """Build from decoded pieces.

        Args:
            pieces: id → raw bytes of every ordinary token.
            special: id → text of every special token.
            vocab_type: how ``pieces`` were decoded (kept for reference).
            vocab_size: the logits width; defaults to the tokenizer's own size (largest id + 1).
            eos_ids: the EOS ids; by default ``eos_names`` and the usual end-of-turn names found in ``special``.
            eos_names: texts of special tokens that end the sequence (from the tokenizer's config).
        """
        own_size = max([*pieces, *special]) + 1
        width = own_size if vocab_size is None else int(vocab_size)
        if width <= 0:
            raise TokenizerError(f"vocab_size must be positive, got {width}")
        real = min(own_size, width)
        token_bytes = [b""] * width
        special_ids = set(range(real))
        for token_id, data in pieces.items():
            if token_id < real and data:
                token_bytes[token_id] = data
                special_ids.discard(token_id)
        for token_id, text in special.items():
            if token_id < real:
                token_bytes[token_id] = text.encode("utf-8")
                special_ids.add(token_id)
        if eos_ids is None:
            by_text = {text: i for i, text in special.items() if i < real}
            names = [*eos_names, *_END_TOKEN_NAMES]
            eos_ids = list(dict.fromkeys(by_text[n] for n in names if n in by_text))
        return cls(
            token_bytes=tuple(token_bytes),
            vocab_size=width,
            real_vocab_size=real,
            special_ids=frozenset(special_ids),
            eos_ids=tuple(int(i) for i in eos_ids),
            vocab_type=vocab_type,
        )

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str] | Mapping[str, Any],
        *,
        vocab_size: int | None = None,
        eos_ids: Sequence[int] | None = None,
    ) -> "TokenizerInfo":
        """Build from a Hugging Face ``tokenizer.json`` (a path, or its parsed content).

        When a ``tokenizer_config.json`` lies beside the file, its ``eos_token`` is an EOS id.
        """
        eos_names: list[str] = []
        if isinstance(path, Mapping):
            data = path
        else:
            file = Path(path)
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise TokenizerError(f"cannot read tokenizer file {file}: {exc}") from None
            eos_names = _config_eos_names(file.parent / "tokenizer_config.json")
        return cls._from_json_data(data, vocab_size=vocab_size, eos_ids=eos_ids, eos_names=eos_names)

    @classmethod
    def _from_json_data(
        cls,
        data: Mapping[str, Any],
        *,
        vocab_size: int | None,
        eos_ids: Sequence[int] | None,
        eos_names: Sequence[str],
    ) -> "TokenizerInfo":
        model = data.get("model") or {}
        vocab = model.get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            vocab = {piece: i for i, (piece, _score) in enumerate(vocab)}
        if not isinstance(vocab, dict):
            raise TokenizerError("tokenizer.json has no model.vocab mapping")
        vocab_type = _vocab_type_of_decoder(data.get("decoder")) or _guess_vocab_type(vocab)
        decode = _DECODERS[vocab_type]
        pieces = {int(i): decode(p) for p, i in vocab.items()}
        special: dict[int, str] = {}
        for added in data.get("added_tokens", []):
            if added.get("special", False):
                special[int(added["id"])] = added["content"]
                pieces.pop(int(added["id"]), None)
            else:
                pieces[int(added["id"])] = added["content"].encode("utf-8")
        return cls.from_pieces(
            pieces, special, vocab_type=vocab_type, vocab_size=vocab_size, eos_ids=eos_ids, eos_names=eos_names
        )

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        eos_ids: Sequence[int] | None = None,
    ) -> "TokenizerInfo":
        """Build from a ``transformers`` tokenizer (fast or slow).

        Args:
            tokenizer: a ``PreTrainedTokenizerBase``.
            vocab_size: the model's logits width (``model.config.vocab_size``); defaults to the tokenizer's size.
            eos_ids: overrides the EOS ids (default: ``tokenizer.eos_token_id`` and the usual end-of-turn tokens).
        """
        eos_names = [tokenizer.eos_token] if getattr(tokenizer, "eos_token", None) else []
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            data = json.loads(backend.to_str())
            return cls._from_json_data(data, vocab_size=vocab_size, eos_ids=eos_ids, eos_names=eos_names)
        try:
            vocab: dict[str, int] = tokenizer.get_vocab()
        except (AttributeError, NotImplementedError) as exc:
            raise TokenizerError(f"tokenizer {type(tokenizer).__name__} has no vocabulary: {exc}") from None
        special_texts = set(getattr(tokenizer, "all_special_tokens", []))
        vocab_type = _guess_vocab_type(p for p in vocab if p not in special_texts)
        decode = _DECODERS[vocab_type]
        pieces = {i: decode(p) for p, i in vocab.items() if p not in special_texts}
        special = {i: p for p, i in vocab.items() if p in special_texts}
        return cls.from_pieces(
            pieces, special, vocab_type=vocab_type, vocab_size=vocab_size, eos_ids=eos_ids, eos_names=eos_names
        )

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike[str],
        special_tokens: Mapping[str, int],
        *,
        vocab_size: int | None = None,
        eos_ids: Sequence[int] | None = None,
    ) -> "TokenizerInfo":
        """Build from a tiktoken-style rank file (one ``<base64 token> <rank>`` a line; the rank is the id).

        Args:
            path: the rank file (for example ``qwen.tiktoken``).
            special_tokens: text → id of the special tokens, which the rank file does not hold.
        """
        pieces: dict[int, bytes] = {}
        try:
            with open(path, "rb") as handle:
                for line_no, line in enumerate(handle, 1):
                    if not line.strip():
                        continue
                    token, rank = line.split()
                    pieces[int(rank)] = base64.b64decode(token)
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"cannot read tiktoken rank file {path}: {exc}") from None
        special = {int(i): text for text, i in special_tokens.items()}
        return cls.from_pieces(pieces, special, vocab_type=VocabType.RAW, vocab_size=vocab_size, eos_ids=eos_ids)

    # ------------------------------------------------------------------ queries

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is special or past the real vocabulary (never allowed inside a structure)."""
        return token_id >= self.real_vocab_size or token_id in self.special_ids

    def decode(self, token_ids: Iterable[int], *, skip_special: bool = True) -> bytes:
        """The bytes of a sequence of ids (special tokens skipped unless asked for)."""
        if skip_special:
            return b"".join(self.token_bytes[i] for i in token_ids if not self.is_special(i))
        return b"".join(self.token_bytes[i] for i in token_ids)

    def token_id(self, text: str) -> int | None:
        """The id of the token whose text is exactly ``text`` (special tokens first), or ``None``."""
        return self._ids_by_text.get(text.encode("utf-8"))

    @functools.cached_property
    def _ids_by_text(self) -> dict[bytes, int]:
        found: dict[bytes, int] = {}
        for i, data in enumerate(self.token_bytes[: self.real_vocab_size]):
            if data and (data not in found or i in self.special_ids):
                found[data] = i
        return found

    def __repr__(self) -> str:
        return (
            f"TokenizerInfo(vocab_size={self.vocab_size}, real_vocab_size={self.real_vocab_size}, "
            f"vocab_type={self.vocab_type.value}, special={len(self.special_ids)}, eos_ids={list(self.eos_ids)})"
        )


def _config_eos_names(config_path: Path) -> list[str]:
    """``eos_token`` of a ``tokenizer_config.json``, when there is one."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    eos = config.get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    return [eos] if isinstance(eos, str) else []
