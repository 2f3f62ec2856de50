"""The xgrammar backend on the real Llama-3.2 tokenizer and schemas from the corpora."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
import torch

from grammask import (
    Ebnf,
    GrammarCompiler,
    InvalidGrammarError,
    InvalidParameterError,
    InvalidRegexError,
    InvalidSchemaError,
    JsonSchema,
    Regex,
    StructuralTag,
    Tag,
    UnsupportedFeatureError,
)
from grammask.grammars.xgrammar_schema import pattern_losses, unanchor_pattern
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.validation import output_errors
from tests.conftest import read_jsonl
from tests.helpers import check_mask_matches_accept, walk


@pytest.fixture(scope="module")
def compiler(llama_info):
    return GrammarCompiler(llama_info, backend="xgrammar")


def encode(hf, text: str) -> list[int]:
    return hf.encode(text, add_special_tokens=False)


def _suite_groups(corpora, count: int) -> list[dict]:
    groups = read_jsonl(corpora / "json-schema-test-suite" / "draft2020-12.dev.jsonl")
    return random.Random(1).sample(groups, count)


def _bench_cases(corpora, count: int) -> list[tuple[dict, dict]]:
    schemas = {r["id"]: r["schema"] for r in read_jsonl(corpora / "jsonschemabench" / "schemas" / "Github_easy.dev.jsonl")}
    lines = read_jsonl(corpora / "jsonschemabench" / "instances" / "Github_easy.dev.jsonl")
    picked = random.Random(2).sample(lines, count)
    return [(schemas[line["id"]], test) for line in picked for test in line["tests"]]


def test_valid_instances_walk_to_termination(compiler, llama_info, llama_hf, corpora):
    """Every token of a valid instance is allowed at its step, no special token ever is, EOS only at
    the end, and the matcher ends terminated."""
    walked = 0
    for schema, test in _bench_cases(corpora, 12):
        if not test["valid"]:
            continue
        spec = JsonSchema(schema, property_order="any")
        try:
            grammar = compiler.compile(spec)
        except UnsupportedFeatureError:
            continue
        result = walk(grammar.matcher(), encode(llama_hf, spec.serialize(test["data"])), llama_info)
        assert result.special_allowed == []
        if result.terminated:
            assert result.eos_allowed_early == [] or not isinstance(test["data"], (dict, list))
            walked += 1
    assert walked >= 8


def test_invalid_instances_are_rejected_where_enforced(compiler, llama_info, llama_hf, corpora):
    """An invalid instance of a schema with nothing unenforced is never accepted whole."""
    checked = 0
    for schema, test in _bench_cases(corpora, 24):
        if test["valid"]:
            continue
        spec = JsonSchema(schema)
        try:
            grammar = compiler.compile(spec)
        except UnsupportedFeatureError:
            continue
        if grammar.unenforced or "format" in json.dumps(schema):
            continue
        validator = jsonschema.validators.validator_for(schema)(schema)
        if validator.is_valid(test["data"]):
            continue  # label noise: not ours to judge here
        for order in _key_orders(test["data"]):
            result = walk(grammar.matcher(), encode(llama_hf, spec.serialize(order)), llama_info)
            assert not result.terminated, (schema, order)
        checked += 1
    assert checked >= 6


def _key_orders(instance):
    """The instance as given, and with its top-level keys reversed (declared order is enforced)."""
    if isinstance(instance, dict):
        return [instance, dict(reversed(list(instance.items())))]
    return [instance]


def test_first_wrong_token_is_rejected(compiler, llama_info, llama_hf):
    spec = JsonSchema({"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]})
    ids = encode(llama_hf, '{"age":"x"}')
    assert [llama_hf.decode([i]) for i in ids] == ['{"', "age", '":"', "x", '"}']
    result = walk(compiler.compile(spec).matcher(), ids, llama_info)
    assert result.accepted == 2  # '":"' starts a string where an integer must be
    assert not result.terminated


def test_mask_matches_accept_on_random_tokens(compiler, llama_info, llama_hf, corpora):
    rng = random.Random(3)
    for group in _suite_groups(corpora, 12):
        try:
            grammar = compiler.compile(JsonSchema(group["schema"]))
        except (UnsupportedFeatureError, InvalidSchemaError):
            continue
        valid = [t for t in group["tests"] if t["valid"]]
        if not valid:
            continue
        matcher = grammar.matcher()
        ids = encode(llama_hf, grammar.spec.serialize(valid[0]["data"]))
        for token in ids[:6]:
            check_mask_matches_accept(matcher, llama_info, rng, samples=24)
            if not matcher.accept_token(token):
                break


def test_accept_never_exceeds_mask(compiler, llama_info, monkeypatch):
    """Even if xgrammar's accept_token accepted a masked-out token, the wrapper refuses it."""
    matcher = compiler.compile(JsonSchema({"type": "integer"})).matcher()
    monkeypatch.setattr(matcher, "_inner", _AcceptEverything(matcher._inner))
    brace = llama_info.token_id("{")
    assert matcher.accept_token(brace) is False
    assert matcher.accept_token(llama_info.token_id("1")) is True


class _AcceptEverything:
    def __init__(self, inner):
        self._inner = inner

    def accept_token(self, token_id):
        self._inner.accept_token(token_id)
        return True

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_special_tokens_never_inside_strings(compiler, llama_info, llama_hf):
    matcher = compiler.compile(JsonSchema({"type": "object", "properties": {"a": {"type": "string"}}})).matcher()
    assert matcher.accept_tokens(encode(llama_hf, '{"a":"')) == len(encode(llama_hf, '{"a":"'))
    bitmask = allocate_token_bitmask(1, llama_info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    allowed = bitmask_to_bool(bitmask[0], llama_info.vocab_size)
    assert allowed.sum() > 100_000  # almost every ordinary token may continue a string
    assert not allowed[128000:].any()  # <|begin_of_text|>, <|eot_id|>, reserved tokens...
    assert not matcher.accept_token(128009)


def test_length_bounded_strings_reject_raw_controls(compiler, llama_info, llama_hf):
    """Raw xgrammar accepts raw control bytes in length-bounded strings (invalid JSON); ours never.
    Escapes there are a documented narrowing."""
    spec = JsonSchema({"type": "string", "minLength": 2, "maxLength": 40})
    grammar = compiler.compile(spec)
    assert [(u.keyword, u.path) for u in grammar.narrowed] == [("minLength", "")]
    cases = [('"ab"', True), ('"été"', True), (r'"\u00e9t\u00e9"', False), (r'"a\nb"', False), ('"a"', False)]
    for text, ok in [*cases, ('"' + "x" * 41 + '"', False)]:
        assert walk(grammar.matcher(), encode(llama_hf, text), llama_info).terminated == ok, text
    for control in ["\x01", "\x1f", "\t"]:
        text = '"a' + control + 'b"'
        assert not walk(grammar.matcher(), encode(llama_hf, text), llama_info).terminated, control
    from grammask.conformance.peers import load_peer

    raw = load_peer("xgrammar", llama_info).compile(spec)()
    assert all(raw.accept_token(t) for t in encode(llama_hf, '"a\x01b"'))


def test_free_values_use_compact_separators(compiler, llama_info, llama_hf):
    grammar = compiler.compile(JsonSchema({"type": "object", "properties": {"a": {}}}))
    text = '{"a":[1,{"b":2,"c":[3,4]}],"extra":{"x":1,"y":2}}'
    assert walk(grammar.matcher(), encode(llama_hf, text), llama_info).terminated


def test_free_numbers_are_canonical_unless_lenient(compiler, llama_info, llama_hf):
    # Issue #12: a number could be padded without end ("90.000…"); canonical spells each value once.
    schema = {"type": "object", "properties": {"n": {"type": "number"}}}
    canonical, lenient = compiler.compile(JsonSchema(schema)), compiler.compile(JsonSchema(schema, number_form="lenient"))
    for number, ok in [("90", True), ("-0.5", True), ("0", True), ("90.000", False), ("-0", False), ("1e5", False), ("2.50", False)]:
        text = encode(llama_hf, '{"n":' + number + "}")
        assert walk(canonical.matcher(), text, llama_info).terminated == ok, number
        assert walk(lenient.matcher(), text, llama_info).terminated, number


def test_keywords_without_type_accept_other_types(compiler, llama_info, llama_hf):
    grammar = compiler.compile(JsonSchema({"properties": {"a": {"type": "integer"}}, "required": ["a"]}))
    for value, ok in [({"a": 1}, True), ({"b": 1}, False), (5, True), ("s", True), ([1], True), (None, True)]:
        result = walk(grammar.matcher(), encode(llama_hf, json.dumps(value, separators=(",", ":"))), llama_info)
        assert result.terminated == ok, value


@pytest.mark.parametrize(
    "pattern, text, ok",
    [("a", "bab", True), ("a", "xyz", False), ("^a", "ab", True), ("^a", "ba", False), ("b$|^a", "cab", True)],
)
def test_patterns_match_anywhere(compiler, llama_info, llama_hf, pattern, text, ok):
    grammar = compiler.compile(JsonSchema({"type": "string", "pattern": pattern}))
    assert walk(grammar.matcher(), encode(llama_hf, json.dumps(text)), llama_info).terminated == ok


def test_unanchor_pattern():
    assert unanchor_pattern("^a$") == "(?:a)"
    assert unanchor_pattern("a|^b") == r"[\s\S]*(?:a)[\s\S]*|(?:b)[\s\S]*"
    assert unanchor_pattern(r"[|]a\$") == r"[\s\S]*(?:[|]a\$)[\s\S]*"


def test_anchors_inside_a_pattern_are_listed_as_dropped(compiler, llama_info, llama_hf):
    # xgrammar ignores a ^ or $ that does not open or close a top-level alternative: "$^" (only
    # the empty string) takes every string there, so the pattern is listed as unenforced.
    grammar = compiler.compile(JsonSchema({"type": "string", "pattern": "$^"}))
    assert [(u.keyword, u.path) for u in grammar.unenforced] == [("pattern", "")]
    assert walk(grammar.matcher(), encode(llama_hf, json.dumps("zz")), llama_info).terminated  # the loss is real
    assert output_errors({"type": "string", "pattern": "$^"}, "zz")
    objects = compiler.compile(JsonSchema({"type": "object", "patternProperties": {"x(?=y)": {}, "^a$": {}}, "additionalProperties": False}))
    assert [u.keyword for u in objects.unenforced] == ["patternProperties"]
    for pattern, dropped in [("$^", True), ("(^a)", True), ("x(?:$)y", True), ("^(a|b$)", True), ("^a$|b$", False),
                             ("[^a]$", False), ("[$^]", False), (r"^\$x\^", False)]:
        assert bool(pattern_losses(pattern)) == dropped, pattern


def test_unenforced_keywords_are_listed_or_raise(compiler):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "number", "multipleOf": 0.5}, "x": {"oneOf": [{"type": "integer"}, {"minimum": 0}]}},
        "not": {"required": ["z"]},
    }
    grammar = compiler.compile(JsonSchema(schema))
    found = {(u.keyword, u.path) for u in grammar.unenforced}
    assert found == {("not", ""), ("multipleOf", "/properties/n"), ("oneOf", "/properties/x")}
    with pytest.raises(UnsupportedFeatureError, match="cannot enforce 'not' at '/'"):
        compiler.compile(JsonSchema(schema, on_unenforced="error"))


def test_property_order_policies(compiler, llama_info, llama_hf):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    swapped = encode(llama_hf, '{"b":2,"a":1}')
    declared = compiler.compile(JsonSchema(schema))
    any_order = compiler.compile(JsonSchema(schema, property_order="any"))
    assert not walk(declared.matcher(), swapped, llama_info).terminated
    assert walk(any_order.matcher(), swapped, llama_info).terminated


def test_flexible_whitespace_is_bounded(compiler, llama_info, llama_hf):
    grammar = compiler.compile(JsonSchema({"type": "array", "items": {"type": "integer"}}, whitespace="flexible"))
    assert walk(grammar.matcher(), encode(llama_hf, "[1, 2,  3]"), llama_info).terminated
    assert not walk(grammar.matcher(), encode(llama_hf, "[1," + " " * 9 + "2]"), llama_info).terminated
    compact = compiler.compile(JsonSchema({"type": "array", "items": {"type": "integer"}}))
    assert not walk(compact.matcher(), encode(llama_hf, "[1, 2]"), llama_info).terminated


def test_regex_ebnf_and_structural_tag(compiler, llama_info, llama_hf):
    regex = compiler.compile(Regex(r"\d{4}-\d{2}-\d{2}"))
    assert walk(regex.matcher(), encode(llama_hf, "2024-01-31"), llama_info).terminated
    assert not walk(regex.matcher(), encode(llama_hf, "2024-1-31"), llama_info).terminated
    ebnf = compiler.compile(Ebnf('root ::= "yes" | "no"'))
    assert walk(ebnf.matcher(), encode(llama_hf, "no"), llama_info).terminated
    tag = StructuralTag(
        [Tag("<call=add>", JsonSchema({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}), "</call>")],
        ["<call="],
    )
    grammar = compiler.compile(tag)
    good = 'Let me add. <call=add>{"x":1}</call> done'
    bad = 'Let me add. <call=add>{"x":"one"}</call>'
    assert walk(grammar.matcher(), encode(llama_hf, good), llama_info).terminated
    assert not walk(grammar.matcher(), encode(llama_hf, bad), llama_info).terminated


def test_bad_input_errors(compiler):
    with pytest.raises(InvalidSchemaError, match="at '/properties/a/type'"):
        compiler.compile(JsonSchema({"properties": {"a": {"type": "strng"}}}))
    with pytest.raises(InvalidRegexError, match="invalid regex"):
        compiler.compile(Regex("a(b"))
    with pytest.raises(InvalidGrammarError, match=r"^invalid grammar at line 1, column 16: EBNF parser error") as bad:
        compiler.compile(Ebnf('root ::= "a" | '))
    assert (bad.value.line, bad.value.column) == (1, 16)
    with pytest.raises(InvalidRegexError, match=r"^invalid regex at position 6: Regex parsing error"):
        compiler.compile(Regex("a(b(c"))  # xgrammar's own parser: no C++ log prefix in the message
    with pytest.raises(InvalidGrammarError, match=r"Rule \"foo\" is not defined") as bad:
        compiler.compile(Ebnf("root ::= foo"))
    assert "[" not in str(bad.value) and ".cc:" not in str(bad.value)


def test_a_terminated_matcher_allows_nothing(compiler, llama_info):
    matcher = compiler.compile(Regex("a")).matcher()
    assert matcher.accept_token(llama_info.token_bytes.index(b"a")) and matcher.accept_token(llama_info.eos_ids[0])
    bitmask = allocate_token_bitmask(2, llama_info.vocab_size)
    bitmask.fill_(-1)
    matcher.fill_next_token_bitmask(bitmask, 1)
    assert not bitmask[1].any() and bool((bitmask[0] == -1).all())  # only its own row is written


def test_matcher_rollback_fork_reset_jump_forward(compiler, llama_info, llama_hf):
    grammar = compiler.compile(JsonSchema({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    matcher = grammar.matcher()
    assert matcher.jump_forward_string() == '{"name":"'
    ids = encode(llama_hf, '{"name":"Bo"}')
    assert matcher.validate_tokens(ids) == len(ids) and matcher.num_accepted == 0
    assert matcher.accept_tokens(ids) == len(ids)
    fork = matcher.fork()
    matcher.rollback(2)
    assert matcher.num_accepted == len(ids) - 2 and fork.num_accepted == len(ids)
    assert matcher.accept_tokens(ids[-2:]) == 2
    assert matcher.accept_token(llama_info.eos_ids[0]) and matcher.is_terminated()
    assert not matcher.accept_token(ids[0])
    matcher.reset()
    assert matcher.num_accepted == 0 and not matcher.is_terminated()
    with pytest.raises(InvalidParameterError, match=r"invalid num_tokens=3: expected an int with 0 <= num_tokens <= 0"):
        matcher.rollback(3)


def test_ids_past_the_vocabulary_are_never_allowed(llama_hf):
    from grammask.tokenizer import TokenizerInfo

    padded = TokenizerInfo.from_huggingface(llama_hf, vocab_size=128320)
    grammar = GrammarCompiler(padded, backend="xgrammar").compile(JsonSchema({"type": "string"}))
    matcher = grammar.matcher()
    matcher.accept_token(padded.token_id('"'))
    bitmask = allocate_token_bitmask(1, padded.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    allowed = bitmask_to_bool(bitmask[0], padded.vocab_size)
    assert not allowed[128256:].any() and allowed[:128000].any()
    assert not matcher.accept_token(128300)


def test_compile_cache_is_shared_and_thread_safe(llama_info):
    from concurrent.futures import ThreadPoolExecutor

    compiler = GrammarCompiler(llama_info, backend="xgrammar")
    spec = JsonSchema({"type": "object", "properties": {"k": {"type": "string", "maxLength": 20}}})
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: compiler.compile(spec), range(8)))
    assert all(r is results[0] for r in results)
    assert compiler.compile(JsonSchema(spec.schema)) is results[0]
    assert "xgrammar" in results[0].choice
    torch.manual_seed(0)


def test_string_keywords_without_type_are_enforced(compiler, llama_info, llama_hf):
    """xgrammar ignores format/minLength when the schema has no type; the split by type restores them."""
    grammar = compiler.compile(JsonSchema({"format": "ipv4", "minLength": 7}))
    for value, ok in [("10.0.0.1", True), ("10.0.0", False), ("1.2.3.4", True), ("999.1.1.1", False), (5, True), (None, True)]:
        text = json.dumps(value)
        assert walk(grammar.matcher(), encode(llama_hf, text), llama_info).terminated == ok, value


def test_refs_are_resolved_in_the_document_and_remote_ones_refused(compiler, llama_info, llama_hf):
    # Every reference the document resolves ($id bases included) points at a copy of its target.
    schema = {
        "$id": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed",
        "properties": {"foo": {"$ref": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed#/$defs/bar"}},
        "$defs": {"bar": {"type": "string"}},
    }
    grammar = compiler.compile(JsonSchema(schema))
    assert grammar.unenforced == ()
    assert walk(grammar.matcher(), encode(llama_hf, '{"foo":"s"}'), llama_info).terminated
    assert not walk(grammar.matcher(), encode(llama_hf, '{"foo":1}'), llama_info).terminated
    remote = {"properties": {"foo": {"$ref": "https://example.com/bar.json"}}}
    with pytest.raises(UnsupportedFeatureError, match="'/properties/foo'.*never fetches"):  # refused before any backend
        compiler.compile(JsonSchema(remote))
    times = compiler.compile(JsonSchema({"type": "string", "format": "date-time"}))
    assert [u.keyword for u in times.unenforced] == ["format"]


def test_overlapping_pattern_properties_and_unevaluated_items_are_listed(compiler, llama_info, llama_hf):
    # Measured on the test suite: a name matching two patterns is checked against one only, so
    # {"aaaa": 31} passes although "aaa*" caps it at 20; unevaluatedItems next to anyOf leaks too.
    overlapping = compiler.compile(JsonSchema({"patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}}))
    assert [u.keyword for u in overlapping.unenforced] == ["patternProperties"]
    ids = llama_hf.encode('{"aaaa":31}', add_special_tokens=False) + [llama_info.eos_ids[0]]
    assert overlapping.matcher().accept_tokens(ids) == len(ids)  # the leak the listing owns up to
    # Next to properties, a member matching the pattern may take another schema: listed.
    single = compiler.compile(JsonSchema({"properties": {"b": {}}, "patternProperties": {"^a": {"type": "integer"}}}))
    assert [(u.keyword, u.path) for u in single.unenforced] == [("patternProperties", "")]
    alone = compiler.compile(JsonSchema({"type": "object", "patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False}))
    assert alone.unenforced == () and alone.narrowed == ()
    for text, ok in [('{"ab":1}', True), ('{"ab":"s"}', False), ('{"b":1}', False)]:
        assert walk(alone.matcher(), encode(llama_hf, text), llama_info).terminated == ok, text
    unevaluated = compiler.compile(JsonSchema({"unevaluatedItems": {"type": "boolean"}, "anyOf": [{"items": {"type": "string"}}, True]}))
    assert "unevaluatedItems" in {u.keyword for u in unevaluated.unenforced}
