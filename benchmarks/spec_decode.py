"""One speculative-decoding verification step: grammask's rejection sampler next to vLLM's, same run.

The step: 8 requests × 3 drafts (32 target rows = drafts + bonus positions) over the Llama-3.2 vocabulary
(128,256), random sampling at temperature 0.8 with draft probabilities, every row under a grammar
bitmask that allows about half the vocabulary.

- **grammask**: :func:`grammask.rejection_sample` (mask both distributions per position, temperature,
  acceptance, recovered and bonus tokens), on its CPU path (``impl="torch"``) and, with
  ``--interpret``, its Triton kernel under the Triton interpreter.
- **vLLM** (``vllm==0.33.0``, ``vllm.v1.sample.rejection_sampler``): the mask applied to the target
  logits first (grammask's ``apply_mask``: vLLM has no per-position mask of its own here), then its
  ``apply_sampling_constraints`` (temperature) and ``rejection_sample``. Its kernels are Triton-only
  (there is no torch path). On a CPU platform vLLM 0.33.0 swaps triton for placeholders, so its
  kernels (even ``apply_sampling_constraints``' temperature expansion) are plain functions its launch
  helper refuses ("Cannot inspect kernel parameters for function"), with or without
  ``TRITON_INTERPRET=1``. The script says so, then times the torch ops of vLLM's step, which do run on
  CPU: the mask, the temperature division (vLLM expands it with a kernel; here ``repeat_interleave``)
  and the target ``softmax`` that ``rejection_sample`` computes first: a lower bound of vLLM's step
  (its acceptance and recovered-token kernels not counted). Its bonus tokens are passed in (vLLM draws them with its
  main Sampler); grammask's step draws them. vLLM does not mask the draft distribution.

With ``--device cuda`` the inputs live on the GPU and each timed step ends with a synchronisation:
grammask's step with its Triton kernel (what ``impl="auto"`` picks there) and with its torch path, and
vLLM's when it imports (its kernels are Triton).

Run, with vLLM in a venv (``python -m venv --system-site-packages .venv && .venv/bin/pip install
--no-deps vllm==0.33.0`` plus, ``--no-deps``, the pure-Python modules its import asks for):
``PYTHONPATH=. .venv/bin/python benchmarks/spec_decode.py [--device cuda] [--interpret] [--repeats 5]``. Prints median
step times and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import sys

if "cuda" not in sys.argv:  # on CPU, vLLM's kernels and grammask's Triton one run only under the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

from grammask.kernels.apply_mask import apply_mask
from grammask.masking.bitmask import bool_to_bitmask
from grammask.sampler import SamplingBatch, SamplingParams, rejection_sample

REQUESTS, DRAFTS, VOCAB, TEMPERATURE = 8, 3, 128256, 0.8


DEVICE = torch.device("cpu")
"""Where the inputs live (``--device``)."""


def inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = REQUESTS * (DRAFTS + 1)
    target = torch.randn(rows, VOCAB, generator=g) * 2
    bitmask = bool_to_bitmask(torch.rand(rows, VOCAB, generator=g) < 0.5)
    draft_probs = torch.softmax(torch.randn(REQUESTS * DRAFTS, VOCAB, generator=g) * 2, dim=-1)
    drafts = torch.multinomial(draft_probs, 1, generator=g).flatten()
    return target.to(DEVICE), bitmask.to(DEVICE), draft_probs.to(DEVICE), drafts.to(DEVICE)


def synchronized(fn):
    """``fn``, then a wait for the device's queue (a no-op on CPU), so a host clock around it times its kernels."""
    if DEVICE.type != "cuda":
        return fn
    return lambda: (fn(), torch.cuda.synchronize())


def time_it(fn, repeats: int) -> float:
    fn = synchronized(fn)
    fn()  # warm-up (kernel compilation, caches)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def grammask_step(impl: str):
    target, bitmask, draft_probs, drafts = inputs()
    batch = SamplingBatch.build([SamplingParams(temperature=TEMPERATURE)] * REQUESTS, vocab_size=VOCAB, device=DEVICE)
    return lambda: rejection_sample(target, drafts, [DRAFTS] * REQUESTS, bitmask, batch, draft_probs=draft_probs, impl=impl)


def vllm_step():
    try:
        from vllm.v1.sample.logits_processor import LogitsProcessors
        from vllm.v1.sample.metadata import SamplingMetadata
        from vllm.v1.sample.rejection_sampler import apply_sampling_constraints, rejection_sample as vllm_rejection_sample
    except ImportError as exc:
        print(f"vLLM not importable ({exc}); install it with: pip install --no-deps vllm==0.33.0 (see the docstring)")
        return None
    target, bitmask, draft_probs, drafts = inputs()
    cu = torch.arange(1, REQUESTS + 1, device=DEVICE) * DRAFTS
    # vLLM scores draft positions only; the bonus rows are the last position of each request
    positions = torch.cat([torch.arange(i * (DRAFTS + 1), i * (DRAFTS + 1) + DRAFTS) for i in range(REQUESTS)]).to(DEVICE)
    on_device = {"device": DEVICE}
    metadata = SamplingMetadata(
        temperature=torch.full((REQUESTS,), TEMPERATURE, **on_device), all_greedy=False, all_random=True, top_p=None,
        top_k=None, generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
        frequency_penalties=torch.zeros(REQUESTS, **on_device), presence_penalties=torch.zeros(REQUESTS, **on_device),
        repetition_penalties=torch.ones(REQUESTS, **on_device), output_token_ids=[[] for _ in range(REQUESTS)],
        allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
    )
    bonus = torch.zeros(REQUESTS, 1, dtype=torch.int32, **on_device)

    temperature = metadata.temperature.repeat_interleave(DRAFTS).unsqueeze(1)

    def torch_part():
        logits = target[positions].clone()
        apply_mask(logits, bitmask[positions])
        processed = logits / temperature
        return processed, processed.softmax(dim=-1, dtype=torch.float32)

    def step():
        logits = target[positions].clone()
        apply_mask(logits, bitmask[positions])
        processed = apply_sampling_constraints(logits, cu, metadata)
        return vllm_rejection_sample(drafts.to(torch.int32), [DRAFTS] * REQUESTS, DRAFTS, cu.to(torch.int32),
                                     draft_probs, processed, bonus, metadata)

    return step, torch_part


def alternate(first, second, repeats: int) -> tuple[float, float]:
    """Median ms of each, the runs alternating so that load on a shared machine hits both alike."""
    first, second = synchronized(first), synchronized(second)
    first(), second()  # warm-up
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--interpret", action="store_true", help="also time grammask's Triton kernel under the interpreter")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else f"torch threads {torch.get_num_threads()}"
    print(f"{REQUESTS} requests x {DRAFTS} drafts, vocab {VOCAB}, temperature {TEMPERATURE}, draft probs, masked rows; "
          f"median of {args.repeats}, {where}")
    if DEVICE.type == "cuda":
        print(f"grammask rejection_sample, Triton kernel:            {time_it(grammask_step('auto'), args.repeats):9.3f} ms")
        print(f"grammask rejection_sample, torch path on the GPU:    {time_it(grammask_step('torch'), args.repeats):9.3f} ms")
    ours = grammask_step("auto")
    if args.interpret:
        print(f"grammask rejection_sample, Triton interpreted:       {time_it(grammask_step('triton'), args.repeats):9.1f} ms")
    steps = vllm_step()
    if steps is None:
        print(f"grammask rejection_sample, torch (CPU path):         {time_it(ours, args.repeats):9.1f} ms")
        return
    step, torch_part = steps
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - report why vLLM's kernels cannot run here, then measure what can
        print(f"vLLM 0.33.0 rejection_sample cannot run on this CPU: {type(exc).__name__}: {exc}")
        mine, floor = alternate(ours, torch_part, args.repeats)
        print(f"grammask rejection_sample, whole step, torch (CPU path):         {mine:9.1f} ms")
        print(f"vLLM 0.33.0, torch ops of its step (mask, temperature, softmax): {floor:9.1f} ms")
        print(f"ratio grammask whole step / vLLM torch ops alone: {mine / floor:.2f}")
        return
    mine, theirs = alternate(ours, step, args.repeats)
    print(f"grammask rejection_sample, torch (CPU path): {mine:9.1f} ms; vLLM 0.33.0: {theirs:9.1f} ms; "
          f"ratio {mine / theirs:.2f}")


if __name__ == "__main__":
    main()
