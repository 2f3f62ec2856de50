"""Small helpers shared by the fsm tests."""

from __future__ import annotations

import numpy as np
from grammask.grammars.fsm.backend import FsmBackend, FsmCompiledGrammar
from grammask.grammars.fsm.pushdown import PushdownAutomaton
from grammask.grammars.fsm.rules import Rule, RuleSet
from grammask.grammars.fsm.vocab import VocabIndex
from grammask.grammars.spec import Regex
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.tokenizer import TokenizerInfo


def compile_regex(info: TokenizerInfo, pattern: str, **options) -> FsmCompiledGrammar:
    return FsmBackend(info, **options).compile(Regex(pattern))


def automaton_of(expr, vocab: VocabIndex, **limits) -> PushdownAutomaton:
    """The runtime automaton of one expression (its calls, if any, are its other rules)."""
    return PushdownAutomaton(
        RuleSet(Rule("test", expr), max_states=limits.get("max_states", 50_000)),
        vocab,
        max_positions=limits.get("max_states", 50_000),
        max_row_bytes=limits.get("max_row_bytes", 512 << 20),
    )


def allowed_ids(matcher, info: TokenizerInfo) -> np.ndarray:
    """The allowed token ids, read through ``fill_next_token_bitmask`` (the public path)."""
    bitmask = allocate_token_bitmask(2, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 1)
    assert bool((bitmask[0] == -1).all()), "row 0 must be untouched"
    bits = np.unpackbits(bitmask[1].numpy().view(np.uint8), bitorder="little")  # bit j of word w = token 32w+j
    assert not bits[info.vocab_size :].any(), "padding bits past the vocabulary must be 0"
    return np.flatnonzero(bits[: info.vocab_size])


def random_logits_decode(grammar, info, max_tokens: int, rng: np.random.Generator) -> tuple[list[int], bool]:
    """Greedy decoding of random logits under the mask; returns the tokens and whether it ended on EOS."""
    matcher = grammar.matcher(max_tokens=max_tokens)
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    tokens: list[int] = []
    while len(tokens) < max_tokens and not matcher.is_terminated():
        matcher.fill_next_token_bitmask(bitmask, 0)
        allowed = np.unpackbits(bitmask[0].numpy().view(np.uint8), bitorder="little")[: info.vocab_size].astype(bool)
        assert allowed.any(), "the mask ran empty"
        logits = rng.standard_normal(info.vocab_size)
        logits[list(info.eos_ids)] -= 3.0  # make EOS unlikely, to stress the closing
        token = int(np.where(allowed, logits, -np.inf).argmax())
        assert matcher.accept_token(token)
        tokens.append(token)
    return tokens, matcher.is_terminated()
