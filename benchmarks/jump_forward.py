"""Tokens and time jump-forward saves in ``generate_json`` and in ``model.generate`` on the bundled example schemas.

For each schema in ``grammask/schemas/examples`` the same request runs twice, alternating, with the
same model: with jump-forward (forced text appended as canonical tokens, fed in the next forward pass)
and without (every token sampled, one forward pass each). The model is a randomly initialised
Llama-architecture model (vocab 128,256, the real Llama-3.2 tokenizer; ``--hidden`` / ``--layers`` set
its size), greedy, backend ``fsm`` (budget-aware). A random model writes different values in the two
runs (the forced tokens change its context), so the figures are per output: the share of output
tokens that were forced, the forward passes (decode steps) per output token, and wall time per
output token. Outputs are checked valid by jsonschema.

Run: ``PYTHONPATH=. python benchmarks/jump_forward.py [--reps 3] [--hidden 256 --layers 4] [--max-new-tokens 256]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from grammask import GrammarCompiler, JsonSchema
from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info
from grammask.generate import generate_json
from grammask.integrations.transformers import GrammaskLogitsProcessor, jump_forward_decoding

EXAMPLES = Path(__file__).resolve().parents[1] / "grammask" / "schemas" / "examples"


def model(hidden: int, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128256, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         bos_token_id=128000, eos_token_id=128001, tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def run(schema, lm, tok, compiler, jump: bool, max_new_tokens: int):
    start = time.perf_counter()
    result = generate_json(schema, lm, tok, compiler=compiler, max_new_tokens=max_new_tokens, jump_forward=jump)
    return result, time.perf_counter() - start - result.timings.compile_ms / 1e3


def run_hf(schema, lm, tok, compiler, jump: bool, max_new_tokens: int):
    """``(tokens, forward passes, seconds, valid)`` for one greedy ``model.generate`` call."""
    from transformers import LogitsProcessorList

    eos = list(compiler.tokenizer_info.eos_ids)
    processor = GrammaskLogitsProcessor(compiler.compile(JsonSchema(schema)), tokenizer=tok, max_new_tokens=max_new_tokens)
    prompt = tok("JSON:", return_tensors="pt")
    passes = []
    hook = lm.register_forward_hook(lambda *_: passes.append(1))
    start = time.perf_counter()
    try:
        out = lm.generate(**prompt, logits_processor=LogitsProcessorList([processor]), do_sample=False,
                          max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos[0],
                          custom_generate=jump_forward_decoding if jump else None)
    finally:
        hook.remove()
    seconds = time.perf_counter() - start
    ids = out[0, prompt["input_ids"].shape[1]:].tolist()
    ids = ids[: next((i for i, t in enumerate(ids) if t in eos), len(ids))]
    try:
        import jsonschema

        jsonschema.validate(json.loads(tok.decode(ids)), schema)
        valid = True
    except ValueError:
        valid = False
    return len(ids) + 1, len(passes), seconds, valid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    tok, lm = llama32_hf_tokenizer(), model(args.hidden, args.layers)
    compiler = GrammarCompiler(llama32_tokenizer_info(), backend="fsm")
    print(f"random Llama hidden {args.hidden} x {args.layers} layers, greedy, fsm, median of {args.reps} runs each way")
    print(f"{'schema':<12} {'mode':<8} {'tokens':>6} {'forced':>7} {'passes/token':>13} {'ms/token':>9} {'valid':>6}")
    for path in sorted(EXAMPLES.glob("*.json")):
        schema = json.loads(path.read_text())
        run(schema, lm, tok, compiler, True, args.max_new_tokens)  # compile and warm up
        rows = {True: [], False: []}
        for _ in range(args.reps):
            for jump in (False, True):
                rows[jump].append(run(schema, lm, tok, compiler, jump, args.max_new_tokens))
        per_token = {}
        for jump in (False, True):
            result = rows[jump][-1][0]
            tokens = len(result.token_ids)
            ms = statistics.median(seconds / len(r.token_ids) for r, seconds in rows[jump]) * 1e3
            per_token[jump] = ms
            passes = result.timings.steps / tokens
            print(f"{path.stem:<12} {'jump' if jump else 'step':<8} {tokens:>6} {result.forced_tokens:>7} "
                  f"{passes:>13.2f} {ms:>9.2f} {str(all(r.valid for r, _ in rows[jump])):>6}")
        print(f"{'':<12} time per token, jump / step: {per_token[True] / per_token[False]:.2f}")
    print("\nmodel.generate with GrammaskLogitsProcessor: its own loop (step) and custom_generate=jump_forward_decoding (jump)")
    print(f"{'schema':<12} {'mode':<8} {'tokens':>6} {'passes/token':>13} {'ms/token':>9} {'valid':>6}")
    for path in sorted(EXAMPLES.glob("*.json")):
        schema = json.loads(path.read_text())
        per_token = {}
        for jump in (False, True):
            runs = [run_hf(schema, lm, tok, compiler, jump, args.max_new_tokens) for _ in range(args.reps)]
            tokens, passes, _, _ = runs[-1]
            per_token[jump] = statistics.median(seconds / n for n, _, seconds, _ in runs) * 1e3
            print(f"{path.stem:<12} {'jump' if jump else 'step':<8} {tokens:>6} {passes / tokens:>13.2f} "
                  f"{per_token[jump]:>9.2f} {str(all(r[3] for r in runs)):>6}")
        print(f"{'':<12} time per token, jump / step: {per_token[True] / per_token[False]:.2f}")


if __name__ == "__main__":
    main()
