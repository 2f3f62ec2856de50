"""``grammask demo``: what grammask does, on the real Llama-3.2 tokenizer, on a CPU, in a minute or two.

Part 1 compiles the bundled example schemas, walks each example instance token by token through its
matcher (allowed-token count and mask time per token), walks it again to show the warm figure, shows
a wrong token being rejected and why, and prints what each grammar enforces and what it does not.
Part 2 generates JSON for the same schemas with a small *randomly initialised* Llama-architecture
model (or a real one: ``--model``).

Mask times come in two kinds, labelled wherever they are printed: **cold**, a state's first visit
(the ``fsm`` backend computes the state's allowed-token row then), and **warm**, a state visited
before (a copy of the cached row). The README's Speed section reports both.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import grammask as gm
from grammask.cli_types import positive_int
from grammask.grammars.registry import backend_names, check_backend_name
from grammask.schemas.bundled import example_schema, example_schema_names

HELP = "show constrained decoding on the bundled example schemas (tokenizer walk, then generation)"
DEFAULT_MAX_NEW_TOKENS = 160
RANDOM_MODEL_SIZE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2)
COLD_WARM = ("mask times: cold = a state's first visit (its allowed-token row is computed), "
             "warm = a state visited before (a copy of the cached row); the README's Speed section reports both")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="NAME|DIR",
                        help="a Hugging Face model id or local folder to generate with (default: a random tiny Llama)")
    parser.add_argument("--backend", default="auto", metavar="NAME",
                        help=f"the grammar backend: {', '.join(backend_names())} (default: auto)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N",
                        help=f"the token budget of each generation (default {DEFAULT_MAX_NEW_TOKENS})")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the random model's weights (default 0)")
    parser.add_argument("--skip-generation", action="store_true", help="only part 1 (no model)")


def run(args: argparse.Namespace) -> int:
    check_backend_name(args.backend)
    from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info

    info = llama32_tokenizer_info()
    tokenizer = llama32_hf_tokenizer()
    compiler = gm.GrammarCompiler(info, backend=args.backend)
    print(f"Tokenizer: Llama-3.2 from its PyPI package ({info.vocab_size} logits, EOS ids {list(info.eos_ids)})")
    print(f"({COLD_WARM})\n")
    print("== Part 1: the grammar, token by token ==")
    for name in example_schema_names():
        walk_example(name, compiler.compile(gm.JsonSchema(example_schema(name))), info, tokenizer)
    if args.skip_generation:
        return 0
    print("\n== Part 2: generation ==")
    generate_part(args, compiler, tokenizer)
    return 0


# ---------------------------------------------------------------------------------------------- part 1


def walk_example(name: str, grammar: gm.CompiledGrammar, info: gm.TokenizerInfo, tokenizer: Any) -> None:
    from grammask.grammars.fallback import FallbackMatcher

    schema = example_schema(name)
    instance = schema["examples"][0]
    print(f"\n-- {name}: backend '{grammar.backend}' ({grammar.choice}); compiled in {grammar.compile_seconds:.2f} s")
    text = grammar.spec.serialize(instance)  # numbers in the canonical form the grammar writes (950.0 as 950)
    ids = tokenizer.encode(text, add_special_tokens=False) + [info.eos_ids[0]]
    print(f"   valid instance {text}")
    print("   step  token                allowed   cold µs")
    matcher, cold = _walk(grammar, ids, info, show=True)
    if isinstance(matcher, FallbackMatcher) and matcher.fell_back:
        print(f"   the fsm automaton reached a limit on the way: {matcher.fell_back}")
        grammar = matcher.grammar
    if not matcher.is_terminated():
        print("   the grammar rejected this valid instance (see 'narrowed' below)")
    _, warm = _walk(grammar, ids, info, show=False)
    print(f"   {len(ids)} tokens, ended terminated={matcher.is_terminated()}; mask fill per token: "
          f"cold median {statistics.median(cold):.1f} µs (max {max(cold):.0f} µs), "
          f"warm median {statistics.median(warm):.1f} µs (max {max(warm):.0f} µs)")
    show_rejection(schema, instance, grammar, info, tokenizer)
    show_enforcement(grammar)


def _walk(grammar: gm.CompiledGrammar, ids: list[int], info: gm.TokenizerInfo, *, show: bool) -> tuple[gm.Matcher, list[float]]:
    """Walk ``ids`` through a fresh matcher, timing each mask fill (µs); print the steps if ``show``."""
    matcher = grammar.matcher()
    bitmask = gm.allocate_token_bitmask(1, info.vocab_size)
    times = []
    for step, token in enumerate(ids):
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask, 0)
        times.append((time.perf_counter() - start) * 1e6)
        allowed = gm.bitmask_to_bool(bitmask, info.vocab_size)[0]
        ok = bool(allowed[token]) and matcher.accept_token(token)
        if show and (step < 6 or step >= len(ids) - 2 or not ok):
            shown = _token_text(info, token)
            print(f"   {step:4d}  {shown:<20} {int(allowed.sum()):>7}   {times[-1]:7.1f}" + ("" if ok else "  REJECTED"))
        if show and step == 6 and len(ids) > 8:
            print("   ...")
        if not ok:
            break
    return matcher, times


def show_rejection(schema: dict, instance: Any, grammar: gm.CompiledGrammar, info: gm.TokenizerInfo, tokenizer: Any) -> None:
    import jsonschema

    from grammask.validation import output_validator

    bad = _break_instance(instance)
    if bad is None:
        return
    text = grammar.spec.serialize(bad)
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


def show_enforcement(grammar: gm.CompiledGrammar) -> None:
    if grammar.unenforced:
        for item in grammar.unenforced:
            print(f"   NOT enforced (checked after generation): {item}")
    else:
        print("   every keyword is enforced by the grammar")
    for item in grammar.narrowed:
        print(f"   narrowed (the grammar is stricter than the schema): {item}")


def _token_text(info: gm.TokenizerInfo, token: int) -> str:
    if info.is_special(token):
        return f"<special {token}>"
    return repr(info.token_bytes[token].decode("utf-8", "replace"))


# ---------------------------------------------------------------------------------------------- part 2


def generate_part(args: argparse.Namespace, compiler: gm.GrammarCompiler, tokenizer: Any) -> None:
    if args.model:
        from grammask.integrations.transformers import load_pretrained_model, load_pretrained_tokenizer

        tokenizer, vocab_size = load_pretrained_tokenizer(args.model)
        compiler = gm.GrammarCompiler(gm.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size),
                                      backend=args.backend)
        model = load_pretrained_model(args.model)
        print(f"Model: {args.model}")
    else:
        model = random_llama(args.seed)
        params = sum(p.numel() for p in model.parameters()) / 1e6
        print(f"Model: a RANDOMLY INITIALISED Llama-architecture model ({params:.0f}M parameters, seed {args.seed}).\n"
              "Its weights are random, so the content is gibberish; the point is that the output always follows\n"
              "the schema. Pass a real model with:  grammask demo --model meta-llama/Llama-3.2-1B-Instruct")
    names = example_schema_names()
    for number, name in enumerate(names, 1):
        print(f"\n-- {name} ({number}/{len(names)}): generating...", flush=True)
        result = gm.generate_json(example_schema(name), model, tokenizer, max_new_tokens=args.max_new_tokens,
                                  compiler=compiler)
        t = result.timings
        print(f"   backend '{result.backend}', {len(result.token_ids)} tokens, finish '{result.finish_reason}'")
        print(f"   {result.text}")
        verdict = "valid (jsonschema, formats checked)" if result.valid else "INVALID: " + "; ".join(result.errors)
        print(f"   {verdict}")
        print(f"   mask fill + apply {t.mask_us_per_token:.0f} µs/token (median over the steps, cold and warm mixed), "
              f"step {t.total_ms_per_token:.1f} ms/token, prefill {t.prefill_ms:.0f} ms, compile {t.compile_ms:.0f} ms; "
              f"budget-aware closing: {'yes' if result.budget_aware else 'no'}")
        if "moved from 'fsm'" in result.choice:
            print(f"   note: {result.choice}")


def random_llama(seed: int) -> Any:
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        raise ImportError(f"the generation demo needs transformers ({exc}): pip install 'grammask[hf]'") from None
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=4096, bos_token_id=128000, eos_token_id=128001,
                         **RANDOM_MODEL_SIZE)
    return LlamaForCausalLM(config).eval()
