"""Budget-aware closing: random-logits decoding with a tight ``max_tokens`` always ends valid."""

from __future__ import annotations

import json

import numpy as np
import pytest
import regex

from grammask.errors import InvalidParameterError
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.spec import JsonSchema, Regex
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.tokenizer import TokenizerInfo, VocabType
from tests.grammars.fsm.helpers import random_logits_decode

PATTERNS = [
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
    r"[a-z]+( [a-z]+)*",
    r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    r'\{"name": "[a-zA-Z ]{1,20}", "tags": \[("[a-z]{1,5}"(, "[a-z]{1,5}")*)?\]\}',
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p[:20] for p in PATTERNS])
def test_tight_budget_always_ends_valid(llama_info, pattern: str) -> None:
    grammar = FsmBackend(llama_info).compile(Regex(pattern))
    rng = np.random.default_rng(0)
    oracle = regex.compile(pattern, regex.ASCII)
    for extra in (0, 1, 3, 8):
        for _ in range(3):
            budget = grammar.min_tokens + extra
            tokens, terminated = random_logits_decode(grammar, llama_info, budget, rng)
            assert terminated and len(tokens) <= budget
            text = llama_info.decode(tokens[:-1]).decode("utf-8")
            assert tokens[-1] in llama_info.eos_ids
            assert oracle.fullmatch(text), (pattern, budget, text)


def test_budget_below_minimum_is_refused(llama_info) -> None:
    # Llama-3 has a token for every run of one to three digits and none longer: four digits take
    # two tokens, plus EOS.
    grammar = FsmBackend(llama_info).compile(Regex(r"\d{4}"))
    assert grammar.min_tokens == 3
    with pytest.raises(InvalidParameterError, match=r"at least 3 \(the shortest valid output plus EOS\)"):
        grammar.matcher(max_tokens=2)
    with pytest.raises(InvalidParameterError, match="a positive int"):
        grammar.matcher(max_tokens=0)


def test_empty_language_masks_everything_under_any_budget(llama_info) -> None:
    grammar = FsmBackend(llama_info).compile(JsonSchema({"type": "integer", "minimum": 5, "maximum": 3}))
    matcher = grammar.matcher(max_tokens=3)
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert not bitmask_to_bool(bitmask, llama_info.vocab_size).any()
    assert not matcher.accept_token(llama_info.eos_ids[0]) and not matcher.is_terminated()


def test_budget_needs_every_single_byte_token() -> None:
    pieces = {i: bytes([97 + i]) for i in range(26)}  # only a..z
    pieces[26] = b"abc"
    info = TokenizerInfo.from_pieces(pieces, {27: "</s>"}, vocab_type=VocabType.RAW, vocab_size=28, eos_ids=[27])
    grammar = FsmBackend(info).compile(Regex("[a-z]+"))
    with pytest.raises(InvalidParameterError, match="lacks some single-byte tokens"):
        grammar.matcher(max_tokens=10)
    matcher = grammar.matcher()  # without a budget it works
    assert matcher.accept_token(26) and matcher.accept_token(27)


def test_budget_mask_keeps_what_fits_and_a_way_to_finish(llama_info) -> None:
    """With budget R, every token in the mask leaves a completion of at most R - 2 tokens (or is
    the first token of the state's own witness), the witness's first token is always there, and
    the mask agrees with accept_token."""
    grammar = FsmBackend(llama_info).compile(Regex(r"(ab|cd){1,6}x|y{6}"))
    automaton = grammar.automaton
    free = grammar.matcher()
    tight = grammar.matcher(max_tokens=3)
    free_mask = _allowed(free, llama_info)
    tight_mask = _allowed(tight, llama_info)
    assert tight_mask <= free_mask and tight_mask != free_mask
    needed, first_token = automaton._witness(1)
    assert needed == 2 and first_token in tight_mask  # "ab" then "x", say
    for token in sorted(free_mask)[:400]:
        fork = tight.fork()
        assert fork.accept_token(token) == (token in tight_mask)
        if token in tight_mask and token != first_token:
            assert automaton.token_distance(automaton.advance(1, token)) <= 3 - 2, llama_info.token_bytes[token]


def test_token_budgets_count_tokens_not_bytes(llama_info, llama_hf) -> None:
    # Twelve required string properties: the shortest output is every name with an empty string,
    # about 180 bytes but far fewer tokens.
    names = [f"field_{word}" for word in "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()]
    schema = {"type": "object", "properties": {n: {"type": "string"} for n in names}, "required": names, "additionalProperties": False}
    grammar = FsmBackend(llama_info).compile(JsonSchema(schema))
    shortest = JsonSchema(schema).serialize({n: "" for n in names})
    by_tokenizer = len(llama_hf.encode(shortest, add_special_tokens=False))
    assert grammar.min_tokens - 1 <= by_tokenizer < len(shortest.encode()) // 2
    rng = np.random.default_rng(1)
    for extra in (0, 2):
        tokens, terminated = random_logits_decode(grammar, llama_info, grammar.min_tokens + extra, rng)
        assert terminated
        instance = json.loads(llama_info.decode(tokens[:-1]).decode("utf-8"))
        assert set(instance) == set(names) and all(isinstance(v, str) for v in instance.values())


def _allowed(matcher, info) -> set[int]:
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    return set(np.flatnonzero(bitmask_to_bool(bitmask[0], info.vocab_size).numpy()).tolist())  # the public unpacker


@pytest.mark.parametrize("bounds", [{"minLength": 3, "maxLength": 40}, {"minLength": 5}, {"maxLength": 2}])
def test_tokens_of_a_bounded_string_group_as_walking_them_does(llama_info, bounds) -> None:
    """Budgets group a row's tokens by the state each ends in; inside a string of bounded length
    the plain-text tokens are grouped by character count instead of walked: the same groups."""
    from grammask.grammars.fsm import walk
    from grammask.grammars.fsm.automaton import START
    from grammask.grammars.fsm.pushdown import _JSON_TEXT, _counted_text_head, _walk_in_rule
    from grammask.grammars.fsm.vocab import vocab_index

    schema = {"type": "object", "properties": {"s": {"type": "string", **bounds}}, "required": ["s"], "additionalProperties": False}
    automaton = FsmBackend(llama_info).compile(JsonSchema(schema)).automaton
    vocab = vocab_index(llama_info)
    checked = 0
    for prefix in (b'{"s":"', b'{"s":"a', '{"s":"é'.encode()):
        for stack in automaton.stacks(automaton.walk(START, prefix)):
            rule, state, _ = automaton._frames[stack]
            dfa = automaton.rules.dfas[rule]
            if not _counted_text_head(dfa.expr(state)):
                continue
            rule_row = automaton.rule_row(rule, state)
            got: dict[int, set[int]] = {}
            for end, ids in automaton._rule_groups(rule, state, rule_row):
                got.setdefault(end, set()).update(ids.tolist())
            ids = rule_row.token_ids()
            positions = vocab.position_of[ids]
            starts = np.full(len(ids), state, dtype=np.int32)
            status, finals, _ = _walk_in_rule(dfa, starts, vocab.begins[positions], vocab.ends[positions], vocab.flat, 0)
            expected: dict[int, set[int]] = {}
            for end, token, done in zip(finals.tolist(), ids.tolist(), (status == walk.STATUS_END).tolist()):
                if done:
                    expected.setdefault(end, set()).add(token)
            assert got == expected and len(expected) > 2, prefix
            # A row lacking some text tokens (every other one dropped) groups the rest alike.
            text = vocab.within_by_chars(vocab.text_partition(_JSON_TEXT))[1]
            dropped = rule_row.words.copy()
            np.bitwise_and(dropped, ~vocab.pack(text[::2]), out=dropped)
            groups, rest = automaton._counted_text_groups(dfa, dfa.expr(state), dropped)
            kept = np.concatenate([ids for _, ids in groups])
            assert set(kept.tolist()) == set(text[1::2].tolist()) & set(rule_row.token_ids().tolist())
            assert not (rest & vocab.pack(kept)).any() and np.array_equal(rest | vocab.pack(kept), dropped)
            for end, ids in groups:
                positions = vocab.position_of[ids]
                walked = _walk_in_rule(dfa, np.full(len(ids), state, dtype=np.int32), vocab.begins[positions], vocab.ends[positions], vocab.flat, 0)
                assert (walked[0] == walk.STATUS_END).all() and (walked[1] == end).all(), prefix
            checked += 1
    assert checked == 3


def test_budget_profiles_are_bounded_and_counted_in_the_grammar_memory(llama_info) -> None:
    """Each stack a budgeted output reaches keeps a profile of its row's tokens (up to a row's
    worth of ids): they are held within an eighth of ``max_row_bytes`` and counted in the
    grammar's memory, which the compiled-grammar cache bounds."""
    import jsonschema

    from grammask.schemas.bundled import example_schema

    row_bytes = 4 * ((llama_info.vocab_size + 31) // 32)
    schema = example_schema("invoice")
    grammar = FsmBackend(llama_info, max_row_bytes=64 * row_bytes).compile(JsonSchema(schema))
    automaton = grammar.automaton
    rng = np.random.default_rng(1)
    for _ in range(3):
        tokens, terminated = random_logits_decode(grammar, llama_info, 300, rng)
        assert terminated
        jsonschema.validate(json.loads(llama_info.decode(tokens[:-1])), schema)
    profiles = automaton._profiles
    held = sum(profile.nbytes for profile in profiles._items.values())
    assert 0 < held and profiles.bytes <= profiles.max_bytes == 8 * row_bytes
    assert automaton.memory_bytes >= profiles.bytes + automaton._rows.bytes + automaton._rule_rows.bytes
