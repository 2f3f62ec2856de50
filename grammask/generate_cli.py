"""``grammask generate``: generate one output that follows a spec, with a Hugging Face model.

Checks run in order of cost, so a mistake is reported before the model's weights load: names and
numbers first, then the spec's file or text, then (with the tokenizer and the model's config only)
the compile and the token budget. Progress goes to stderr; the output alone goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from grammask.cli_types import non_negative_float, positive_int
from grammask.errors import InvalidParameterError
from grammask.grammars.registry import backend_names, check_backend_name
from grammask.schemas.load import load_schema

if TYPE_CHECKING:
    from grammask.grammars.spec import Spec

HELP = "generate text that follows a JSON Schema, a regex, an EBNF grammar or a structural tag, with a Hugging Face model"
DEFAULT_MAX_NEW_TOKENS = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    structure = parser.add_argument_group("the structure (give exactly one)")
    spec = structure.add_mutually_exclusive_group(required=True)
    spec.add_argument("--schema", metavar="FILE|JSON", help="a JSON Schema: a .json file, or the schema as JSON text")
    spec.add_argument("--regex", metavar="PATTERN", help="a regex the whole output must match (ECMA-262 syntax)")
    spec.add_argument("--ebnf", metavar="FILE|GRAMMAR",
                      help="an EBNF grammar in GBNF style ('root ::= ...'): a file, or the grammar text")
    spec.add_argument("--structural-tag", metavar="FILE|JSON",
                      help='free text with tagged JSON segments: a file or JSON text {"structures": [{"begin": ..., '
                           '"schema": {...}, "end": ...}], "triggers": [...]}')
    parser.add_argument("--model", required=True, metavar="NAME|DIR", help="a Hugging Face model id or a local model folder")
    parser.add_argument("--prompt", metavar="TEXT", help="the prompt (default: an instruction that quotes the structure)")
    parser.add_argument("--backend", default="auto", metavar="NAME",
                        help=f"the grammar backend: {', '.join(backend_names())} (default: auto)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N",
                        help=f"the token budget, EOS included (default {DEFAULT_MAX_NEW_TOKENS}); the fsm backend "
                             "closes the output within it")
    parser.add_argument("--temperature", type=non_negative_float, default=0.0, metavar="T", help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, default=None, metavar="N", help="sampling seed: the same seed gives the same output")
    parser.add_argument("--strict", action="store_true", help="exit with an error when the output is not valid")
    parser.add_argument("--no-progress", action="store_true", help="print no progress on stderr")


def run(args: argparse.Namespace) -> int:
    check_backend_name(args.backend)
    spec = read_spec(args)
    progress = Progress(sys.stderr, args.max_new_tokens, enabled=not args.no_progress)

    from grammask.generate import budget_matcher, generate_structured
    from grammask.grammars.compiler import GrammarCompiler
    from grammask.integrations.transformers import load_pretrained_model, load_pretrained_tokenizer
    from grammask.sampler.params import SamplingParams
    from grammask.tokenizer import TokenizerInfo

    sampling = SamplingParams(temperature=args.temperature, seed=args.seed)
    progress.note(f"loading the tokenizer of {args.model}")
    tokenizer, vocab_size = load_pretrained_tokenizer(args.model)
    compiler = GrammarCompiler(TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size), backend=args.backend)
    grammar = compiler.compile(spec)
    budget_matcher(grammar, args.max_new_tokens)  # a budget too small for any valid output fails here
    progress.note(f"compiled with backend '{grammar.backend}'; loading the model")
    model = load_pretrained_model(args.model)
    try:
        result = generate_structured(spec, model, tokenizer, prompt=args.prompt, sampling=sampling,
                                     max_new_tokens=args.max_new_tokens, compiler=compiler, strict=args.strict,
                                     progress=progress.step)
    finally:
        progress.close()
    print(result.text)
    t = result.timings
    print(json.dumps({"valid": result.valid, "finish_reason": result.finish_reason, "backend": result.backend,
                      "tokens": len(result.token_ids), "mask_us_per_token": round(t.mask_us_per_token, 1),
                      "ms_per_token": round(t.total_ms_per_token, 2),
                      "unenforced": [str(u) for u in result.unenforced]}), file=sys.stderr)
    if not result.valid:
        print("grammask generate: INVALID: " + "; ".join(result.errors), file=sys.stderr)
        return 1
    return 0


def read_spec(args: argparse.Namespace) -> Spec:
    """The spec of whichever structure option was given, read and parsed (no compile yet)."""
    from grammask.grammars.spec import Ebnf, JsonSchema, Regex, StructuralTag

    if args.schema is not None:
        schema, _ = load_schema(args.schema)
        return JsonSchema(schema)
    if args.regex is not None:
        return Regex(args.regex)
    if args.ebnf is not None:
        return Ebnf(_text_or_file("ebnf", args.ebnf, looks_inline="::=" in args.ebnf))
    value = args.structural_tag
    inline = value.lstrip().startswith("{")
    text = _text_or_file("structural_tag", value, looks_inline=inline)
    try:
        plain = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidParameterError("structural_tag", "<the text>" if inline else value, f"JSON ({exc.msg} at {where})") from None
    return StructuralTag.from_dict(plain)


def _text_or_file(field: str, value: str, *, looks_inline: bool) -> str:
    if looks_inline:
        return value
    path = Path(value)
    if not path.is_file():
        what = "a directory" if path.is_dir() else "no such file"
        raise InvalidParameterError(field, value, f"the text itself or the path of a file ({what})")
    return path.read_text(encoding="utf-8")


class Progress:
    """Progress on ``stream``: notes as lines, and while generating, a token count rewritten in place
    on a terminal (nothing when ``stream`` is not a terminal, so logs hold no carriage returns)."""

    def __init__(self, stream: TextIO, total: int, *, enabled: bool = True) -> None:
        self.stream, self.total, self.enabled = stream, total, enabled
        self.live = enabled and stream.isatty()
        self._drawn = False

    def note(self, text: str) -> None:
        if self.enabled:
            print(f"grammask generate: {text}", file=self.stream, flush=True)

    def step(self, tokens: int) -> None:
        if self.live:
            self.stream.write(f"\rgenerating: {tokens}/{self.total} tokens")
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")  # erase the line, so the output starts clean
            self.stream.flush()
            self._drawn = False
