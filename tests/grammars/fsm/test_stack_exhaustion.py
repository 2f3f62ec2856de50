"""Python's recursion limit reached while lowering is a named limit, wherever it is reached.

``jsonschema`` resolves references through ``rpds`` (Rust): when the limit is reached inside one
of its callbacks, what comes out is a ``pyo3_runtime.PanicException``, a ``BaseException`` that
``except Exception`` and ``except RecursionError`` both let through. Seen through the public
compile of a real schema (JsonSchemaStore/yippee-ki-json_config_schema, ``max_depth=24``) from
21 of 95 stack depths; the fakes below carry the same type name and message.
"""

from __future__ import annotations

import pytest

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import json_schema
from grammask.grammars.fsm.backend import FsmBackend
from grammask.grammars.fsm.disjoint import DisjointnessProver
from grammask.grammars.spec import JsonSchema
from grammask.schemas.resolve import Resolver
from grammask.schemas.validate import stack_exhausted

PANIC_TEXT = "__eq__ failed!: PyErr { type: <unprintable type object>, value: <unprintable RecursionError object> }"


class PanicException(BaseException):
    """What ``pyo3_runtime.PanicException`` is to Python: a ``BaseException`` named so."""


def _raises(error: BaseException):
    def raising(*args, **kwargs):
        raise error

    return raising


def test_stack_exhaustion_is_a_recursion_error_or_the_panic_it_causes_in_rpds():
    assert stack_exhausted(RecursionError("maximum recursion depth exceeded"))
    assert stack_exhausted(PanicException(PANIC_TEXT))
    assert not stack_exhausted(PanicException("index out of bounds"))
    assert not stack_exhausted(ValueError("RecursionError"))
    assert not stack_exhausted(KeyboardInterrupt())


class _PanickingValidator:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def evolve(self, **changes):
        return self

    def is_valid(self, instance) -> bool:
        raise self.error


def test_a_verdict_that_reaches_the_limit_inside_rpds_is_no_verdict():
    root = {"type": "object"}
    prover = DisjointnessProver(root, Resolver(root))
    prover._validator = _PanickingValidator(PanicException(PANIC_TEXT))
    assert prover.verdict(root, {}) is None and not prover.rejects(root, {})
    prover._validator = _PanickingValidator(PanicException("index out of bounds"))  # another panic is not ours to hide
    with pytest.raises(PanicException):
        prover.verdict(root, {})


def test_a_verdict_at_every_stack_depth_is_a_verdict_or_none():
    root = {"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    value = node = {}
    for _ in range(40):
        node["c"] = node = {}
    prover = DisjointnessProver(root, Resolver(root))

    def at(depth: int):
        return prover.verdict(root, value) if depth == 0 else at(depth - 1)

    seen = set()
    for depth in range(500, 1000, 3):
        try:
            seen.add(at(depth))
        except RecursionError:  # this test's own frames reached the limit first
            seen.add("limit")
    assert True in seen and seen <= {True, None, "limit"}


def test_the_limit_reached_in_a_compile_is_max_nesting(tiny_info, monkeypatch):
    monkeypatch.setattr(json_schema._Lowerer, "_typed", _raises(PanicException(PANIC_TEXT)))
    with pytest.raises(CompileLimitError, match="'max_nesting'") as caught:
        FsmBackend(tiny_info).compile(JsonSchema({"type": "object"}))
    assert caught.value.limit == "max_nesting"
    monkeypatch.setattr(json_schema._Lowerer, "_typed", _raises(PanicException("index out of bounds")))
    with pytest.raises(PanicException):
        FsmBackend(tiny_info).compile(JsonSchema({"type": "object"}))


@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"), PanicException(PANIC_TEXT)])
def test_the_limit_reached_lowering_a_value_a_request_enters_is_max_nesting(tiny_info, monkeypatch, error):
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}, "required": ["a"]}
    matcher = FsmBackend(tiny_info).compile(JsonSchema(schema)).matcher()
    assert matcher.accept_tokens(list(b'{"a":')) == 5
    monkeypatch.setattr(json_schema._Lowerer, "_typed", _raises(error))  # the value's rule is lowered when entered
    with pytest.raises(CompileLimitError, match="'max_nesting'"):
        for byte in b'{"b":"x"}}':
            assert matcher.accept_token(byte)
