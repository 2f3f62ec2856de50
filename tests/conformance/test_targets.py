"""A target's "declared" view writes instances in that target's own documented key order."""

from __future__ import annotations

from grammask.conformance.targets import WorkerContext

# The document ranks a before b (root properties come first); the nested object declares b, a.
SCHEMA = {
    "$defs": {"pair": {"type": "object", "properties": {"b": {}, "a": {}}}},
    "type": "object",
    "properties": {"a": {}, "b": {}, "x": {"$ref": "#/$defs/pair"}},
}


def test_fsm_declared_view_uses_the_global_ranking():
    targets = WorkerContext()
    result = targets.run("grammask:fsm", SCHEMA, [{"x": {"b": 1, "a": 2}}], format_asserted=False)
    assert result["backend"] == "fsm"
    assert result["verdicts"]["given"] == [False]  # the fsm ranks a before b everywhere
    assert result["verdicts"]["declared"] == [True]  # written in that order, it is accepted
    xgrammar = targets.run("grammask:xgrammar", SCHEMA, [{"x": {"b": 1, "a": 2}}], format_asserted=False)
    assert xgrammar["verdicts"]["given"] == [True]  # xgrammar follows each object's own order


def test_grammask_targets_follow_the_corpus_format_rule():
    targets = WorkerContext()
    schema = {"type": "string", "format": "date"}
    for backend in ("fsm", "xgrammar"):
        asserted = targets.run(f"grammask:{backend}", schema, ["2026-02-30", "2026-02-28"], format_asserted=True)
        annotation = targets.run(f"grammask:{backend}", schema, ["2026-02-30", "2026-02-28"], format_asserted=False)
        assert annotation["verdicts"]["given"] == [True, True], backend
        assert asserted["verdicts"]["given"][1] is True, backend
        if backend == "fsm":  # exact dates; xgrammar's date grammar does not know month lengths
            assert asserted["verdicts"]["given"][0] is False


def test_a_walk_that_moved_to_the_fallback_reports_that_grammar_s_gaps(llama_info):
    from grammask.grammars.compiler import GrammarCompiler

    targets = WorkerContext()
    targets._compilers["auto"] = GrammarCompiler(llama_info, backend_options={"fsm": {"max_states": 30}})
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "not": {"required": ["b"]}}
    result = targets.run("grammask:auto", schema, [{"a": "a long enough value"}, {"a": "x", "b": 1}], format_asserted=True)
    assert result["backend"] == "fsm" and "max_states" in result["moved"]
    assert result["verdicts"]["given"] == [True, True]  # xgrammar ignores "not" ...
    assert "not" in result["unenforced_keywords"]  # ... and says so: not an exact grammar's false accept
