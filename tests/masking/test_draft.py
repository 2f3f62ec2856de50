"""fill_draft_bitmask with real matchers (fsm and xgrammar): row j equals the mask of a fresh matcher
after the first j drafts, rows after a rejected draft are zero, matchers end where they started."""

from __future__ import annotations

import pytest
import torch

from grammask import GrammarCompiler, JsonSchema
from grammask.errors import InvalidParameterError
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.masking.draft import fill_draft_bitmask

SCHEMA = {"type": "object", "properties": {"a": {"enum": ["ab", "abc"]}}, "required": ["a"], "additionalProperties": False}


def _ids(info, pieces: list[bytes]) -> list[int]:
    return [info.token_bytes.index(p) for p in pieces]


@pytest.mark.parametrize("backend", ["fsm", "xgrammar"])
def test_rows_are_the_masks_after_each_draft_prefix(tiny_info, backend):
    grammar = GrammarCompiler(tiny_info, backend=backend).compile(JsonSchema(SCHEMA))
    valid = _ids(tiny_info, [b'{"', b"a", b'":', b'"', b"abc"])
    broken = _ids(tiny_info, [b'{"', b"b", b"a"])  # 'b' is no key
    started = grammar.matcher()
    started.accept_token(valid[0])
    matchers = [grammar.matcher(), started]
    drafts = [valid, broken[1:]]
    bitmask = allocate_token_bitmask(len(valid) + 1 + len(drafts[1]) + 1 + 2, tiny_info.vocab_size)
    bitmask[-2:] = 7  # rows past the requests stay untouched
    assert fill_draft_bitmask(matchers, drafts, bitmask) == [len(valid), 0]
    assert [m.num_accepted for m in matchers] == [0, 1]
    expected = allocate_token_bitmask(1, tiny_info.vocab_size)
    for j in range(len(valid) + 1):
        fresh = grammar.matcher()
        assert fresh.accept_tokens(valid[:j]) == j
        fresh.fill_next_token_bitmask(expected, 0)
        assert torch.equal(bitmask[j], expected[0]), j
    base = len(valid) + 1
    started.fill_next_token_bitmask(expected, 0)
    assert torch.equal(bitmask[base], expected[0])
    assert not bitmask[base + 1 : base + 3].any()  # after the rejected draft
    assert (bitmask[-2:] == 7).all()


def test_counts_and_sizes_are_checked(tiny_info):
    grammar = GrammarCompiler(tiny_info, backend="fsm").compile(JsonSchema(SCHEMA))
    with pytest.raises(InvalidParameterError, match="one per matcher"):
        fill_draft_bitmask([grammar.matcher()], [[1], [2]], allocate_token_bitmask(4, tiny_info.vocab_size))
    with pytest.raises(InvalidParameterError, match="at least 3 rows"):
        fill_draft_bitmask([grammar.matcher()], [[1, 2]], allocate_token_bitmask(2, tiny_info.vocab_size))
