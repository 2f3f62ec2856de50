"""Per-token time of constrained vs unconstrained decoding with the same random model, in one run.

The model is a randomly initialised Llama-architecture model (tied embeddings, vocab 128,256, the real
Llama-3.2 tokenizer; about 140M parameters / 560 MB in float32 by default). Both loops run the same
model with the KV cache and the same greedy sampler for the same number of steps; the constrained loop
also fills the bitmask from a matcher, applies it and advances the matcher each step. Runs alternate
(unconstrained, constrained, ...) so load on a shared machine hits both alike. The ratio of median
per-token times is the overhead (goal <= 1.05).

Run: ``python benchmarks/generate_overhead.py [--steps 64] [--reps 3] [--hidden 768 --layers 6]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from grammask import GrammarCompiler, JsonSchema
from grammask.bundled import llama32_hf_tokenizer, llama32_tokenizer_info
from grammask.generate import _HuggingFaceModel
from grammask.kernels.apply_mask import apply_mask
from grammask.masking.bitmask import allocate_token_bitmask
from grammask.sampler import Sampler, SamplingBatch, SamplingParams

# A structure with long outputs; when one ends (EOS) the matcher restarts.
SCHEMA = {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"},
          "tag": {"enum": ["a", "b", "c"]}}, "required": ["id", "tag"], "additionalProperties": False}}


def build_model(hidden: int, layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128256, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 256,
                         tie_word_embeddings=True, max_position_embeddings=4096)
    return LlamaForCausalLM(config).eval()


def decode(model, prompt: list[int], steps: int, compiled=None):
    """Per-step wall seconds, per-step mask wall seconds, the tokens, per-step CPU seconds (all threads)."""
    info = compiled.tokenizer_info if compiled is not None else None
    runner = _HuggingFaceModel(model)
    batch = SamplingBatch.build([SamplingParams(temperature=0.0)], vocab_size=128256)
    sampler = Sampler()
    matcher = compiled.matcher() if compiled is not None else None
    bitmask = allocate_token_bitmask(1, 128256)
    totals, masks, tokens, cpu = [], [], [], []
    with torch.no_grad():
        logits = runner.prefill([prompt], pad_id=0)[:, -1]  # (1, vocab): the prompt's last position
        for _ in range(steps):
            start, cpu_start = time.perf_counter(), time.process_time()
            work = logits.float()
            if matcher is not None:
                matcher.fill_next_token_bitmask(bitmask, 0)
                apply_mask(work, bitmask)
                masks.append(time.perf_counter() - start)
            token = sampler(work, batch).token_ids
            batch.update(token)
            token_id = int(token[0])
            if matcher is not None and not matcher.accept_token(token_id):
                raise RuntimeError(f"matcher rejected {token_id}")
            if matcher is not None and matcher.is_terminated():
                matcher.reset()  # start another value: every step stays a masked step
            tokens.append(token_id)
            logits = runner.step([[token_id]], pad_id=0)
            totals.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)
    return totals, masks, tokens, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--backends", default="xgrammar,fsm")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads for both loops (default 1: on a shared, loaded CPU, 2 threads "
                             "made a 128k-wide apply_mask take ~16 ms instead of ~0.16 ms, waiting on descheduled workers)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    info = llama32_tokenizer_info()
    prompt = llama32_hf_tokenizer().encode("Return a JSON array of tagged ids:")
    model = build_model(args.hidden, args.layers)
    size_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    print(f"model: random Llama, hidden {args.hidden}, {args.layers} layers, vocab 128256, {size_mb:.0f} MB fp32; "
          f"{args.steps} steps x {args.reps} reps, torch threads {torch.get_num_threads()}")
    grammars = {b: GrammarCompiler(info, backend=b).compile(JsonSchema(SCHEMA)) for b in args.backends.split(",")}
    for compiled in grammars.values():  # warm-up: first visits of the automaton's states, allocator, caches
        decode(model, prompt, args.steps, compiled)
    decode(model, prompt, 4)
    plain: list[float] = []
    plain_cpu: list[float] = []
    constrained: dict[str, list[float]] = {b: [] for b in grammars}
    constrained_cpu: dict[str, list[float]] = {b: [] for b in grammars}
    mask: dict[str, list[float]] = {b: [] for b in grammars}
    for _ in range(args.reps):
        totals, _, _, cpu = decode(model, prompt, args.steps)
        plain += totals
        plain_cpu += cpu
        for name, compiled in grammars.items():
            totals, masks, _, cpu = decode(model, prompt, args.steps, compiled)
            constrained[name] += totals
            constrained_cpu[name] += cpu
            mask[name] += masks
    base, base_cpu = statistics.median(plain), statistics.median(plain_cpu)
    print(f"unconstrained           : {base * 1e3:8.2f} ms/token wall (median), {base_cpu * 1e3:8.2f} ms CPU")
    for name in grammars:
        med, med_cpu = statistics.median(constrained[name]), statistics.median(constrained_cpu[name])
        print(f"constrained ({name:9s}): {med * 1e3:8.2f} ms/token wall (median), {med_cpu * 1e3:8.2f} ms CPU, "
              f"mask fill+apply {statistics.median(mask[name]) * 1e6:7.1f} us/token -> ratio wall {med / base:.3f}, "
              f"CPU {med_cpu / base_cpu:.3f}")


if __name__ == "__main__":
    main()
