"""Jump-forward: the tokens of the text a grammar forces next, appended without sampling them.

Where every valid continuation starts with the same text (``Matcher.jump_forward_string``: a key
name, ``":"``, a closing ``"}``), a decoder can append that text's tokens at once and feed them to the
model in one forward pass instead of one pass per token.

The tokens are the tokenizer's own (canonical) tokenization of the text *in context*: the text is
encoded after the previous token's text, and when the tokenizer keeps that token as it is (the encoding
starts with it), the rest is taken; otherwise the text is encoded alone (the previous token would have
merged with it, and it is already in the model's cache). The last token of the text is left to the
model, since the text that follows could merge with it (``":`` before ``"Bob"`` may be ``":"``),
unless after the text the grammar can only end. The matcher accepts exactly the tokens returned
(a token it rejects ends the list there), so the mask and the output never disagree.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from grammask.grammars.base import Matcher
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.tokenizer import TokenizerInfo

__all__ = ["Encoder", "accept_forced_tokens", "plain_encoder"]

Encoder = Callable[[str], Sequence[int]]
"""Text → token ids, without special tokens (no BOS)."""


def plain_encoder(tokenizer) -> Encoder:
    """An :data:`Encoder` over a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``."""

    def encode(text: str) -> list[int]:
        try:
            ids = tokenizer.encode(text, add_special_tokens=False)
        except TypeError:  # an encode without that option
            ids = tokenizer.encode(text)
        return list(ids.ids if hasattr(ids, "ids") else ids)

    return encode


def accept_forced_tokens(
    matcher: Matcher, encode: Encoder, info: TokenizerInfo, previous_token: int | None, limit: int | None = None
) -> list[int]:
    """Advance ``matcher`` over the canonical tokens of its forced text and return them (``[]``: none).

    Args:
        matcher: the request's matcher (advanced by exactly the returned tokens).
        encode: the tokenizer's plain encoder (:func:`plain_encoder`).
        info: the tokenizer's bytes per token.
        previous_token: the last token of the output so far (its text is the context), or ``None``.
        limit: the most tokens to return (``None``: no limit).
    """
    if matcher.is_terminated() or limit == 0:
        return []
    text = matcher.jump_forward_string()
    if not text:
        return []
    candidates = _in_context(encode, info, previous_token, text)
    accepted = matcher.accept_tokens(candidates)
    tokens = list(candidates[:accepted])
    if tokens and not (accepted == len(candidates) and _only_end_allowed(matcher, info)):
        matcher.rollback(1)  # leave the last token to the model (it may merge with what follows)
        tokens.pop()
    if limit is not None and len(tokens) > limit:
        matcher.rollback(len(tokens) - limit)
        del tokens[limit:]
    return tokens


def _in_context(encode: Encoder, info: TokenizerInfo, previous_token: int | None, text: str) -> list[int]:
    if previous_token is not None:
        try:
            tail = info.token_bytes[previous_token].decode("utf-8")
        except (UnicodeDecodeError, IndexError):
            tail = ""
        if tail:
            ids = list(encode(tail + text))
            if ids and ids[0] == previous_token:
                return ids[1:]
    return list(encode(text))


def _only_end_allowed(matcher: Matcher, info: TokenizerInfo) -> bool:
    """Whether the matcher's next token can only be an EOS."""
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    allowed = bitmask_to_bool(bitmask[0], info.vocab_size)
    eos = torch.tensor(list(info.eos_ids), dtype=torch.int64)
    return bool(allowed.any()) and int(allowed.sum()) == int(allowed[eos].sum())
