"""``grammask demo``: what grammask does, on the real Llama-3.2 tokenizer, on a CPU, in a minute or two.

Part 1 compiles the bundled example schemas, walks each example instance token by token through its
matcher (allowed-token count and mask time per token), shows a wrong token being rejected and why,
and prints what each grammar enforces and what it does not. Part 2 generates JSON for the same
schemas with a small *randomly initialised* Llama-architecture model (or a real one: ``--model``).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from typing import Any, Iterable

import jsonschema

from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info
from grammask.grammars.base import CompiledGrammar
from grammask.grammars.compiler import GrammarCompiler
from grammask.grammars.fallback import FallbackMatcher
from grammask.grammars.spec import JsonSchema
from grammask.masking.bitmask import allocate_token_bitmask, bitmask_to_bool
from grammask.schemas.bundled import example_schema, example_schema_names
from grammask.validation import output_validator
from grammask.tokenizer import TokenizerInfo

HELP = "show constrained decoding on the bundled example schemas (tokenizer walk, then generation)"
DEFAULT_MAX_NEW_TOKENS = 160
RANDOM_MODEL_SIZE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a Hugging Face model id or path to generate with (default: a random tiny Llama)")
    parser.add_argument("--backend", default="auto", help="auto (default), fsm or xgrammar")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-generation", action="store_true", help="only part 1 (no model)")


def run(args: argparse.Namespace) -> int:
    info = llama32_tokenizer_info()
    tokenizer = llama32_hf_tokenizer()
    compiler = GrammarCompiler(info, backend=args.backend)
    print(f"Tokenizer: Llama-3.2 from its PyPI package ({info.vocab_size} logits, EOS ids {list(info.eos_ids)})\n")
    print("== Part 1: the grammar, token by token ==")
    for name in progress(example_schema_names(), "compiling"):
        compiler.compile(JsonSchema(example_schema(name)))
    for name in example_schema_names():
        walk_example(name, compiler.compile(JsonSchema(example_schema(name))), info, tokenizer)
    if args.skip_generation:
        return 0
    print("\n== Part 2: generation ==")
    generate_part(args, compiler, tokenizer)
    return 0


# ---------------------------------------------------------------------------------------------- part 1


def walk_example(name: str, grammar: CompiledGrammar, info: TokenizerInfo, tokenizer: Any) -> None:
    schema = example_schema(name)
    instance = schema["examples"][0]
    print(f"\n-- {name}: backend '{grammar.backend}' ({grammar.choice}); compiled in {grammar.compile_seconds:.2f} s")
    text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
    ids = tokenizer.encode(text, add_special_tokens=False) + [info.eos_ids[0]]
    matcher = grammar.matcher()
    bitmask = allocate_token_bitmask(1, info.vocab_size)
    times = []
    print(f"   valid instance {text}")
    print("   step  token                allowed   mask µs")
    for step, token in enumerate(ids):
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask, 0)
        times.append((time.perf_counter() - start) * 1e6)
        allowed = bitmask_to_bool(bitmask, info.vocab_size)[0]
        shown = _token_text(info, token)
        ok = bool(allowed[token]) and matcher.accept_token(token)
        if step < 6 or step >= len(ids) - 2 or not ok:
            print(f"   {step:4d}  {shown:<20} {int(allowed.sum()):>7}   {times[-1]:7.1f}" + ("" if ok else "  REJECTED"))
        if step == 6 and len(ids) > 8:
            print("   ...")
        if not ok:
            break
    if isinstance(matcher, FallbackMatcher) and matcher.fell_back:
        print(f"   the fsm automaton reached a limit on the way: {matcher.fell_back}")
        grammar = matcher.grammar
    if not matcher.is_terminated():
        print("   the grammar rejected this valid instance (see 'narrowed' below)")
    print(f"   {len(ids)} tokens, ended terminated={matcher.is_terminated()}; mask fill median "
          f"{statistics.median(times):.1f} µs, max {max(times):.0f} µs (first visits build rows)")
    show_rejection(schema, instance, grammar, info, tokenizer)
    show_enforcement(grammar)


def show_rejection(schema: dict, instance: Any, grammar: CompiledGrammar, info: TokenizerInfo, tokenizer: Any) -> None:
    bad = _break_instance(instance)
    if bad is None:
        return
    text = json.dumps(bad, separators=(",", ":"), ensure_ascii=False)
    error = jsonschema.exceptions.best_match(output_validator(schema).iter_errors(bad))
    matcher = grammar.matcher()
    ids = tokenizer.encode(text, add_special_tokens=False) + [info.eos_ids[0]]
    accepted = matcher.accept_tokens(ids)
    prefix = b"".join(info.token_bytes[t] for t in ids[:accepted]).decode("utf-8", "replace")
    where = "/".join(map(str, error.absolute_path)) if error else "?"
    if accepted < len(ids):
        print(f"   invalid instance {text}")
        print(f"   rejected token {_token_text(info, ids[accepted])!r} after {prefix!r}")
        print(f"   why: at '/{where}': {error.message if error else 'not in the grammar'}")
    else:  # the grammar let it through: an unenforced keyword
        print(f"   invalid instance {text} is NOT rejected by the grammar (see unenforced); jsonschema says: "
              f"{error.message if error else '?'}")


def _break_instance(instance: Any) -> Any:
    """A copy of ``instance`` with its first string property turned into a number (a type error)."""
    if not isinstance(instance, dict):
        return None
    bad = copy.deepcopy(instance)
    for key, value in bad.items():
        if isinstance(value, str) and key != "tool":
            bad[key] = 42
            return bad
    return None


def show_enforcement(grammar: CompiledGrammar) -> None:
    if grammar.unenforced:
        for item in grammar.unenforced:
            print(f"   NOT enforced (checked after generation): {item}")
    else:
        print("   every keyword is enforced by the grammar")
    for item in grammar.narrowed:
        print(f"   narrowed (the grammar is stricter than the schema): {item}")


def _token_text(info: TokenizerInfo, token: int) -> str:
    if info.is_special(token):
        return f"<special {token}>"
    return repr(info.token_bytes[token].decode("utf-8", "replace"))


# ---------------------------------------------------------------------------------------------- part 2


def generate_part(args: argparse.Namespace, compiler: GrammarCompiler, tokenizer: Any) -> None:
    from grammask.generate import generate_json

    if args.model:
        model, tokenizer, compiler = load_model(args.model, args.backend)
        print(f"Model: {args.model}")
    else:
        model = random_llama(args.seed)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"Model: a RANDOMLY INITIALISED Llama-architecture model ({params:.0f}M parameters, seed {args.seed}).\n"
              "Its weights are random, so the content is gibberish; the point is that the output always follows\n"
              "the schema. Pass a real model with:  grammask demo --model meta-llama/Llama-3.2-1B-Instruct")
    for name in progress(example_schema_names(), "generating"):
        result = generate_json(example_schema(name), model, tokenizer, max_new_tokens=args.max_new_tokens,
                               compiler=compiler)
        t = result.timings
        print(f"\n-- {name}: backend '{result.backend}', {len(result.token_ids)} tokens, finish '{result.finish_reason}'")
        print(f"   {result.text}")
        verdict = "valid (jsonschema, formats checked)" if result.valid else "INVALID: " + "; ".join(result.errors)
        print(f"   {verdict}")
        print(f"   mask {t.mask_us_per_token:.0f} µs/token (median), step {t.total_ms_per_token:.1f} ms/token, "
              f"prefill {t.prefill_ms:.0f} ms, compile {t.compile_ms:.0f} ms; budget-aware closing: "
              f"{'yes' if result.budget_aware else 'no'}")
        if "moved from 'fsm'" in result.choice:
            print(f"   note: {result.choice}")


def random_llama(seed: int) -> Any:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        raise ImportError(f"the generation demo needs transformers ({exc}): pip install transformers") from None
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=4096, bos_token_id=128000, eos_token_id=128001,
                         **RANDOM_MODEL_SIZE)
    return LlamaForCausalLM(config).eval()


def load_model(name: str, backend: str) -> tuple[Any, Any, GrammarCompiler]:
    """A real model, its tokenizer and a compiler for its logits width."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ImportError(f"--model needs transformers ({exc}): pip install transformers") from None
    from grammask.errors import GrammaskError

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name).eval()
    except (OSError, ValueError) as exc:
        raise GrammaskError(f"cannot load model {name!r}: {str(exc).splitlines()[0]}") from None
    info = TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
    return model, tokenizer, GrammarCompiler(info, backend=backend)


def progress(items: Iterable, desc: str) -> Iterable:
    """A tqdm progress bar when tqdm is installed (on stderr), else the items as they are."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, leave=False)
