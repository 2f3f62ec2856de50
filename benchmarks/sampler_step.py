"""One sampling step, batch 64 × vocab 128,256, on CPU or a CUDA device: grammask's Sampler vs the equivalent transformers pipeline.

The mix (per 64 rows): 16 greedy (8 of them under a grammar mask), 16 top-p 0.9 at temperature 0.7
(half seeded), 16 top-k 50 at temperature 0.8 (4 under a grammar mask), 8 top-k 40 + top-p 0.95 with
repetition 1.1 and frequency 0.3 penalties, 8 plain temperature 1.0 with a presence penalty 0.5.
Each row's prompt has 200 tokens and it has generated 50 (the penalties' history).

The peer runs, per row, what a transformers user writes: the grammar mask as a boolean ``masked_fill``
(precomputed, which favours the peer), frequency / presence from a ``bincount`` of the history, a
``LogitsProcessorList`` of ``RepetitionPenaltyLogitsProcessor`` / ``TemperatureLogitsWarper`` /
``TopKLogitsWarper`` / ``TopPLogitsWarper``, then ``argmax`` or ``softmax`` + ``torch.multinomial``.

grammask gets the bitmask rows of the masked requests only, with ``indices`` (as an engine does).

The logits are synthetic but LM-shaped: a N(0, 1.5) background over the vocabulary plus a few dozen
boosted tokens per row, so that the top-p nucleus holds tens to hundreds of tokens (printed).

With ``--device cuda`` both run on the GPU (logits, masks and histories moved there before the clock
starts; each step ends with a synchronisation, so a step's time includes its kernels).

Run: ``PYTHONPATH=. python benchmarks/sampler_step.py [--device cuda] [--steps 5] [--threads 1] [--flat]``. Prints the
median step times and their ratio (grammask / transformers; the goal is <= 0.5).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from grammask.masking.bitmask import bool_to_bitmask
from grammask.sampler import Sampler, SamplingBatch, SamplingParams

BATCH = 64
VOCAB = 128256
PROMPT_LEN = 200
HISTORY_LEN = 50


def mix() -> tuple[list[SamplingParams], list[bool]]:
    """The rows' parameters and which rows are under a grammar mask."""
    params: list[SamplingParams] = []
    masked: list[bool] = []
    for i in range(16):
        params.append(SamplingParams(temperature=0.0))
        masked.append(i < 8)
    for i in range(16):
        params.append(SamplingParams(temperature=0.7, top_p=0.9, seed=i if i % 2 else None))
        masked.append(False)
    for i in range(16):
        params.append(SamplingParams(temperature=0.8, top_k=50))
        masked.append(i < 4)
    for _ in range(8):
        params.append(SamplingParams(top_k=40, top_p=0.95, repetition_penalty=1.1, frequency_penalty=0.3))
        masked.append(False)
    for _ in range(8):
        params.append(SamplingParams(temperature=1.0, presence_penalty=0.5))
        masked.append(False)
    return params, masked


def lm_like_logits(generator: torch.Generator, flat: bool = False) -> torch.Tensor:
    logits = torch.randn(BATCH, VOCAB, generator=generator) * 1.5
    if flat:  # the worst case for grammask's candidate view: nuclei of tens of thousands of tokens
        return logits
    boosted = torch.randint(0, VOCAB, (BATCH, 400), generator=generator)
    boost = torch.rand(BATCH, 400, generator=generator) ** 2 * 12 + 3
    return logits.scatter_add_(1, boosted, boost)


def grammar_masks(masked: list[bool], generator: torch.Generator) -> torch.Tensor:
    """A JSON-ish mask: ~3% of the vocabulary allowed on masked rows, everything on the others."""
    allowed = torch.rand(BATCH, VOCAB, generator=generator) < 0.03
    allowed[~torch.tensor(masked)] = True
    return allowed


def peer_step(
    logits: torch.Tensor,
    params: list[SamplingParams],
    allowed: torch.Tensor,
    masked: list[bool],
    input_ids: torch.Tensor,
    history: torch.Tensor,
) -> torch.Tensor:
    """transformers' processors row by row, then argmax / multinomial."""
    chosen = torch.empty(BATCH, dtype=torch.int64, device=logits.device)
    for i, p in enumerate(params):
        scores = logits[i : i + 1]
        if masked[i]:
            scores = scores.masked_fill(~allowed[i], float("-inf"))
        if p.frequency_penalty or p.presence_penalty:
            counts = torch.bincount(history[i], minlength=VOCAB).to(scores.dtype)
            scores = scores - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).to(scores.dtype)
        processors = LogitsProcessorList()
        if p.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(p.repetition_penalty))
        if p.is_greedy:
            chosen[i] = processors(input_ids[i : i + 1], scores).argmax()
            continue
        processors.append(TemperatureLogitsWarper(p.temperature))
        if p.top_k != -1:
            processors.append(TopKLogitsWarper(p.top_k))
        if p.top_p < 1.0:
            processors.append(TopPLogitsWarper(p.top_p))
        scores = processors(input_ids[i : i + 1], scores)
        chosen[i] = torch.multinomial(torch.softmax(scores, dim=-1), 1)[0, 0]
    return chosen


def nucleus_sizes(logits: torch.Tensor, params: list[SamplingParams]) -> list[int]:
    sizes = []
    for i, p in enumerate(params):
        if p.top_p < 1.0 and p.top_k == -1:
            kept = TopPLogitsWarper(p.top_p)(None, logits[i : i + 1] / p.temperature)
            sizes.append(int(torch.isfinite(kept).sum()))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--flat", action="store_true", help="flat N(0, 1.5) logits (huge nuclei, worst case)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadier on a shared machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    generator = torch.Generator().manual_seed(0)
    params, masked = mix()
    allowed = grammar_masks(masked, generator)
    masked_rows = torch.tensor([i for i, m in enumerate(masked) if m])
    bitmask = bool_to_bitmask(allowed[masked_rows])  # an engine fills bitmask rows for structured requests only
    prompts = torch.randint(0, VOCAB, (BATCH, PROMPT_LEN), generator=generator)
    history = torch.randint(0, VOCAB, (BATCH, HISTORY_LEN), generator=generator)
    batch = SamplingBatch.build(
        params, vocab_size=VOCAB, eos_ids=[128001], prompt_token_ids=prompts.tolist(), output_token_ids=history.tolist(),
        device=device,
    )
    input_ids, history = torch.cat([prompts, history], dim=1).to(device), history.to(device)
    allowed, masked_rows, bitmask = allowed.to(device), masked_rows.to(device), bitmask.to(device)
    sampler = Sampler(generator=torch.Generator(device=device).manual_seed(1))
    ours, peer = [], []
    for step in range(args.steps + 1):
        logits = lm_like_logits(generator, args.flat)
        if step == 0:
            sizes = nucleus_sizes(logits, params)
        mine, theirs = logits.to(device, copy=True), logits.to(device, copy=True)
        sync()
        start = time.perf_counter()
        out = sampler(mine, batch, bitmask, indices=masked_rows)
        batch.update(out.token_ids)
        sync()
        middle = time.perf_counter()
        peer_step(theirs, params, allowed, masked, input_ids, history)
        sync()
        end = time.perf_counter()
        if step:  # step 0 warms up both
            ours.append(middle - start)
            peer.append(end - middle)
    ours_ms, peer_ms = statistics.median(ours) * 1e3, statistics.median(peer) * 1e3
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"batch {BATCH} x vocab {VOCAB}, {where}, {args.steps} steps (medians)")
    print(f"top-p nucleus sizes (first step): min {min(sizes)}, median {int(statistics.median(sizes))}, max {max(sizes)}")
    print(f"grammask Sampler step:        {ours_ms:8.1f} ms")
    print(f"transformers per-row pipeline: {peer_ms:8.1f} ms")
    print(f"ratio grammask / transformers: {ours_ms / peer_ms:.3f}  (goal <= 0.5)")


if __name__ == "__main__":
    main()
