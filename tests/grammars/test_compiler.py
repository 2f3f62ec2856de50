"""GrammarCompiler: the auto policy, the cache, errors."""

from __future__ import annotations

import pytest

from grammask import (
    CompileLimitError,
    Ebnf,
    GrammarCompiler,
    InvalidParameterError,
    JsonSchema,
    Regex,
    UnsupportedFeatureError,
    allocate_token_bitmask,
)
from grammask.grammars.compiler import auto_order


@pytest.fixture(scope="module")
def auto(llama_info):
    return GrammarCompiler(llama_info)


def test_auto_order_by_spec():
    assert auto_order(Regex("a+"))[0] == ("fsm", "xgrammar")
    assert auto_order(JsonSchema({"type": "integer"}))[0] == ("fsm", "xgrammar")
    assert auto_order(Ebnf('root ::= "a"'))[0] == ("xgrammar",)


def test_auto_takes_the_exact_backend_first(auto):
    exact = auto.compile(JsonSchema({"type": "integer", "not": {"const": 3}}, on_unenforced="error"))
    assert exact.backend == "fsm" and "exact automaton first" in exact.choice
    assert exact.unenforced == () and exact.is_exact
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


def test_cache_is_bounded_in_bytes_and_grammars_count_what_they_grow(llama_info, llama_hf):
    from grammask import allocate_token_bitmask

    compiler = GrammarCompiler(llama_info, backend="fsm", cache_bytes=1)
    first = compiler.compile(JsonSchema({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    compiled = first.memory_bytes
    # Rows built on the way count: the grammar holds at least their bytes (each a packed
    # 128k-token row of 16 KB, or its sparse ids).
    matcher, bitmask = first.matcher(), allocate_token_bitmask(1, llama_info.vocab_size)
    for token in llama_hf.encode('{"name":"Ada Lovelace"}', add_special_tokens=False):
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token)
    grown, automaton = first.memory_bytes, first.automaton
    cached_rows = automaton._rows.bytes + automaton._rule_rows.bytes
    assert grown > compiled and grown > cached_rows > 16_000
    assert compiler.compile(first.spec) is first  # the newest is kept, over the cap
    second = compiler.compile(Regex("[a-z]+"))
    assert compiler.compile(second.spec) is second and compiler.compile(first.spec) is not first
    roomy = GrammarCompiler(llama_info, backend="fsm", cache_bytes=1 << 30)
    kept = [roomy.compile(Regex(f"x{i}[0-9]+")) for i in range(4)]
    assert all(roomy.compile(g.spec) is g for g in kept)
    assert roomy.cache_memory_bytes == sum(g.memory_bytes for g in kept)
    with pytest.raises(InvalidParameterError, match="cache_bytes"):
        GrammarCompiler(llama_info, cache_bytes=0)


def test_fsm_depth_cut_is_a_narrowing_not_a_gap(llama_info, llama_hf):
    compiler = GrammarCompiler(llama_info, backend="fsm")
    shallow, deep = (llama_hf.encode(t, add_special_tokens=False) for t in ("[[1]]", "[[[[[1]]]]]"))
    # Free values are a recursive rule: any depth, nothing narrowed.
    free = compiler.compile(JsonSchema({"type": "array"}, max_depth=2))
    assert free.unenforced == () and free.narrowed == () and free.is_exact
    assert free.matcher().accept_tokens(deep) == len(deep)
    # A complement that only decides the type is a type list: any depth, nothing narrowed.
    not_typed = compiler.compile(JsonSchema({"not": {"type": "string"}}, max_depth=2))
    assert not_typed.narrowed == () and not_typed.matcher().accept_tokens(deep) == len(deep)
    # So is one that constrains scalars only: taken type by type, containers stay free.
    not_scalar = compiler.compile(JsonSchema({"not": {"type": "string", "maxLength": 3}}, max_depth=2))
    assert not_scalar.narrowed == () and not_scalar.matcher().accept_tokens(deep) == len(deep)
    # And one of an array schema by count and items: the arrays it rejects, items free.
    not_array = compiler.compile(JsonSchema({"not": {"type": "array", "minItems": 2}}, max_depth=2))
    assert not_array.narrowed == () and not_array.matcher().accept_tokens(deep) == len(deep)
    # Under a complement no structure gives (the values of other members), a value the
    # complement does not look inside is a call of the free-value rule: any depth too.
    shallow, deep, integers = (
        llama_hf.encode(t, add_special_tokens=False) for t in ('{"a":[[1]]}', '{"b":1,"a":[[[[[[[1]]]]]]]}', '{"a":1,"b":2}')
    )
    complement = compiler.compile(JsonSchema({"not": {"type": "object", "additionalProperties": {"type": "integer"}}}, max_depth=2))
    assert complement.unenforced == () and complement.narrowed == () and complement.is_exact
    assert complement.matcher().accept_tokens(shallow) == len(shallow)
    assert complement.matcher().accept_tokens(deep) == len(deep)
    matcher = complement.matcher()
    assert matcher.accept_tokens(integers[:-1]) == len(integers) - 1
    assert not matcher.accept_token(integers[-1])  # {"a":1,"b":2} is the negated schema's
    # The complement of a recursive schema is taken within max_depth unrolls: a deeper value is
    # rejected, and said so.
    tree = {"not": {"$ref": "#/$defs/tree"}, "$defs": {"tree": {"type": "object", "additionalProperties": {"$ref": "#/$defs/tree"}}}}
    recursive = compiler.compile(JsonSchema(tree, max_depth=2))
    assert [n.keyword for n in recursive.narrowed] == ["max_depth"]
    shallow, deep = (llama_hf.encode(t, add_special_tokens=False) for t in ('{"a":{"b":1}}', '{"a":{"a":{"a":{"a":{"a":1}}}}}'))
    assert recursive.matcher().accept_tokens(shallow) == len(shallow)
    assert recursive.matcher().accept_tokens(deep) < len(deep)


NOT_AN_OBJECT = {"not": {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"},
                                                         "b": {"type": "array", "items": {"type": "integer"}}},
                          "required": ["a"]}}


def test_a_fallback_that_loses_a_keyword_shows_before_and_after_the_move(llama_info, llama_hf):
    # Issue #12: a request that moved to xgrammar mid-way accepted {"a":"xyz","b":[1]}, which the
    # `not` forbids, while the compiled grammar said it was exact.
    invalid = llama_hf.encode('{"a":"xyz","b":[1]}', add_special_tokens=False)
    moved = None
    for cap in (50, 100, 200, 400, 800):  # the smallest state cap that compiles, then a limit on the way
        grammar = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": cap}}).compile(JsonSchema(NOT_AN_OBJECT))
        if grammar.backend != "fsm":
            continue
        assert not grammar.is_exact
        listed = [u for u in grammar.unenforced if u.keyword == "not" and u.path == ""]
        assert listed and "after a mid-request move to 'xgrammar'" in listed[0].reason
        matcher = grammar.matcher()
        accepted = matcher.accept_tokens(invalid) == len(invalid) and matcher.accept_token(llama_info.eos_ids[0])
        assert matcher.fell_back or not accepted, "the exact automaton accepted a value its `not` forbids"
        if matcher.fell_back:
            moved = matcher
            break
    assert moved is not None and moved.grammar.backend == "xgrammar"
    assert not moved.grammar.is_exact and any(u.keyword == "not" for u in moved.grammar.unenforced)


def test_the_fallbacks_notes_are_predicted_on_first_read_not_while_compiling(llama_info, monkeypatch):
    """Predicting what xgrammar would drop rewrites the whole schema (25 ms on a 15 kB one): it
    stays off the cold path, and the first read of ``unenforced`` still lists it."""
    from grammask.grammars.xgrammar_backend import XGrammarBackend

    calls = []
    predict = XGrammarBackend.predict_unenforced
    monkeypatch.setattr(XGrammarBackend, "predict_unenforced", lambda self, spec: calls.append(spec) or predict(self, spec))
    grammar = GrammarCompiler(llama_info).compile(JsonSchema(NOT_AN_OBJECT))
    assert grammar.backend == "fsm" and calls == []
    assert any(u.keyword == "not" and "mid-request move" in u.reason for u in grammar.unenforced)
    assert len(calls) == 1 and not grammar.is_exact and len(calls) == 1


def test_under_on_unenforced_error_auto_takes_no_fallback_that_loses_a_keyword(llama_info, llama_hf):
    ids = llama_hf.encode('{"a":"xyz","b":[1]}', add_special_tokens=False)
    limited = None
    for cap in (50, 100, 200, 400, 800):  # the smallest state cap that compiles, then a limit on the way
        compiler = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": cap}})
        try:
            grammar = compiler.compile(JsonSchema(NOT_AN_OBJECT, on_unenforced="error"))
        except UnsupportedFeatureError:  # fsm stopped at compile time; xgrammar cannot enforce `not`
            continue
        assert grammar.backend == "fsm" and grammar.is_exact
        try:
            grammar.matcher().accept_tokens(ids)
        except CompileLimitError as exc:
            limited = exc
            break
    assert limited is not None and limited.limit == "max_states"
    # A fallback that enforces everything is kept, and the grammar stays exact.
    plain = compiler.compile(JsonSchema({"type": "object", "properties": {"n": {"type": "integer"}}}, on_unenforced="error"))
    assert plain.is_exact and plain.fallback is not None


def test_formats_as_annotations_on_request(llama_info, llama_hf):
    asserted, annotation = (JsonSchema({"type": "string", "format": "ipv4"}, assert_formats=flag) for flag in (True, False))
    assert asserted.cache_key != annotation.cache_key
    text = llama_hf.encode('"not an address"', add_special_tokens=False)
    for backend in ("fsm", "xgrammar"):
        compiler = GrammarCompiler(llama_info, backend=backend)
        assert compiler.compile(asserted).matcher().accept_tokens(text) < len(text), backend
        assert compiler.compile(annotation).matcher().accept_tokens(text) == len(text), backend
        assert not any(u.keyword == "format" for u in compiler.compile(annotation).unenforced)


_CAPPED_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "n": {"type": "integer"}},
                  "required": ["name", "n"], "additionalProperties": False, "not": {"required": ["x"]}}


def _fsm_grammar_with_a_tiny_state_cap(llama_info):
    """An ``auto`` grammar of :data:`_CAPPED_SCHEMA` on fsm, whose state cap (30) fits the start
    row but not the states of the first fills."""
    compiler = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": 30}})
    grammar = compiler.compile(JsonSchema(_CAPPED_SCHEMA))
    assert grammar.backend == "fsm"
    return grammar


def test_auto_matcher_moves_to_xgrammar_when_a_mask_fill_hits_a_limit(llama_info, llama_hf):
    # Decoding as an engine does (a fill before each token): the limit is met by a fill, which
    # moves the request and fills the fallback's mask in the same call.
    grammar = _fsm_grammar_with_a_tiny_state_cap(llama_info)
    ids = llama_hf.encode('{"name":"Ada Lovelace","n":36}', add_special_tokens=False) + [llama_info.eos_ids[0]]
    matcher = grammar.matcher()
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    moved_by_a_fill = False
    for token in ids:
        before = matcher.fell_back
        matcher.fill_next_token_bitmask(bitmask, 0)
        moved_by_a_fill |= before is None and matcher.fell_back is not None
        assert (int(bitmask[0, token >> 5]) >> (token & 31)) & 1, token
        assert matcher.accept_token(token)
    assert moved_by_a_fill and "max_states" in matcher.fell_back and matcher.grammar.backend == "xgrammar"
    assert matcher.is_terminated()


def test_auto_matcher_moves_to_xgrammar_when_fsm_hits_a_limit_mid_request(llama_info, llama_hf):
    # A tiny state cap: the start row fits, a later state does not.
    grammar = _fsm_grammar_with_a_tiny_state_cap(llama_info)
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
            JsonSchema(_CAPPED_SCHEMA)).matcher().accept_tokens(ids)


def test_adding_a_grammar_reads_the_memory_of_a_few_kept_ones_not_all(llama_info, monkeypatch):
    from grammask.grammars import compiler as compiler_module
    from grammask.grammars.fsm.backend import FsmCompiledGrammar

    compiler = GrammarCompiler(llama_info, backend="fsm", cache_bytes=1 << 30)
    kept = [compiler.compile(Regex(f"y{i}[0-9]+")) for i in range(24)]
    reads = []
    memory = FsmCompiledGrammar.memory_bytes

    def counted(grammar):
        reads.append(grammar)
        return memory.fget(grammar)

    monkeypatch.setattr(FsmCompiledGrammar, "memory_bytes", property(counted))
    added = compiler.compile(Regex("z[0-9]+"))
    assert len(reads) <= compiler_module.SIZES_READ_PER_ADD + 1 and added in reads
    assert compiler.cache_memory_bytes == sum(g.memory_bytes for g in [*kept, added])
    # The running sum drops what it evicts: with room for about half, the oldest go first.
    reads.clear()
    half = GrammarCompiler(llama_info, backend="fsm", cache_bytes=12 * kept[0].memory_bytes)
    grammars = [half.compile(g.spec) for g in kept]
    held = list(half._cache.values())
    assert 0 < len(held) < len(grammars) and held == grammars[-len(held):]
    assert half._held == sum(g.memory_bytes for g in held) <= 12 * kept[0].memory_bytes


def test_a_dropped_grammar_is_freed_after_the_compiler_lets_go_of_its_lock(llama_info):
    # Freeing a large grammar's objects takes about a millisecond: not while other threads'
    # cache hits wait on the lock.
    compiler = GrammarCompiler(llama_info, backend="fsm", cache_size=1)
    freed_under_lock = []

    class Kept:
        memory_bytes = 1

        def __del__(self):
            freed_under_lock.append(compiler._lock.locked())

    with compiler._lock:
        compiler._cache[("old", "", "fsm")], compiler._sizes[("old", "", "fsm")], compiler._held = Kept(), 1, 1
    compiler.compile(Regex("[a-c]+"))
    assert freed_under_lock == [False] and len(compiler._cache) == 1


def test_a_compile_parses_and_indexes_its_schema_once_and_changes_neither(llama_info, monkeypatch):
    """The meta-schema check and the lowering read one parse of the spec and one index of its
    references; the parse kept on the spec still equals the spec's text afterwards."""
    import json

    from grammask.grammars.spec import shared_document
    from grammask.schemas import resolve

    built = []
    real_init = resolve.Resolver.__init__

    def counting(self, root):
        built.append(root)
        real_init(self, root)

    monkeypatch.setattr(resolve.Resolver, "__init__", counting)
    schemas = [
        {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
         "$ref": "#/$defs/node", "unevaluatedProperties": False},
        {"oneOf": [{"type": "object", "required": ["a"], "properties": {"a": {"const": 1}}},
                   {"type": "object", "required": ["a"], "properties": {"a": {"enum": [1, 2]}}}], "not": {"required": ["b"]}},
        {"type": "object", "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}}, "if": {"required": ["c"]},
         "then": {"properties": {"c": {"minLength": 2}}}, "patternProperties": {"^x": {"type": "array", "prefixItems": [True]}}},
    ]
    compiler = GrammarCompiler(llama_info, backend="fsm")
    compiler.compile(JsonSchema(True))  # the backend's set-up lowers shared rules of its own
    for schema in schemas:
        built.clear()
        spec = JsonSchema(schema)
        compiler.compile(spec).matcher().fill_next_token_bitmask(allocate_token_bitmask(1, llama_info.vocab_size), 0)
        assert len(built) == 1 and built[0] is shared_document(spec)
        assert shared_document(spec) == json.loads(spec.schema_json) == schema
