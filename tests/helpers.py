"""Checks shared by backend tests: walking a text through a matcher with the mask checked at every step."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from grammask.grammars.base import Matcher
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool, bool_to_bitmask
from grammask.tokenizer import TokenizerInfo


@dataclass
class Walk:
    accepted: int  # tokens accepted before the first rejection (== len(ids) when all were)
    terminated: bool  # EOS accepted at the end
    eos_allowed_early: list[int]  # steps before the end where EOS was allowed
    special_allowed: list[tuple[int, int]]  # (step, special id) allowed by a mask


def _bit(bitmask_row: torch.Tensor, token: int) -> bool:
    return bool((int(bitmask_row[token >> 5]) >> (token & 31)) & 1)


def walk(matcher: Matcher, ids: list[int], info: TokenizerInfo) -> Walk:
    """Force ``ids`` then EOS through ``matcher``, checking that the mask allows exactly the accepted
    tokens, never a special token, and EOS only where the matcher may end."""
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    special = torch.zeros(info.vocab_size, dtype=torch.bool)
    special[[i for i in range(info.vocab_size) if info.is_special(i) and i not in info.eos_ids]] = True
    special_words = bool_to_bitmask(special)
    eos = info.eos_ids[0]
    early, specials = [], []
    for step, token in enumerate([*ids, eos]):
        matcher.fill_next_token_bitmask(bitmask, 0)
        row = bitmask[0]
        if (row & special_words).any():
            allowed = bitmask_to_bool(row, info.vocab_size)
            specials.extend((step, sid) for sid in (allowed & special).nonzero().flatten().tolist())
        if step < len(ids) and _bit(row, eos):
            early.append(step)
        allowed_here = _bit(row, token)
        accepted = matcher.accept_token(token)
        assert accepted == allowed_here, f"mask and accept_token disagree on {token} at step {step}"
        if not accepted:
            return Walk(step, False, early, specials)
    return Walk(len(ids), matcher.is_terminated(), early, specials)


def check_mask_matches_accept(matcher: Matcher, info: TokenizerInfo, rng: random.Random, samples: int = 64) -> None:
    """On a random sample of token ids (plus every allowed one among the first few), allowed ⇔ a fork
    of the matcher accepts it."""
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    allowed = bitmask_to_bool(bitmask[0], info.vocab_size)
    allowed_ids = allowed.nonzero().flatten().tolist()
    candidates = rng.sample(range(info.vocab_size), samples) + allowed_ids[:16] + list(info.eos_ids)
    for token in candidates:
        assert matcher.fork().accept_token(token) == bool(allowed[token]), f"token {token}"
