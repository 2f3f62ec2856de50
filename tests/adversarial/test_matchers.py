"""Matchers and batched filling under misuse (issue #12): malformed bitmasks are refused by name by every
fill entry point and nothing outside the named row is written; a matcher shared by threads does not
crash; a terminated matcher fills an all-zero row, so the README's engine loop outlives its first
finished request; rollback and token errors are grammask errors; EBNF errors carry the real position."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import grammask as gm
from grammask.masking.bitmask import bitmask_width

BACKENDS = ["fsm", "xgrammar"]
SCHEMA = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}, "required": ["a"],
          "additionalProperties": False}
CANARY = 0x5A5A5A5A


@pytest.fixture(scope="module", params=BACKENDS)
def grammar(request, tiny_info):
    return gm.GrammarCompiler(tiny_info, backend=request.param).compile(gm.JsonSchema(SCHEMA))


def token_of(info, text: bytes) -> int:
    return next(i for i in range(info.vocab_size) if info.token_bytes[i] == text and not info.is_special(i))


def malformed_bitmasks(width: int):
    """(label, the tensor a fill is given, the memory to watch, row, expected message)."""
    base = torch.full((8, width), CANARY, dtype=torch.int32)
    yield "expanded", base[:1].expand(8, -1), base, 3, r"bitmask.stride=\(0, 1\): expected a contiguous tensor"
    yield "every other row", base[::2], base, 1, r"bitmask.stride=\(%d, 1\): expected a contiguous" % (2 * width)
    yield "column-major", base.t().contiguous().t(), None, 0, r"bitmask.stride=\(1, 8\)"
    yield "int64", base.to(torch.int64), None, 0, r"bitmask.dtype=torch.int64: expected torch.int32"
    yield "float", base.to(torch.float32), None, 0, r"bitmask.dtype=torch.float32"
    yield "bool", torch.ones(8, width, dtype=torch.bool), None, 0, r"bitmask.dtype=torch.bool"
    yield "1-D", base[0], base, 0, r"bitmask.shape=\(%d,\): expected 2 dimensions" % width
    yield "3-D", base[None], base, 0, r"bitmask.shape=\(1, 8, %d\): expected 2 dimensions" % width
    yield "narrower", base[:, : width - 1].contiguous(), None, 0, r"bitmask.shape=\(8, %d\): expected \(batch, %d\)" % (width - 1, width)
    yield "wider", torch.zeros(8, width + 1, dtype=torch.int32), None, 0, r"expected \(batch, %d\)" % width
    yield "meta", torch.zeros(8, width, dtype=torch.int32, device="meta"), None, 0, r"bitmask.device=device\(type='meta'\): expected a CPU tensor"
    yield "sparse", base.to_sparse(), None, 0, r"bitmask.layout=torch.sparse_coo"
    yield "numpy", base.numpy().copy(), None, 0, r"invalid bitmask='ndarray': expected a torch.Tensor"
    yield "row past the end", base, base, 8, r"invalid row=8: expected a row in \[0, 8\)"
    yield "negative row", base, base, -1, r"invalid row=-1: expected a row in \[0, 8\)"
    yield "bool row", base, base, True, r"invalid row=True"
    yield "float row", base, base, 1.0, r"invalid row=1.0"


CASES = [case[0] for case in malformed_bitmasks(4)]


@pytest.mark.parametrize("label", CASES)
def test_matcher_fill_refuses_a_malformed_bitmask(grammar, label):
    width = bitmask_width(grammar.tokenizer_info.vocab_size)
    _, bitmask, watched, row, message = next(c for c in malformed_bitmasks(width) if c[0] == label)
    before = None if watched is None else watched.clone()
    with pytest.raises(gm.InvalidParameterError, match=message):
        grammar.matcher().fill_next_token_bitmask(bitmask, row)
    if watched is not None:
        assert torch.equal(watched, before)


@pytest.mark.parametrize("label", [c for c in CASES if "row" not in c])
def test_batch_fill_refuses_a_malformed_bitmask(grammar, label):
    width = bitmask_width(grammar.tokenizer_info.vocab_size)
    _, bitmask, watched, _, message = next(c for c in malformed_bitmasks(width) if c[0] == label)
    before = None if watched is None else watched.clone()
    matchers = [grammar.matcher() for _ in range(6)]  # more than are filled inline: the threaded path
    with pytest.raises(gm.InvalidParameterError, match=message):
        gm.fill_next_token_bitmask(matchers, bitmask)
    if watched is not None:
        assert torch.equal(watched, before)


@pytest.mark.parametrize(
    "matchers, message",
    [
        (None, r"invalid matchers='NoneType': expected a list or tuple of matchers"),
        ("abc", r"invalid matchers='str'"),
        ([object()], r"invalid matchers\[0\]='object': expected a grammask Matcher"),
    ],
)
def test_batch_fill_refuses_what_is_not_a_list_of_matchers(matchers, message):
    with pytest.raises(gm.InvalidParameterError, match=message):
        gm.fill_next_token_bitmask(matchers, torch.zeros(2, 4, dtype=torch.int32))


def test_a_contiguous_block_of_rows_is_filled_in_place(grammar):
    """What an engine does (``bitmask[:live]``): accepted, and only the named row changes."""
    width = bitmask_width(grammar.tokenizer_info.vocab_size)
    big = torch.full((8, width), CANARY, dtype=torch.int32)
    gm.fill_next_token_bitmask([grammar.matcher()], big[2:5], rows=[1])
    changed = (big != CANARY).any(dim=1).nonzero().flatten().tolist()
    assert changed == [3]


@pytest.fixture(scope="module")
def reasoning(tiny_info):
    """A think section (opened by ``<pad>``, closed by ``ab``) around the fsm grammar of SCHEMA."""
    return gm.GrammarCompiler(tiny_info, backend="fsm").compile(gm.Reasoning(gm.JsonSchema(SCHEMA), start="<pad>", end="ab"))


def reasoning_matcher(grammar, pieces: list[bytes]):
    matcher = grammar.matcher()
    info = grammar.tokenizer_info
    assert matcher.accept_token(info.token_id("<pad>"))
    for piece in pieces:
        assert matcher.accept_token(token_of(info, piece)), piece
    return matcher


@pytest.mark.parametrize("phase", [[], [b"ab"], [b"ab", b'{"']])  # thinking, the gap, the content
@pytest.mark.parametrize("label", CASES)
def test_a_reasoning_matcher_refuses_a_malformed_bitmask_in_every_phase(reasoning, phase, label):
    width = bitmask_width(reasoning.tokenizer_info.vocab_size)
    _, bitmask, watched, row, message = next(c for c in malformed_bitmasks(width) if c[0] == label)
    before = None if watched is None else watched.clone()
    with pytest.raises(gm.InvalidParameterError, match=message):
        reasoning_matcher(reasoning, phase).fill_next_token_bitmask(bitmask, row)
    if watched is not None:
        assert torch.equal(watched, before)


@pytest.mark.parametrize(
    "num_tokens, message",
    [(5, r"invalid num_tokens=5: expected"), (-1, r"invalid num_tokens=-1"), ("1", r"invalid num_tokens='1': expected an int"),
     (None, r"invalid num_tokens=None")],
)
def test_reasoning_rollback_errors_are_grammask_errors(reasoning, num_tokens, message):
    matcher = reasoning_matcher(reasoning, [b"ab"])
    with pytest.raises(gm.InvalidParameterError, match=message):
        matcher.rollback(num_tokens)
    assert matcher.num_accepted == 2
    with pytest.raises(gm.InvalidParameterError, match=r"invalid token_id="):
        matcher.accept_token("5")
    with pytest.raises(gm.InvalidParameterError, match=r"invalid max_tokens=0"):
        reasoning.matcher(max_tokens=0)


def test_a_terminated_reasoning_matcher_fills_an_all_zero_row(reasoning):
    matcher = reasoning_matcher(reasoning, [b"ab", b'{"', b"a", b'":', b'"', b"x", b'"}'])
    assert matcher.accept_token(reasoning.tokenizer_info.eos_ids[0]) and matcher.is_terminated()
    bitmask = torch.full((2, bitmask_width(reasoning.tokenizer_info.vocab_size)), -1, dtype=torch.int32)
    gm.fill_next_token_bitmask([matcher], bitmask, rows=[1])
    assert (bitmask[1] == 0).all() and (bitmask[0] == -1).all()


# ------------------------------------------------------------------------------- terminated matchers


def finished_matcher(grammar):
    info = grammar.tokenizer_info
    matcher = grammar.matcher()
    for piece in [b'{"', b"a", b'":', b'"', b"x", b'"}']:
        assert matcher.accept_token(token_of(info, piece)), piece
    assert matcher.accept_token(info.eos_ids[0]) and matcher.is_terminated()
    return matcher


def test_a_terminated_matcher_fills_an_all_zero_row_in_a_batch(grammar):
    width = bitmask_width(grammar.tokenizer_info.vocab_size)
    bitmask = gm.allocate_token_bitmask(6, grammar.tokenizer_info.vocab_size)
    matchers = [grammar.matcher(), finished_matcher(grammar)] * 3
    gm.fill_next_token_bitmask(matchers, bitmask)
    assert (bitmask[1::2] == 0).all()
    assert (bitmask[::2] != 0).any(dim=1).all()
    assert bitmask.shape[1] == width
    assert not matchers[1].accept_token(grammar.tokenizer_info.eos_ids[0])


def test_readme_engine_loop_runs_past_the_first_finished_request(grammar):
    """The README loop, verbatim in shape: fill every matcher, mask, sample, accept, until all ended."""
    info = grammar.tokenizer_info
    schemas = [gm.JsonSchema({"const": "a"}), gm.JsonSchema(SCHEMA), gm.JsonSchema({"type": "boolean"})]
    compiler = gm.GrammarCompiler(info, backend=grammar.backend)
    matchers = [compiler.compile(s).matcher() for s in schemas]
    sampler = gm.Sampler(generator=torch.Generator().manual_seed(0))
    batch = gm.SamplingBatch.build([gm.SamplingParams(seed=i) for i in range(3)], vocab_size=info.vocab_size)
    bitmask = gm.allocate_token_bitmask(3, info.vocab_size)
    model = torch.Generator().manual_seed(1)
    finished_at = []
    for step in range(60):
        if all(m.is_terminated() for m in matchers):
            break
        logits = torch.randn(3, info.vocab_size, generator=model)
        gm.fill_next_token_bitmask(matchers, bitmask)
        gm.apply_mask(logits, bitmask)
        next_ids = sampler(logits, batch).token_ids
        batch.update(next_ids)
        for m, t in zip(matchers, next_ids.tolist()):
            was_done = m.is_terminated()
            m.accept_token(t)
            if m.is_terminated() and not was_done:
                finished_at.append(step)
    assert all(m.is_terminated() for m in matchers)
    assert len(finished_at) == 3 and finished_at[0] < finished_at[-1]


# -------------------------------------------------------------------------------- rollback and tokens


@pytest.mark.parametrize(
    "num_tokens, message",
    [(5, r"invalid num_tokens=5: expected"), (-1, r"invalid num_tokens=-1"), ("1", r"invalid num_tokens='1': expected an int"),
     (1.0, r"invalid num_tokens=1.0: expected an int"), (None, r"invalid num_tokens=None")],
)
def test_rollback_errors_are_grammask_errors(grammar, num_tokens, message):
    matcher = grammar.matcher()
    assert matcher.accept_token(token_of(grammar.tokenizer_info, b'{"'))
    with pytest.raises(gm.InvalidParameterError, match=message):
        matcher.rollback(num_tokens)
    assert matcher.num_accepted == 1


@pytest.mark.parametrize("token", ["5", None, 2.0, [1]])
def test_accept_token_refuses_what_is_not_a_token_id(grammar, token):
    with pytest.raises(gm.InvalidParameterError, match=r"invalid token_id="):
        grammar.matcher().accept_token(token)


@pytest.mark.parametrize("token", [-1, 10**30, -(10**30)])
def test_accept_token_rejects_ids_outside_the_vocabulary(grammar, token):
    matcher = grammar.matcher()
    assert matcher.accept_token(token) is False and matcher.num_accepted == 0


def test_token_ids_as_numpy_and_tensor_ints_are_accepted(grammar):
    token = token_of(grammar.tokenizer_info, b'{"')
    assert grammar.matcher().accept_token(np.int64(token))
    assert grammar.matcher().accept_token(torch.tensor(token))


# ------------------------------------------------------------------------------------------ threads

THREADS_SCRIPT = textwrap.dedent(
    """
    import sys, threading, torch
    import grammask as gm
    pieces = {b: bytes([b]) for b in range(256)}
    pieces.update({256: b'["', 257: b'","', 258: b'"]'})
    info = gm.TokenizerInfo.from_pieces(pieces, {259: "</s>"}, vocab_type=gm.VocabType.RAW, vocab_size=264, eos_ids=[259])
    tokens = [256, 97, 98, 257, 258]
    failures = []

    def work(matcher, k):
        bitmask = torch.zeros(4, 9, dtype=torch.int32)
        try:
            for i in range(400):
                matcher.fill_next_token_bitmask(bitmask, k)
                for t in tokens:
                    if matcher.accept_token(t):
                        break
                if i % 7 == 0:
                    try:
                        matcher.rollback(1)
                    except gm.InvalidParameterError:
                        pass  # another thread rolled back first: a named error, as promised
                if i % 97 == 0:
                    matcher.reset()
        except Exception as error:
            failures.append(repr(error))

    for backend in ("fsm", "xgrammar"):
        grammar = gm.GrammarCompiler(info, backend=backend).compile(gm.JsonSchema({"type": "array", "items": {"type": "string"}}))
        matcher = grammar.matcher()
        threads = [threading.Thread(target=work, args=(matcher, k)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print("failures:", failures)
    sys.exit(1 if failures else 0)
    """
)


def test_a_matcher_used_from_four_threads_at_once_neither_crashes_nor_raises():
    """xgrammar's own matcher corrupts its heap under this (SIGABRT or segfault): run in a subprocess."""
    done = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


# ------------------------------------------------------------------------------------- EBNF positions


@pytest.mark.parametrize(
    "grammar_text, line, column, reason",
    [
        ('root ::= "a" | ', 1, 16, "Expect element"),
        ('root ::= "a"\nfoo ::= bar', 2, 9, 'Rule "bar" is not defined'),
        ('root ::= "a"\n  x ::= ( "b" ', 2, 15, "Expect )"),
        ('root ::= [a-', 1, 13, "Unterminated character class"),
        ('\n\n\nroot ::= "a" "b\n', 4, 16, 'Expect " in string literal'),
    ],
)
def test_ebnf_errors_carry_the_position_in_the_grammar_text(tiny_info, grammar_text, line, column, reason):
    with pytest.raises(gm.InvalidGrammarError) as caught:
        gm.GrammarCompiler(tiny_info, backend="xgrammar").compile(gm.Ebnf(grammar_text))
    error = caught.value
    assert (error.line, error.column) == (line, column)
    assert reason in error.reason
    assert "/project/" not in str(error) and not error.reason.startswith("[")


def test_regex_errors_carry_no_log_prefix(tiny_info):
    with pytest.raises(gm.InvalidRegexError) as caught:
        gm.GrammarCompiler(tiny_info, backend="xgrammar").compile(gm.Regex("a(b"))
    assert "/project/" not in str(caught.value) and caught.value.position == 4
