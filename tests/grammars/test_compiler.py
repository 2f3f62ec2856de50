"""GrammarCompiler: the auto policy, the cache, errors."""

from __future__ import annotations

import pytest

from grammask import CompileLimitError, Ebnf, GrammarCompiler, InvalidParameterError, JsonSchema, Regex, UnsupportedFeatureError
from grammask.grammars.compiler import auto_order


@pytest.fixture(scope="module")
def auto(llama_info):
    return GrammarCompiler(llama_info)


def test_auto_order_by_spec():
    assert auto_order(Regex("a+"))[0] == ("fsm", "xgrammar")
    assert auto_order(JsonSchema({"type": "integer"}))[0] == ("fsm", "xgrammar")
    assert auto_order(Ebnf('root ::= "a"'))[0] == ("xgrammar",)


def test_auto_takes_the_exact_backend_first(auto):
    exact = auto.compile(JsonSchema({"type": "integer", "not": {"const": 3}}))
    assert exact.backend == "fsm" and "exact automaton first" in exact.choice
    assert exact.unenforced == ()
    assert auto.compile(Regex("[a-z]+")).backend == "fsm"
    assert auto.compile(Ebnf('root ::= "x"')).backend == "xgrammar"


def test_auto_falls_back_with_the_reason(auto):
    # xgrammar ignores $dynamicRef, so fsm is tried first; it refuses $dynamicRef and auto falls back.
    schema = {"$dynamicAnchor": "node", "type": "object", "properties": {"kid": {"$dynamicRef": "#node"}}}
    grammar = auto.compile(JsonSchema(schema))
    assert grammar.backend == "xgrammar"
    assert "fsm:" in grammar.choice and "$dynamicRef" in grammar.choice
    assert any(u.keyword == "$dynamicRef" for u in grammar.unenforced)
    with pytest.raises(UnsupportedFeatureError, match="lookahead") as refused:
        auto.compile(Regex("a(?=b)b"))
    # every backend's own words, not only the last one's
    assert refused.value.backend == "auto"
    assert "fsm: backend 'fsm' cannot enforce 'lookahead'" in str(refused.value)
    assert "xgrammar: backend 'xgrammar' cannot enforce 'lookahead'" in str(refused.value)


def test_unknown_backend_names_the_closest(llama_info):
    with pytest.raises(InvalidParameterError, match=r"invalid backend='xgramar'.*did you mean 'xgrammar'\?"):
        GrammarCompiler(llama_info, backend="xgramar")
    with pytest.raises(InvalidParameterError, match=r"'auto', 'fsm', 'xgrammar'$"):
        GrammarCompiler(llama_info, backend="zzz")


def test_cache_hits_and_errors(llama_info):
    compiler = GrammarCompiler(llama_info, backend="xgrammar", cache_size=2)
    first = compiler.compile(Regex("a"))
    assert compiler.compile(Regex("a")) is first
    compiler.compile(Regex("b"))
    compiler.compile(Regex("c"))  # evicts "a"
    assert compiler.compile(Regex("a")) is not first
    with pytest.raises(InvalidParameterError, match="invalid backend='nope'"):
        GrammarCompiler(llama_info, backend="nope")
    with pytest.raises(UnsupportedFeatureError, match="cannot enforce 'uniqueItems'"):
        compiler.compile(JsonSchema({"type": "array", "uniqueItems": True}, on_unenforced="error"))


def test_fsm_depth_cut_is_a_narrowing_not_a_gap(llama_info, llama_hf):
    grammar = GrammarCompiler(llama_info, backend="fsm").compile(JsonSchema({"type": "array"}, max_depth=2))
    assert grammar.unenforced == () and grammar.is_exact
    assert [n.keyword for n in grammar.narrowed] == ["max_depth"]
    shallow, deep = (llama_hf.encode(t, add_special_tokens=False) for t in ("[[1]]", "[[[[[1]]]]]"))
    assert grammar.matcher().accept_tokens(shallow) == len(shallow)
    assert grammar.matcher().accept_tokens(deep) < len(deep)


def test_formats_as_annotations_on_request(llama_info, llama_hf):
    asserted, annotation = (JsonSchema({"type": "string", "format": "ipv4"}, assert_formats=flag) for flag in (True, False))
    assert asserted.cache_key != annotation.cache_key
    text = llama_hf.encode('"not an address"', add_special_tokens=False)
    for backend in ("fsm", "xgrammar"):
        compiler = GrammarCompiler(llama_info, backend=backend)
        assert compiler.compile(asserted).matcher().accept_tokens(text) < len(text), backend
        assert compiler.compile(annotation).matcher().accept_tokens(text) == len(text), backend
        assert not any(u.keyword == "format" for u in compiler.compile(annotation).unenforced)


def test_auto_matcher_moves_to_xgrammar_when_fsm_hits_a_limit_mid_request(llama_info, llama_hf):
    # A tiny state cap: the start row fits, a later state does not.
    compiler = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": 40}})
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "n": {"type": "integer"}},
              "required": ["name", "n"], "additionalProperties": False, "not": {"required": ["x"]}}
    grammar = compiler.compile(JsonSchema(schema))
    assert grammar.backend == "fsm"
    ids = llama_hf.encode('{"name":"Ada Lovelace","n":36}', add_special_tokens=False)
    matcher = grammar.matcher()
    assert matcher.accept_tokens(ids) == len(ids) and matcher.accept_token(llama_info.eos_ids[0])
    assert matcher.fell_back and "max_states" in matcher.fell_back
    assert matcher.grammar.backend == "xgrammar" and "moved from 'fsm'" in matcher.grammar.choice
    copy = matcher.fork()
    copy.rollback(2)
    assert copy.num_accepted == len(ids) - 1 and not copy.is_terminated() and matcher.is_terminated()
    # Without another backend to move to, the limit is the caller's to see.
    with pytest.raises(CompileLimitError, match="max_states"):
        GrammarCompiler(llama_info, backend="fsm", backend_options={"fsm": {"max_states": 40}}).compile(
            JsonSchema(schema)).matcher().accept_tokens(ids)
