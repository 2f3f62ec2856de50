"""Per-call time of applying a token bitmask: grammask vs xgrammar's kernels, on CPU or on a CUDA device.

One run, same inputs; the contenders take turns within every repetition (so a noisy machine slows
them alike) and the median per contender is reported. The logits are restored outside the timed
region before each call.

- CPU: grammask's torch path vs xgrammar's CPU kernel and (unless ``--no-compile``) its torch.compile
  path, whose first call (the compile) is reported separately and excluded from its median.
- ``--device cuda``: grammask's Triton kernel (what ``impl="auto"`` picks there) vs its torch path on the
  same GPU and xgrammar's Triton kernel, two figures each: a call timed with CUDA events after a
  synchronisation (the host's launch included: what an eager engine step pays), and the kernel alone,
  from replays of a CUDA graph of ten calls (what a graph-captured step pays). Beside grammask's kernel
  time, the logits' bytes over it (the kernel writes each masked logit once and reads no logit).

    python benchmarks/apply_mask.py [--device cuda] [--reps 50] [--threads N] [--no-compile]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammask.kernels import apply_mask  # noqa: E402

CASES = [
    (1, 128256, torch.float32),
    (16, 128256, torch.float32),
    (64, 128256, torch.float32),
    (16, 151936, torch.bfloat16),
]
CUDA_CASES = CASES + [(256, 128256, torch.float32), (256, 151936, torch.bfloat16)]


def timed_ms(call: Callable[[], None], device: torch.device) -> float:
    """Milliseconds of one call: host clock on CPU; on CUDA, events around it after the queue drained."""
    if device.type != "cuda":
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1e3
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    call()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end)


def kernel_us(call: Callable[[], None], calls: int = 10, replays: int = 20) -> float:
    """Microseconds per call of ``call``'s device work alone: the median replay of a CUDA graph of ``calls`` calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture asks
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    times = [timed_ms(graph.replay, torch.device("cuda")) for _ in range(replays)]
    return statistics.median(times) * 1e3 / calls


def contenders(device: torch.device, no_compile: bool) -> dict[str, Callable[[torch.Tensor, torch.Tensor], None]]:
    import xgrammar

    def xgrammar_backend(backend: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
        return lambda logits, bitmask: xgrammar.apply_token_bitmask_inplace(logits, bitmask, backend=backend)

    if device.type == "cuda":
        return {
            "grammask": lambda logits, bitmask: apply_mask(logits, bitmask),
            "grammask torch": lambda logits, bitmask: apply_mask(logits, bitmask, impl="torch"),
            "xgr triton": xgrammar_backend("triton"),
        }
    runs = {
        "grammask": lambda logits, bitmask: apply_mask(logits, bitmask, impl="torch"),
        "xgr cpu": xgrammar_backend("cpu"),
    }
    if not no_compile:
        runs["xgr compile"] = xgrammar_backend("torch_compile")
    return runs


def bench_case(
    batch: int, vocab: int, dtype: torch.dtype, runs: dict, reps: int, device: torch.device
) -> dict[str, dict]:
    generator = torch.Generator().manual_seed(batch)
    source = torch.randn(batch, vocab, generator=generator).to(dtype).to(device)
    bitmask = torch.randint(-(2**31), 2**31, (batch, (vocab + 31) // 32), dtype=torch.int32, generator=generator)
    bitmask = bitmask.to(device)
    logits = source.clone()
    results: dict[str, dict] = {}
    expected = None
    for name, run in runs.items():  # first calls: compiles, table builds, correctness
        logits.copy_(source)
        try:
            first = timed_ms(lambda: run(logits, bitmask), device)
        except Exception as error:  # e.g. a dtype a kernel does not support
            results[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:60]}"}
            continue
        expected = logits.clone() if expected is None else expected
        results[name] = {"first": first, "same": torch.equal(logits, expected), "times": []}
    for _ in range(reps):
        for name, run in runs.items():
            if "error" in results[name]:
                continue
            logits.copy_(source)
            results[name]["times"].append(timed_ms(lambda: run(logits, bitmask), device))
    for name, result in results.items():
        if "times" in result:
            result["median"] = statistics.median(result["times"])
        if "times" in result and device.type == "cuda":  # masking twice gives the same logits: no restore needed
            try:
                result["kernel"] = kernel_us(lambda: runs[name](logits, bitmask))
            except RuntimeError as error:  # a path that cannot be captured in a graph
                print(f"{name}: no CUDA-graph timing ({str(error).splitlines()[0][:80]})")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--no-compile", action="store_true", help="skip xgrammar's torch.compile path")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    runs = contenders(device, args.no_compile)
    version = importlib.metadata.version("xgrammar")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} torch threads"
    print(f"torch {torch.__version__}, xgrammar {version}, {where}, {args.reps} reps")
    print("median ms per call; ratio = their time / grammask's time (> 1: grammask is faster)"
          + ("; kernel: µs of device work per call, from CUDA-graph replays" if device.type == "cuda" else ""))
    for batch, vocab, dtype in CUDA_CASES if device.type == "cuda" else CASES:
        results = bench_case(batch, vocab, dtype, runs, args.reps, device)
        ours = results["grammask"]["median"]
        cells = [f"[{batch}, {vocab}] {str(dtype).removeprefix('torch.')}: grammask {ours:.3f} ms"]
        if device.type == "cuda":
            kernel = results["grammask"]["kernel"]
            cells[0] += f", kernel {kernel:.1f} µs ({batch * vocab * dtype.itemsize / kernel / 1e3:.0f} GB/s of logits)"
        for name, result in results.items():
            if name == "grammask":
                continue
            if "error" in result:
                cells.append(f"{name} failed ({result['error']})")
                continue
            cell = f"{name} {result['median']:.3f} ms ({result['median'] / ours:.1f}x"
            if "kernel" in result:
                cell += f"), kernel {result['kernel']:.1f} µs ({result['kernel'] / kernel:.1f}x"
            cell += f", first call {result['first']:.0f} ms)" if name == "xgr compile" else ")"
            cells.append(cell + ("" if result["same"] else " RESULT DIFFERS"))
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
