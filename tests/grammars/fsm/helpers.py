"""Small helpers shared by the fsm tests."""

from __future__ import annotations

import numpy as np
import torch

from grammask.grammars.fsm.backend import FsmBackend, FsmCompiledGrammar
from grammask.grammars.spec import Regex
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.tokenizer import TokenizerInfo


def compile_regex(info: TokenizerInfo, pattern: str, **options) -> FsmCompiledGrammar:
    return FsmBackend(info, **options).compile(Regex(pattern))


def allowed_ids(matcher, info: TokenizerInfo) -> np.ndarray:
    """The allowed token ids, read through ``fill_next_token_bitmask`` (the public path)."""
    bitmask = allocate_token_bitmask(2, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 1)
    allowed = bitmask_to_bool(bitmask, info.vocab_size)
    assert bool(allowed[0].all()), "row 0 must be untouched"
    return torch.nonzero(allowed[1]).flatten().numpy()
