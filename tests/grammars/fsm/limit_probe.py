"""Run with ``python -m tests.grammars.fsm.limit_probe CASE...``: compile each case's spec on the
fsm backend with the case's limits, in this fresh process, and print one JSON line per case:
the limit named by the ``CompileLimitError`` (``null`` when it compiled), the wall seconds of the
compile and the peak of the memory it allocated (``tracemalloc``, bytes).

Issue #12's reproducers: each ran past its limits (minutes, gigabytes) or crashed with a
``RecursionError`` before the limits were enforced while expressions are built.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import tracemalloc

from grammask import CompileLimitError, GrammarCompiler, JsonSchema, Regex
from grammask.tokenizer import TokenizerInfo, VocabType

MIB = 1 << 20
ENUM = [f"value-{i:05d}-" + "x" * (i % 17) for i in range(50_000)]
DEEP = json.loads('{"type":"array","items":' * 500 + "{}" + "}" * 500)

CASES = {
    # name: (spec, fsm backend options)
    "enum_past_compile_seconds": (lambda: JsonSchema({"enum": ENUM}), {"compile_seconds": 4, "max_expression_bytes": 256 * MIB}),
    "enum_past_expression_bytes": (lambda: JsonSchema({"enum": ENUM}), {"compile_seconds": 600, "max_expression_bytes": 32 * MIB}),
    "nested_counts": (lambda: Regex("(((a{100}){100}){100}){100}"), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    "nested_large_counts": (lambda: Regex("((a{9999}){9999})"), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    "min_items": (lambda: JsonSchema({"type": "array", "minItems": 100_000}), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    "deep_schema": (lambda: JsonSchema(DEEP), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    "deep_regex": (lambda: Regex("(" * 5000 + "a" + ")" * 5000), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    "large_count": (lambda: Regex("a{10001}"), {"compile_seconds": 2, "max_expression_bytes": 32 * MIB}),
    # A named property tested against a pattern by a backtracking search: about a minute here
    # (2^n in the name's length), past any deadline, since the search never looked at one.
    "backtracking_pattern_names": (
        lambda: JsonSchema({"type": "object", "properties": {"a" * 40 + "!": {}}, "patternProperties": {"^(a|aa)+$": {"type": "integer"}}}),
        {"compile_seconds": 2, "max_expression_bytes": 32 * MIB},
    ),
}


def tiny_tokenizer() -> TokenizerInfo:
    pieces = {b: bytes([b]) for b in range(256)}
    return TokenizerInfo.from_pieces(pieces, {256: "</s>"}, vocab_type=VocabType.RAW, vocab_size=264, eos_ids=[256])


def probe(name: str, info: TokenizerInfo) -> dict:
    make_spec, options = CASES[name]
    compiler = GrammarCompiler(info, backend="fsm", backend_options={"fsm": options})
    compiler.compile(JsonSchema({"type": "integer"}))  # per-process tables and the meta-validator, outside the figures
    spec = make_spec()
    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    limit = None
    try:
        compiler.compile(spec)
    except CompileLimitError as exc:
        limit = exc.limit
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"case": name, "limit": limit, "seconds": seconds, "peak_bytes": peak, "options": options}


def main(names: list[str]) -> None:
    info = tiny_tokenizer()
    for name in names:
        print(json.dumps(probe(name, info)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
