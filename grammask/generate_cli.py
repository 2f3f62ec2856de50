"""``grammask generate``: generate one JSON value for a schema file with a Hugging Face model."""

from __future__ import annotations

import argparse
import json
import sys

from grammask.errors import InvalidParameterError

HELP = "generate JSON that follows a schema file with a Hugging Face model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schema", required=True, help="path to a JSON Schema file")
    parser.add_argument("--model", required=True, help="a Hugging Face model id or local path")
    parser.add_argument("--prompt", help="the prompt (default: an instruction quoting the schema)")
    parser.add_argument("--backend", default="auto", help="auto (default), fsm or xgrammar")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--strict", action="store_true", help="exit with an error when the output is not valid")


def run(args: argparse.Namespace) -> int:
    from grammask.demo import load_model
    from grammask.generate import generate_json, load_schema
    from grammask.sampler import SamplingParams

    schema, _ = load_schema(args.schema)  # fail on a bad file before loading a model
    if args.max_new_tokens < 1:
        raise InvalidParameterError("--max-new-tokens", args.max_new_tokens, "an int >= 1")
    model, tokenizer, compiler = load_model(args.model, args.backend)
    sampling = SamplingParams(temperature=args.temperature, seed=args.seed)
    result = generate_json(schema, model, tokenizer, prompt=args.prompt, sampling=sampling,
                           max_new_tokens=args.max_new_tokens, compiler=compiler, strict=args.strict)
    print(result.text)
    t = result.timings
    status = "valid" if result.valid else "INVALID: " + "; ".join(result.errors)
    print(json.dumps({"valid": result.valid, "finish_reason": result.finish_reason, "backend": result.backend,
                      "tokens": len(result.token_ids), "mask_us_per_token": round(t.mask_us_per_token, 1),
                      "ms_per_token": round(t.total_ms_per_token, 2),
                      "unenforced": [str(u) for u in result.unenforced]}), file=sys.stderr)
    if not result.valid:
        print(f"grammask generate: {status}", file=sys.stderr)
        return 1
    return 0

