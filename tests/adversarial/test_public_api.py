"""Every public entry point of ``grammask/__init__.py`` fed malformed input answers with a named grammask
error (issue #12): wrong types, negative and huge sizes, NaN parameters, bad tensors, non-str schemas.
Never a crash, a foreign exception, or a value silently read as something else.

``test_every_public_name_is_walked`` keeps the table honest: a name added to ``grammask.__all__`` must
get cases here (or be listed as taking no input to check)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import grammask as gm

NAN, INF, HUGE = float("nan"), float("inf"), 10**30
SP = gm.SamplingParams


@dataclass(frozen=True)
class Case:
    api: str  # the name in grammask.__all__ this case walks
    label: str
    call: object  # ctx -> anything; must raise
    error: type = gm.GrammaskError
    match: str = ""


def cases() -> list[Case]:
    out: list[Case] = []

    def add(api, label, call, error=gm.GrammaskError, match=""):
        out.append(Case(api, label, call, error, match))

    # ---------------------------------------------------------------- specs
    circular: dict = {}
    circular["self"] = circular
    for label, schema in [("set", {1}), ("int", 5), ("None", None), ("bytes", b"{}"), ("list", [1]),
                          ("nan", {"minimum": NAN}), ("inf", {"maximum": INF}), ("cycle", circular),
                          ("object", {"const": object()}), ("bad JSON text", "{"), ("number text", "5")]:
        add("JsonSchema", f"schema {label}", lambda c, s=schema: gm.JsonSchema(s), gm.InvalidSchemaError)
    for option, value in [("max_depth", "3"), ("max_depth", 2.5), ("max_depth", 0), ("max_depth", HUGE),
                          ("max_whitespace", None), ("max_whitespace", -1), ("strict", "no"), ("strict", 1),
                          ("assert_formats", None), ("whitespace", "tabs"), ("property_order", 5), ("on_unenforced", "maybe"),
                          ("number_form", "loose"), ("number_form", None)]:
        add("JsonSchema", f"{option}={value!r}", lambda c, o=option, v=value: gm.JsonSchema({}, **{o: v}),
            gm.InvalidParameterError, rf"invalid {option}=")
    add("Regex", "pattern None", lambda c: gm.Regex(None), gm.InvalidParameterError)
    add("Regex", "pattern bytes", lambda c: gm.Regex(b"a"), gm.InvalidParameterError)
    add("Ebnf", "grammar 5", lambda c: gm.Ebnf(5), gm.InvalidParameterError)
    add("Ebnf", "grammar blank", lambda c: gm.Ebnf("  "), gm.InvalidParameterError)
    add("Ebnf", "root 5", lambda c: gm.Ebnf('root ::= "a"', root=5), gm.InvalidParameterError, r"invalid root=5")
    add("Ebnf", "root empty", lambda c: gm.Ebnf('root ::= "a"', root=""), gm.InvalidParameterError)
    add("Tag", "begin 5", lambda c: gm.Tag(5, gm.Regex("a"), "x"), gm.InvalidParameterError, r"Tag.begin=5")
    add("Tag", "begin empty", lambda c: gm.Tag("", gm.Regex("a"), "x"), gm.InvalidParameterError)
    add("Tag", "content dict", lambda c: gm.Tag("<a>", {"type": "string"}, "x"), gm.InvalidParameterError)
    add("Tag", "end None", lambda c: gm.Tag("<a>", gm.Regex("a"), None), gm.InvalidParameterError, r"Tag.end=None")
    tag = gm.Tag("<f>", gm.Regex("a"), "</f>")
    add("StructuralTag", "tags None", lambda c: gm.StructuralTag(None, []), gm.InvalidParameterError)
    add("StructuralTag", "tags ints", lambda c: gm.StructuralTag([1, 2], ["<"]), gm.InvalidParameterError, r"tags\[0\]")
    add("StructuralTag", "tags empty", lambda c: gm.StructuralTag([], []), gm.InvalidParameterError)
    add("StructuralTag", "triggers str", lambda c: gm.StructuralTag([tag], "<f"), gm.InvalidParameterError, r"invalid triggers='str'")
    add("StructuralTag", "trigger int", lambda c: gm.StructuralTag([tag], [5]), gm.InvalidParameterError)
    add("StructuralTag", "trigger no prefix", lambda c: gm.StructuralTag([tag], ["<g"]), gm.InvalidParameterError)
    add("StructuralTag", "at_least_one str", lambda c: gm.StructuralTag([tag], ["<f"], at_least_one="no"), gm.InvalidParameterError,
        r"invalid at_least_one='no'")
    add("StructuralTag", "stop_after_first 1", lambda c: gm.StructuralTag([tag], ["<f"], stop_after_first=1), gm.InvalidParameterError)
    cyclic_format: dict = {"type": "sequence", "elements": []}
    cyclic_format["elements"].append(cyclic_format)
    for label, tree in [("int", 5), ("list", [1]), ("bad JSON", "{"), ("document without format", {"type": "structural_tag"}),
                        ("reserved node", {"type": "spec", "index": 0}), ("object leaf", {"type": "const_string", "value": object()}),
                        ("cycle", cyclic_format), ("json_schema without schema", {"type": "json_schema"}),
                        ("schema set", {"type": "json_schema", "json_schema": {1}}),
                        ("whitespace bound str", {"type": "json_schema", "json_schema": {}, "max_whitespace_cnt": "x"}),
                        ("nested structural tag", {"type": "sequence", "elements": [gm.StructuralTag([tag], ["<f"])]})]:
        add("StructuralTag", f"from_format {label}", lambda c, t=tree: gm.StructuralTag.from_format(t))
    add("StructuralTag", "unknown node type", lambda c: gm.GrammarCompiler(c.info, backend="xgrammar").compile(
        gm.StructuralTag.from_format({"type": "no_such_element"})), gm.InvalidGrammarError)
    add("StructuralTag", "remote $ref in content", lambda c: gm.GrammarCompiler(c.info, backend="xgrammar").compile(
        gm.StructuralTag.from_format({"type": "json_schema", "json_schema": {"$ref": "http://127.0.0.1:9/s.json"}})))
    for label, kwargs in [("content dict", {"content": {"type": "string"}}), ("content None", {"content": None}),
                          ("start empty", {"start": ""}), ("end 5", {"end": 5}), ("started str", {"started": "yes"}),
                          ("max_gap -1", {"max_gap": -1}), ("max_gap huge", {"max_gap": HUGE}), ("max_gap float", {"max_gap": 2.0})]:
        add("Reasoning", label, lambda c, k=kwargs: gm.Reasoning(**{"content": gm.Regex("a"), **k}), gm.InvalidParameterError)
    for label, family in [("unknown", "gpt"), ("list", ["qwen3"]), ("None", None)]:
        add("Reasoning", f"for_model {label}", lambda c, f=family: gm.Reasoning.for_model(f, gm.Regex("a")), gm.InvalidParameterError)
    add("Reasoning", "start not one token", lambda c: c.compiler.compile(gm.Reasoning(gm.Regex("a"), start="<think>", end="b")),
        gm.InvalidParameterError, r"Reasoning.start")
    add("Reasoning", "end not one token", lambda c: c.compiler.compile(gm.Reasoning(gm.Regex("a"), started=True, end="</think>")),
        gm.InvalidParameterError, r"Reasoning.end")
    for label, kwargs in [("name 5", {"name": 5}), ("name empty", {"name": ""}), ("parameters list", {"parameters": [1]}),
                          ("parameters None", {"parameters": None}), ("strict str", {"strict": "yes"})]:
        add("Tool", label, lambda c, k=kwargs: gm.Tool(**{"name": "f", "parameters": {}, **k}), gm.InvalidParameterError)
    weather = lambda: gm.Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})  # noqa: E731
    for label, call in [
        ("tools None", lambda c: gm.tool_call_spec(None, "hermes")),
        ("tools empty", lambda c: gm.tool_call_spec([], "hermes")),
        ("tools str", lambda c: gm.tool_call_spec("get_weather", "hermes")),
        ("tools dicts", lambda c: gm.tool_call_spec([{"name": "f"}], "hermes")),
        ("format unknown", lambda c: gm.tool_call_spec([weather()], "gpt")),
        ("format list", lambda c: gm.tool_call_spec([weather()], ["hermes"])),
        ("format None", lambda c: gm.tool_call_spec([weather()], None)),
        ("choice unknown tool", lambda c: gm.tool_call_spec([weather()], "hermes", choice="nope")),
        ("choice dict", lambda c: gm.tool_call_spec([weather()], "hermes", choice={"name": "get_weather"})),
        ("parallel str", lambda c: gm.tool_call_spec([weather()], "hermes", parallel="no")),
    ]:
        add("tool_call_spec", label, call, gm.InvalidParameterError)
    request = gm.spec_from_request
    for label, call in [
        ("body None", lambda c: request(None)),
        ("body list", lambda c: request([{"response_format": {"type": "json_object"}}])),
        ("whitespace unknown", lambda c: request({}, whitespace="tabs")),
        ("whitespace list", lambda c: request({}, whitespace=["compact"])),
        ("reasoning unknown", lambda c: request({"response_format": {"type": "json_object"}}, reasoning="gpt")),
        ("reasoning list", lambda c: request({"response_format": {"type": "json_object"}}, reasoning=["qwen3"])),
        ("tool_format list", lambda c: request({"tools": [{"type": "function", "function": {"name": "f"}}]}, tool_format=["hermes"])),
        ("response_format str", lambda c: request({"response_format": "json"})),
        ("response_format type", lambda c: request({"response_format": {"type": "yaml"}})),
        ("schema nan", lambda c: request({"response_format": {"type": "json_schema", "json_schema": {"schema": {"maximum": NAN}}}})),
        ("schema strict str", lambda c: request({"response_format": {"type": "json_schema",
                                                                     "json_schema": {"schema": {}, "strict": "yes"}}})),
        ("schema strict 0", lambda c: request({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 0}}})),
        ("remote $ref", lambda c: request({"response_format": {"type": "json_schema",
                                                               "json_schema": {"schema": {"$ref": "http://127.0.0.1:9/s.json"}}}})),
        ("regex int", lambda c: request({"structured_outputs": {"regex": 5}})),
        ("choice ints", lambda c: request({"structured_outputs": {"choice": [1, 2]}})),
        ("grammar list", lambda c: request({"structured_outputs": {"grammar": ["root ::= 'a'"]}})),
        ("structural tag cycle", lambda c: request({"structured_outputs": {"structural_tag": cyclic_format}})),
        ("tools dict", lambda c: request({"tools": {"f": {}}}, tool_format="hermes")),
        ("tool parameters list", lambda c: request({"tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]},
                                                   tool_format="hermes")),
        ("tool_choice list", lambda c: request({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": ["f"]},
                                               tool_format="hermes")),
        ("parallel_tool_calls str", lambda c: request({"tools": [{"type": "function", "function": {"name": "f"}}],
                                                      "parallel_tool_calls": "yes"}, tool_format="hermes")),
    ]:
        add("spec_from_request", label, call)

    # ---------------------------------------------------------------- compiler, grammars, matchers
    add("GrammarCompiler", "tokenizer None", lambda c: gm.GrammarCompiler(None), gm.InvalidParameterError)
    add("GrammarCompiler", "tokenizer str", lambda c: gm.GrammarCompiler("llama"), gm.InvalidParameterError)
    add("GrammarCompiler", "backend unknown", lambda c: gm.GrammarCompiler(c.info, backend="fast"), gm.InvalidParameterError)
    add("GrammarCompiler", "backend 5", lambda c: gm.GrammarCompiler(c.info, backend=5), gm.InvalidParameterError)
    add("GrammarCompiler", "cache -1", lambda c: gm.GrammarCompiler(c.info, cache_size=-1), gm.InvalidParameterError)
    add("GrammarCompiler", "cache str", lambda c: gm.GrammarCompiler(c.info, cache_size="8"), gm.InvalidParameterError)
    add("GrammarCompiler", "options 5", lambda c: gm.GrammarCompiler(c.info, backend_options=5), gm.InvalidParameterError)
    add("GrammarCompiler", "option unknown",
        lambda c: gm.GrammarCompiler(c.info, backend="xgrammar", backend_options={"xgrammar": {"turbo": 1}}).compile(gm.Regex("a")),
        gm.InvalidParameterError, r"backend_options\['xgrammar'\]")
    for label, spec in [("dict", {"type": "string"}), ("str", "a+"), ("None", None)]:
        add("GrammarCompiler", f"compile {label}", lambda c, s=spec: c.compiler.compile(s), gm.InvalidParameterError, r"invalid spec=")
    add("GrammarCompiler", "regex syntax", lambda c: c.compiler.compile(gm.Regex("a(")), gm.InvalidRegexError)
    add("GrammarCompiler", "ebnf syntax", lambda c: gm.GrammarCompiler(c.info, backend="xgrammar").compile(gm.Ebnf("root ::= (")),
        gm.InvalidGrammarError)
    add("GrammarCompiler", "schema fails meta-schema", lambda c: c.compiler.compile(gm.JsonSchema({"type": 5})), gm.InvalidSchemaError)
    for label, value in [("-1", -1), ("0", 0), ("str", "5"), ("float", 5.5), ("nan", NAN)]:
        add("CompiledGrammar", f"matcher max_tokens {label}", lambda c, v=value: c.grammar.matcher(max_tokens=v), gm.InvalidParameterError)
        add("CompiledGrammar", f"xgrammar matcher max_tokens {label}", lambda c, v=value: c.xgrammar.matcher(max_tokens=v),
            gm.InvalidParameterError)
    for label, call in [
        ("accept_token str", lambda m: m.accept_token("a")),
        ("accept_token float", lambda m: m.accept_token(1.0)),
        ("accept_token nan", lambda m: m.accept_token(NAN)),
        ("accept_tokens None", lambda m: m.accept_tokens(None)),
        ("accept_tokens [None]", lambda m: m.accept_tokens([None])),
        ("validate_tokens str", lambda m: m.validate_tokens("ab")),
        ("rollback -1", lambda m: m.rollback(-1)),
        ("rollback huge", lambda m: m.rollback(HUGE)),
        ("rollback float", lambda m: m.rollback(0.5)),
        ("fill list", lambda m: m.fill_next_token_bitmask([[0] * 9])),
        ("fill row huge", lambda m: m.fill_next_token_bitmask(torch.zeros(1, 9, dtype=torch.int32), HUGE)),
        ("fill expanded", lambda m: m.fill_next_token_bitmask(torch.zeros(1, 9, dtype=torch.int32).expand(4, -1))),
    ]:
        for backend in ("fsm", "xgrammar"):
            add("Matcher", f"{backend} {label}", lambda c, f=call, b=backend: f(c.matchers[b]()), gm.InvalidParameterError)

    # ---------------------------------------------------------------- bitmask helpers and the kernel
    for label, args in [("batch -1", (-1, 10)), ("batch str", ("2", 10)), ("batch float", (2.0, 10)),
                        ("vocab 0", (1, 0)), ("vocab huge", (1, HUGE)), ("both huge", (HUGE, HUGE)),
                        ("vocab nan", (1, NAN))]:
        add("allocate_token_bitmask", label, lambda c, a=args: gm.allocate_token_bitmask(*a), gm.InvalidParameterError)
    add("allocate_token_bitmask", "device", lambda c: gm.allocate_token_bitmask(1, 10, device="tpu:9"), gm.InvalidParameterError)
    add("bitmask_to_bool", "list", lambda c: gm.bitmask_to_bool([1]), gm.InvalidParameterError)
    add("bitmask_to_bool", "int64", lambda c: gm.bitmask_to_bool(torch.zeros(1, 1, dtype=torch.int64)), gm.InvalidParameterError)
    add("bitmask_to_bool", "3-D", lambda c: gm.bitmask_to_bool(torch.zeros(1, 1, 1, dtype=torch.int32)), gm.InvalidParameterError)
    for label, vocab in [("-1", -1), ("past the words", 33), ("str", "3"), ("huge", HUGE)]:
        add("bitmask_to_bool", f"vocab {label}", lambda c, v=vocab: gm.bitmask_to_bool(torch.zeros(1, 1, dtype=torch.int32), v),
            gm.InvalidParameterError, r"invalid vocab_size=")
    add("bool_to_bitmask", "list", lambda c: gm.bool_to_bitmask([True]), gm.InvalidParameterError)
    add("bool_to_bitmask", "float", lambda c: gm.bool_to_bitmask(torch.ones(2, 3)), gm.InvalidParameterError)
    add("bool_to_bitmask", "3-D", lambda c: gm.bool_to_bitmask(torch.ones(1, 1, 1, dtype=torch.bool)), gm.InvalidParameterError)
    add("reset_token_bitmask", "list", lambda c: gm.reset_token_bitmask([1]), gm.InvalidParameterError)
    add("reset_token_bitmask", "float", lambda c: gm.reset_token_bitmask(torch.zeros(2, 2)), gm.InvalidParameterError)
    words = lambda: torch.zeros(1, 9, dtype=torch.int32)  # noqa: E731
    add("fill_next_token_bitmask", "matchers None", lambda c: gm.fill_next_token_bitmask(None, words()), gm.InvalidParameterError)
    add("fill_next_token_bitmask", "matcher str", lambda c: gm.fill_next_token_bitmask(["m"], words()), gm.InvalidParameterError)
    add("fill_next_token_bitmask", "workers 0", lambda c: gm.fill_next_token_bitmask([c.matchers["fsm"]()], words(), max_workers=0),
        gm.InvalidParameterError)
    add("fill_next_token_bitmask", "rows str", lambda c: gm.fill_next_token_bitmask([c.matchers["fsm"]()], words(), rows="0"),
        gm.InvalidParameterError)
    add("fill_next_token_bitmask", "rows float tensor",
        lambda c: gm.fill_next_token_bitmask([c.matchers["fsm"]()], words(), rows=torch.tensor([0.0])), gm.InvalidParameterError)
    add("fill_next_token_bitmask", "row huge", lambda c: gm.fill_next_token_bitmask([c.matchers["fsm"]()], words(), rows=[HUGE]),
        gm.InvalidParameterError)
    add("fill_next_token_bitmask", "bitmask float", lambda c: gm.fill_next_token_bitmask([c.matchers["fsm"]()], torch.zeros(1, 9)),
        gm.InvalidParameterError)
    fsm = lambda c: c.matchers["fsm"]()  # noqa: E731
    for label, call in [
        ("matchers None", lambda c: gm.fill_draft_bitmask(None, [[1]], torch.zeros(2, 9, dtype=torch.int32))),
        ("matcher str", lambda c: gm.fill_draft_bitmask(["m"], [[1]], torch.zeros(2, 9, dtype=torch.int32))),
        ("drafts str", lambda c: gm.fill_draft_bitmask([fsm(c)], "ab", torch.zeros(3, 9, dtype=torch.int32))),
        ("drafts count", lambda c: gm.fill_draft_bitmask([fsm(c)], [[1], [2]], torch.zeros(4, 9, dtype=torch.int32))),
        ("draft row int", lambda c: gm.fill_draft_bitmask([fsm(c)], [5], torch.zeros(2, 9, dtype=torch.int32))),
        ("draft float", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34.5]], torch.zeros(2, 9, dtype=torch.int32))),
        ("draft -1", lambda c: gm.fill_draft_bitmask([fsm(c)], [[-1]], torch.zeros(2, 9, dtype=torch.int32))),
        ("bitmask rows", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34, 97]], torch.zeros(2, 9, dtype=torch.int32))),
        ("bitmask float", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34]], torch.zeros(2, 9))),
        ("bitmask expanded", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34]], torch.zeros(1, 9, dtype=torch.int32).expand(2, -1))),
        ("bitmask strided", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34]], torch.zeros(4, 9, dtype=torch.int32)[::2])),
        ("bitmask width", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34]], torch.zeros(2, 8, dtype=torch.int32))),
        ("workers 0", lambda c: gm.fill_draft_bitmask([fsm(c)], [[34]], torch.zeros(2, 9, dtype=torch.int32), max_workers=0)),
    ]:
        add("fill_draft_bitmask", label, call, gm.InvalidParameterError)
    add("apply_mask", "impl 5", lambda c: gm.apply_mask(torch.zeros(1, 9), words(), impl=5), gm.InvalidParameterError)
    add("apply_mask", "logits numpy", lambda c: gm.apply_mask(np.zeros((1, 9)), words()), gm.InvalidParameterError)
    add("apply_mask", "indices huge", lambda c: gm.apply_mask(torch.zeros(1, 9), words(), indices=torch.tensor([2**40])),
        gm.InvalidParameterError)

    # ---------------------------------------------------------------- sampling
    for field, value in [("temperature", NAN), ("temperature", INF), ("temperature", -1.0), ("temperature", "1"),
                         ("temperature", True), ("temperature", 1j), ("top_p", 0.0), ("top_p", 1.5), ("top_p", NAN),
                         ("top_k", 0), ("top_k", -2), ("top_k", 2.0), ("top_k", True), ("min_p", -0.1), ("min_p", NAN),
                         ("repetition_penalty", 0.0), ("repetition_penalty", -1.0), ("repetition_penalty", INF),
                         ("frequency_penalty", 3.0), ("presence_penalty", NAN), ("min_new_tokens", -1),
                         ("max_new_tokens", 0), ("max_new_tokens", 1.5), ("stop", [""]), ("stop", [5]),
                         ("stop_token_ids", [-1]), ("stop_regex", "a("), ("logit_bias", [1, 2]), ("logit_bias", {1: NAN}),
                         ("logit_bias", {1: 1e9}), ("logit_bias", {-1: 1.0}), ("logit_bias", {"x": 1.0}), ("seed", -1),
                         ("seed", 2**63), ("seed", 1.5), ("logprobs", -1), ("logprobs", HUGE), ("token_ids_logprobs", [1.5]),
                         ("n", 0), ("logits_processors", [{"name": "nope"}]),
                         ("logits_processors", [{"name": "no_repeat_ngram", "params": [1]}]), ("logits_processors", ["x"])]:
        add("SamplingParams", f"{field}={value!r}", lambda c, f=field, v=value: SP(**{f: v}), gm.InvalidParameterError)
    build = gm.SamplingBatch.build
    for label, call in [
        ("params None", lambda c: build(None, vocab_size=5)),
        ("params dicts", lambda c: build([{}], vocab_size=5)),
        ("params str", lambda c: build("abc", vocab_size=5)),
        ("vocab -1", lambda c: build([SP()], vocab_size=-1)),
        ("vocab 0", lambda c: build([SP()], vocab_size=0)),
        ("vocab str", lambda c: build([SP()], vocab_size="5")),
        ("vocab float", lambda c: build([SP()], vocab_size=5.0)),
        ("vocab huge", lambda c: build([SP(repetition_penalty=1.1)], vocab_size=HUGE)),
        ("vocab nan", lambda c: build([SP()], vocab_size=NAN)),
        ("eos -1", lambda c: build([SP(min_new_tokens=2)], vocab_size=5, eos_ids=[-1])),
        ("eos past vocab", lambda c: build([SP(min_new_tokens=2)], vocab_size=5, eos_ids=[5])),
        ("prompt str", lambda c: build([SP(repetition_penalty=1.1)], vocab_size=5, prompt_token_ids=["abc"])),
        ("prompt float ids", lambda c: build([SP(repetition_penalty=1.1)], vocab_size=5, prompt_token_ids=[[1.5]])),
        ("prompt None row", lambda c: build([SP()], vocab_size=5, prompt_token_ids=[None])),
        ("prompt rows", lambda c: build([SP()], vocab_size=5, prompt_token_ids=[[1], [2]])),
        ("output past vocab", lambda c: build([SP()], vocab_size=5, output_token_ids=[[7]])),
        ("device", lambda c: build([SP()], vocab_size=5, device="tpu:9")),
        ("tokenizer str", lambda c: build([SP()], vocab_size=5, tokenizer="llama")),
        ("stop id past vocab", lambda c: build([SP(stop_token_ids=[9])], vocab_size=5)),
        ("bias past vocab", lambda c: build([SP(logit_bias={9: 1.0})], vocab_size=5)),
    ]:
        add("SamplingBatch", label, call, gm.InvalidParameterError)
    for label, call in [
        ("update list", lambda b: b.update([1])),
        ("update float", lambda b: b.update(torch.tensor([1.0]))),
        ("update bool", lambda b: b.update(torch.tensor([True]))),
        ("update 2-D", lambda b: b.update(torch.tensor([[1]]))),
        ("update rows", lambda b: b.update(torch.tensor([1, 2]))),
        ("update past vocab", lambda b: b.update(torch.tensor([10**6]))),
        ("filter str", lambda b: b.filter("0")),
        ("filter None", lambda b: b.filter(None)),
        ("filter out of range", lambda b: b.filter([3])),
        ("filter float", lambda b: b.filter([0.0])),
        ("merge None", lambda b: b.merge(None)),
        ("merge other vocab", lambda b: b.merge(build([SP()], vocab_size=7))),
    ]:
        add("SamplingBatch", label, lambda c, f=call: f(c.batch()), gm.InvalidParameterError)
    for label, kwargs in [("cap 0", {"candidate_cap": 0}), ("cap True", {"candidate_cap": True}), ("cap str", {"candidate_cap": "8"}),
                          ("mode", {"logprobs_mode": "both"}), ("generator str", {"generator": "seed"})]:
        add("Sampler", label, lambda c, k=kwargs: gm.Sampler(**k), gm.InvalidParameterError)
    for label, logits in [("list", lambda: [[0.0] * 264]), ("int", lambda: torch.zeros(1, 264, dtype=torch.int64)),
                          ("bool", lambda: torch.zeros(1, 264, dtype=torch.bool)), ("3-D", lambda: torch.zeros(1, 1, 264)),
                          ("wrong vocab", lambda: torch.zeros(1, 263)), ("wrong batch", lambda: torch.zeros(2, 264)),
                          ("meta", lambda: torch.zeros(1, 264, device="meta")),
                          ("leaf with grad", lambda: torch.zeros(1, 264, requires_grad=True)),
                          ("sparse", lambda: torch.zeros(1, 264).to_sparse())]:
        add("Sampler", f"logits {label}", lambda c, mk=logits: gm.Sampler()(mk(), c.batch()), gm.InvalidParameterError)
    add("Sampler", "batch None", lambda c: gm.Sampler()(torch.zeros(1, 264), None), gm.InvalidParameterError)
    add("Sampler", "bitmask int64", lambda c: gm.Sampler()(torch.zeros(1, 264), c.batch(), torch.zeros(1, 9, dtype=torch.int64)),
        gm.InvalidParameterError)
    draft = lambda: torch.tensor([34])  # noqa: E731
    full = lambda rows=2: torch.full((rows, 9), -1, dtype=torch.int32)  # noqa: E731
    reject = gm.rejection_sample
    for label, call in [
        ("logits list", lambda c: reject([[0.0] * 264] * 2, draft(), [1], full(), c.batch())),
        ("logits int", lambda c: reject(torch.zeros(2, 264, dtype=torch.int64), draft(), [1], full(), c.batch())),
        ("logits rows", lambda c: reject(torch.zeros(3, 264), draft(), [1], full(), c.batch())),
        ("logits vocab", lambda c: reject(torch.zeros(2, 263), draft(), [1], full(), c.batch())),
        ("logits meta", lambda c: reject(torch.zeros(2, 264, device="meta"), draft(), [1], full(), c.batch())),
        ("drafts list", lambda c: reject(torch.zeros(2, 264), [34], [1], full(), c.batch())),
        ("drafts float", lambda c: reject(torch.zeros(2, 264), torch.tensor([34.0]), [1], full(), c.batch())),
        ("draft past vocab", lambda c: reject(torch.zeros(2, 264), torch.tensor([264]), [1], full(), c.batch())),
        ("draft -1", lambda c: reject(torch.zeros(2, 264), torch.tensor([-1]), [1], full(), c.batch())),
        ("counts str", lambda c: reject(torch.zeros(2, 264), draft(), "1", full(), c.batch())),
        ("counts float", lambda c: reject(torch.zeros(2, 264), draft(), [1.0], full(), c.batch())),
        ("counts -1", lambda c: reject(torch.zeros(2, 264), draft(), [-1], full(), c.batch())),
        ("counts sum", lambda c: reject(torch.zeros(2, 264), draft(), [2], full(), c.batch())),
        ("bitmask int64", lambda c: reject(torch.zeros(2, 264), draft(), [1], full().long(), c.batch())),
        ("bitmask narrow", lambda c: reject(torch.zeros(2, 264), draft(), [1], full()[:, :8], c.batch())),
        ("bitmask rows", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(3), c.batch())),
        ("bitmask list", lambda c: reject(torch.zeros(2, 264), draft(), [1], [[-1] * 9] * 2, c.batch())),
        ("batch None", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(), None)),
        ("batch rows", lambda c: reject(torch.zeros(4, 264), torch.tensor([34, 34]), [1, 1], full(4), c.batch())),
        ("draft_probs int", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(), c.batch(),
                                             draft_probs=torch.zeros(1, 264, dtype=torch.int64))),
        ("draft_probs shape", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(), c.batch(), draft_probs=torch.zeros(2, 264))),
        ("generator str", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(), c.batch(), generator="seed")),
        ("impl 5", lambda c: reject(torch.zeros(2, 264), draft(), [1], full(), c.batch(), impl=5)),
    ]:
        add("rejection_sample", label, call, gm.InvalidParameterError)
    add("StopChecker", "params None", lambda c: gm.StopChecker(None, c.info), gm.InvalidParameterError)
    add("StopChecker", "tokenizer None", lambda c: gm.StopChecker(SP(), None), gm.InvalidParameterError)
    add("StopChecker", "eos str", lambda c: gm.StopChecker(SP(), c.info, eos_ids=["x"]), gm.InvalidParameterError)
    for label, token in [("str", "a"), ("float", 1.0), ("-5", -5), ("huge", HUGE), ("past vocab", 264)]:
        add("StopChecker", f"step {label}", lambda c, t=token: gm.StopChecker(SP(), c.info).step(t), gm.InvalidParameterError)
    add("register_processor", "name 5", lambda c: gm.register_processor(5), gm.InvalidParameterError)
    add("register_processor", "name empty", lambda c: gm.register_processor(""), gm.InvalidParameterError)
    add("register_processor", "duplicate", lambda c: gm.register_processor("no_repeat_ngram")(type("P", (), {"from_params": classmethod(lambda *a: None)})),
        gm.InvalidParameterError, r"no other logits processor")
    add("register_processor", "no from_params", lambda c: gm.register_processor("adversarial_plain")(type("Q", (), {})),
        gm.InvalidParameterError, r"from_params")

    # ---------------------------------------------------------------- tokenizers
    RAW = gm.VocabType.RAW
    for label, call in [
        ("pieces list", lambda c: gm.TokenizerInfo.from_pieces([b"a"], {}, vocab_type=RAW)),
        ("pieces str values", lambda c: gm.TokenizerInfo.from_pieces({0: "a"}, {1: "</s>"}, vocab_type=RAW, eos_ids=[1])),
        ("special bytes values", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: b"</s>"}, vocab_type=RAW, eos_ids=[1])),
        ("negative id", lambda c: gm.TokenizerInfo.from_pieces({-1: b"a", 0: b"b"}, {1: "</s>"}, vocab_type=RAW, eos_ids=[1])),
        ("huge id", lambda c: gm.TokenizerInfo.from_pieces({HUGE: b"a"}, {1: "</s>"}, vocab_type=RAW, eos_ids=[1])),
        ("empty", lambda c: gm.TokenizerInfo.from_pieces({}, {}, vocab_type=RAW)),
        ("vocab str", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: "</s>"}, vocab_type=RAW, vocab_size="x", eos_ids=[1])),
        ("vocab huge", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: "</s>"}, vocab_type=RAW, vocab_size=HUGE, eos_ids=[1])),
        ("eos str", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: "</s>"}, vocab_type=RAW, eos_ids=["x"])),
        ("eos past vocab", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: "</s>"}, vocab_type=RAW, eos_ids=[7])),
        ("no eos", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {}, vocab_type=RAW)),
        ("vocab_type", lambda c: gm.TokenizerInfo.from_pieces({0: b"a"}, {1: "</s>"}, vocab_type="utf-9", eos_ids=[1])),
        ("json int", lambda c: gm.TokenizerInfo.from_tokenizer_json(5)),
        ("json missing file", lambda c: gm.TokenizerInfo.from_tokenizer_json("/nonexistent/tokenizer.json")),
        ("json model int", lambda c: gm.TokenizerInfo.from_tokenizer_json({"model": 5})),
        ("json vocab ids str", lambda c: gm.TokenizerInfo.from_tokenizer_json({"model": {"vocab": {"a": "x"}}})),
        ("json added tokens junk", lambda c: gm.TokenizerInfo.from_tokenizer_json({"model": {"vocab": {"a": 0}}, "added_tokens": [5]})),
        ("huggingface None", lambda c: gm.TokenizerInfo.from_huggingface(None)),
        ("huggingface str", lambda c: gm.TokenizerInfo.from_huggingface("meta-llama/Llama-3.2-1B")),
        ("tiktoken missing", lambda c: gm.TokenizerInfo.from_tiktoken("/nonexistent.tiktoken", {})),
        ("decode None", lambda c: c.info.decode(None)),
        ("decode str ids", lambda c: c.info.decode(["a"])),
        ("decode -1", lambda c: c.info.decode([-1])),
        ("decode past vocab", lambda c: c.info.decode([HUGE])),
        ("token_id 5", lambda c: c.info.token_id(5)),
        ("is_special str", lambda c: c.info.is_special("a")),
        ("is_special -1", lambda c: c.info.is_special(-1)),
    ]:
        add("TokenizerInfo", label, call)

    # ---------------------------------------------------------------- generation
    generate, batch = gm.generate_json, gm.generate_json_batch
    for label, call in [
        ("schema 5", lambda c: generate(5, c.model, c.tok)),
        ("schema set", lambda c: generate({1}, c.model, c.tok)),
        ("schema missing file", lambda c: generate("/nonexistent/schema.json", c.model, c.tok)),
        ("schema directory", lambda c: generate("/", c.model, c.tok)),
        ("schema nan", lambda c: generate({"maximum": NAN}, c.model, c.tok, max_new_tokens=4)),
        ("model None", lambda c: generate({"type": "string"}, None, c.tok)),
        ("model returns str", lambda c: generate({"type": "string"}, lambda ids, past: ("logits", past), c.tok, max_new_tokens=4)),
        ("model returns ints", lambda c: generate({"type": "string"}, lambda ids, past: (torch.zeros(1, 264, dtype=torch.int64), past),
                                                  c.tok, max_new_tokens=4)),
        ("tokenizer None", lambda c: generate({"type": "string"}, c.model, None)),
        ("tokenizer object", lambda c: generate({"type": "string"}, c.model, object())),
        ("tokenizer encodes to str", lambda c: generate({"type": "string"}, c.model, SimpleNamespace(encode=lambda t, **k: "ids"))),
        ("tokenizer encodes to floats", lambda c: generate({"type": "string"}, c.model, SimpleNamespace(encode=lambda t, **k: [1.5]))),
        ("prompt 5", lambda c: generate({"type": "string"}, c.model, c.tok, prompt=5)),
        ("sampling dict", lambda c: generate({"type": "string"}, c.model, c.tok, sampling={"temperature": 0})),
        ("backend unknown", lambda c: generate({"type": "string"}, c.model, c.tok, backend="fast", max_new_tokens=4)),
        ("max_new_tokens 0", lambda c: generate({"type": "string"}, c.model, c.tok, max_new_tokens=0)),
        ("max_new_tokens nan", lambda c: generate({"type": "string"}, c.model, c.tok, max_new_tokens=NAN)),
        ("max_new_tokens str", lambda c: generate({"type": "string"}, c.model, c.tok, max_new_tokens="8")),
        ("strict str", lambda c: generate({"type": "string"}, c.model, c.tok, strict="yes")),
        ("compiler str", lambda c: generate({"type": "string"}, c.model, c.tok, compiler="auto")),
        ("remote $ref", lambda c: generate({"$ref": "http://127.0.0.1:9/s.json"}, c.model, c.tok, max_new_tokens=4)),
    ]:
        add("generate_json", label, call)
    for label, call in [
        ("schemas 5", lambda c: batch(5, c.model, c.tok)),
        ("schemas dict", lambda c: batch({"type": "string"}, c.model, c.tok)),
        ("prompts count", lambda c: batch([{"type": "string"}], c.model, c.tok, prompts=["a", "b"])),
        ("prompts str", lambda c: batch([{"type": "string"}], c.model, c.tok, prompts="a")),
        ("sampling count", lambda c: batch([{"type": "string"}], c.model, c.tok, sampling=[SP(), SP()])),
    ]:
        add("generate_json_batch", label, call)
    structured = gm.generate_structured
    for label, call in [
        ("spec dict", lambda c: structured({"type": "string"}, c.model, c.tok)),
        ("spec str", lambda c: structured("a+", c.model, c.tok)),
        ("model None", lambda c: structured(gm.Regex("a+"), None, c.tok)),
        ("tokenizer None", lambda c: structured(gm.Regex("a+"), c.model, None)),
        ("prompt 5", lambda c: structured(gm.Regex("a+"), c.model, c.tok, prompt=5)),
        ("max_new_tokens 0", lambda c: structured(gm.Regex("a+"), c.model, c.tok, max_new_tokens=0)),
        ("strict str", lambda c: structured(gm.Regex("a+"), c.model, c.tok, strict="yes")),
        ("jump_forward str", lambda c: structured(gm.Regex("a+"), c.model, c.tok, jump_forward="no")),
        ("progress int", lambda c: structured(gm.Regex("a+"), c.model, c.tok, progress=5)),
        ("regex syntax", lambda c: structured(gm.Regex("a("), c.model, c.tok, max_new_tokens=4)),
    ]:
        add("generate_structured", label, call)

    # ---------------------------------------------------------------- transformers' logits processor
    processor = gm.GrammaskLogitsProcessor
    ids = lambda: torch.zeros(1, 3, dtype=torch.int64)  # noqa: E731
    for label, call in [
        ("grammars None", lambda c: processor(None)),
        ("grammars empty", lambda c: processor([])),
        ("grammars str", lambda c: processor("json")),
        ("grammar spec", lambda c: processor([gm.JsonSchema({})])),
        ("grammars of two vocabularies", lambda c: processor([c.grammar, c.other_vocabulary])),
        ("max_new_tokens 0", lambda c: processor(c.grammar, max_new_tokens=0)),
        ("max_new_tokens str", lambda c: processor(c.grammar, max_new_tokens="8")),
        ("num_beams 0", lambda c: processor(c.grammar, num_beams=0)),
        ("num_beams float", lambda c: processor(c.grammar, num_beams=2.0)),
        ("input_ids list", lambda c: processor(c.grammar)([[1, 2]], torch.zeros(1, 264))),
        ("input_ids float", lambda c: processor(c.grammar)(torch.zeros(1, 3), torch.zeros(1, 264))),
        ("scores list", lambda c: processor(c.grammar)(ids(), [[0.0] * 264])),
        ("scores int", lambda c: processor(c.grammar)(ids(), torch.zeros(1, 264, dtype=torch.int64))),
        ("scores rows", lambda c: processor(c.grammar)(ids(), torch.zeros(2, 264))),
        ("rows per prompt", lambda c: processor([c.grammar, c.grammar])(torch.zeros(3, 2, dtype=torch.int64), torch.zeros(3, 264))),
    ]:
        add("GrammaskLogitsProcessor", label, call, gm.InvalidParameterError)
    return out


CASES = cases()
NO_INPUT = {
    # errors, enums and results: nothing to feed them
    "CompileLimitError", "GrammaskError", "InvalidGrammarError", "InvalidOutputError", "InvalidParameterError",
    "InvalidRegexError", "InvalidSchemaError", "TokenizerError", "UnsupportedFeatureError", "FinishReason",
    "NumberForm", "PropertyOrder", "VocabType", "Whitespace", "GenerationResult", "GenerationTimings", "SamplerOutput", "Unenforced",
    "NO_TOKEN", "TOOL_CALL_FORMATS",
}


def test_every_public_name_is_walked():
    walked = {case.api for case in CASES}
    missing = set(gm.__all__) - walked - NO_INPUT
    assert not missing, f"public names without adversarial cases: {sorted(missing)}"


@pytest.fixture(scope="module")
def ctx(tiny_info):
    pieces = {b: bytes([b]) for b in range(256)}
    info = gm.TokenizerInfo.from_pieces(pieces, {256: "</s>"}, vocab_type=gm.VocabType.RAW, vocab_size=264, eos_ids=[256])
    compiler = gm.GrammarCompiler(info, backend="fsm")
    grammars = {
        "fsm": compiler.compile(gm.JsonSchema({"type": "string"})),
        "xgrammar": gm.GrammarCompiler(info, backend="xgrammar").compile(gm.JsonSchema({"type": "string"})),
    }
    return SimpleNamespace(
        info=info,
        compiler=compiler,
        grammar=grammars["fsm"],
        xgrammar=grammars["xgrammar"],
        matchers={name: grammar.matcher for name, grammar in grammars.items()},
        other_vocabulary=gm.GrammarCompiler(tiny_info, backend="fsm").compile(gm.Regex("a")),
        batch=lambda: gm.SamplingBatch.build([SP(frequency_penalty=0.5)], vocab_size=264),
        model=lambda ids, past: (torch.zeros(ids.shape[0], ids.shape[1], 264), past),
        tok=SimpleNamespace(encode=lambda text, **kwargs: list(text.encode("utf-8"))[:8]),
    )


@pytest.mark.parametrize("case", CASES, ids=[f"{c.api}: {c.label}" for c in CASES])
def test_malformed_input_gets_a_named_grammask_error(ctx, case):
    with pytest.raises(gm.GrammaskError) as caught:
        case.call(ctx)
    assert isinstance(caught.value, case.error), repr(caught.value)
    assert re.search(case.match, str(caught.value)), str(caught.value)


def test_a_stop_regex_that_backtracks_is_named_instead_of_stalling_the_request(ctx):
    """A JSONSchemaBench pattern (a suffix added) that backtracks for seconds on a hex string."""
    pattern = r"^(?:(?:[A-Za-z0-9]+[-]?)+[A-Za-z0-9]/)?[A-Za-z0-9_-]+[.!]$"  # never matches this output
    checker = gm.StopChecker(SP(stop_regex=[pattern]), ctx.info)
    with pytest.raises(gm.InvalidParameterError, match=r"invalid stop_regex=.*: expected a pattern that decides within 1 s"):
        for byte in b"18546f6171f67e29d1cb983322ad1329" * 2:
            checker.step(byte)


def test_device_checks_read_cuda_as_the_current_cuda_device():
    """A batch built on "cuda" serves logits on "cuda:0" (torch.device("cuda") != torch.device("cuda:0"))."""
    from grammask.checks import same_device

    if torch.cuda.is_available():
        torch.cuda.set_device(0)
    assert same_device(torch.device("cuda"), torch.device("cuda:0"))
    assert not same_device(torch.device("cuda:1"), torch.device("cuda:0"))
    assert not same_device(torch.device("cpu"), torch.device("cuda"))
