"""The Triton kernels and the sampler on a CUDA device, against the torch references on CPU.

The other kernel tests prove the kernels' logic on CPU tensors through the Triton interpreter; these
prove the compiled kernels, the dispatch to them and the sampler's device path on a real GPU. They skip
where there is no CUDA device (CI); on a GPU machine:

    TRITON_INTERPRET=0 python -m pytest tests/gpu

Every case draws fresh random inputs, writes over a poisoned copy where a kernel fills an output, and
compares with a result computed on CPU by the torch path or a plain reference.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from grammask.kernels import apply_mask
from grammask.kernels.apply_mask import ApplyMaskImpl, _resolve_impl, triton_available
from grammask.kernels.gumbel_sample import gumbel_argmax, gumbel_noise, seeded_row_state
from grammask.kernels.rejection_sample import rejection_rows
from grammask.masking.bitmask import bitmask_to_bool, bool_to_bitmask
from grammask.sampler import Sampler, SamplingBatch, SamplingParams, rejection_sample
from tests.kernels.test_apply_mask import apply_mask_reference, make_logits, random_bitmask
from tests.kernels.test_rejection_sample import _case as rejection_case

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1" or not triton_available(),
    reason="needs a CUDA device, triton, and TRITON_INTERPRET=0 (the kernels compiled, not interpreted)",
)
CUDA = torch.device("cuda")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
LAYOUTS = ["contiguous", "column_slice", "row_strided", "column_major"]


def test_auto_dispatches_to_triton_on_cuda():
    assert _resolve_impl("auto", CUDA) is ApplyMaskImpl.TRITON


def on_cuda_like(view: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same view (shape, strides, offset) of a CUDA copy of ``view``'s base; returns (view, base)."""
    base = view._base if view._base is not None else view
    base_gpu = base.to(CUDA).contiguous()
    assert base.is_contiguous()
    return base_gpu.as_strided(view.shape, view.stride(), view.storage_offset() - base.storage_offset()), base_gpu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batch,vocab", [(1, 31), (7, 4099), (64, 128256), (130, 151936)])
def test_apply_mask_equals_the_reference(batch, vocab, layout, dtype):
    """Every layout the dispatcher accepts, with the memory around a view left as it was."""
    g = torch.Generator().manual_seed(batch * vocab)
    logits = make_logits(batch, vocab, dtype, layout, g)
    bitmask = random_bitmask(batch, (vocab + 31) // 32, g)
    view_gpu, base_gpu = on_cuda_like(logits)
    apply_mask_reference(logits, bitmask)
    apply_mask(view_gpu, bitmask.to(CUDA))
    expected_base = logits._base if logits._base is not None else logits
    assert torch.equal(base_gpu.cpu(), expected_base)


@pytest.mark.parametrize("words_delta", [-5, 0, 3])
def test_apply_mask_with_indices_and_short_or_long_bitmasks(words_delta):
    """Rows named twice get the intersection; rows not named are untouched; columns past the bitmask are masked."""
    g = torch.Generator().manual_seed(words_delta + 10)
    batch, vocab = 48, 128256
    wide = torch.randn(batch, vocab + 64, generator=g)
    indices = torch.randint(0, batch, (40,), generator=g)
    bitmask = random_bitmask(40, (vocab + 31) // 32 + words_delta, g)
    expected = wide.clone()
    apply_mask_reference(expected[:, :vocab], bitmask, indices)
    on_gpu = wide.to(CUDA)
    apply_mask(on_gpu[:, :vocab], bitmask.to(CUDA), indices=indices.to(CUDA, torch.int32))
    assert torch.equal(on_gpu.cpu(), expected)  # the 64 columns past the view are untouched too


def test_apply_mask_writes_nothing_for_an_index_out_of_range_and_never_syncs():
    """On CUDA the indices are not read on the host (that would stall the step): a bad one writes nothing."""
    logits = torch.randn(4, 1000, device=CUDA)
    before = logits.clone()
    bitmask = torch.zeros(2, 32, dtype=torch.int32, device=CUDA)
    indices = torch.tensor([7, -1], dtype=torch.int64, device=CUDA)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        apply_mask(logits, bitmask, indices=indices)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(logits, before)


def test_gumbel_noise_and_argmax_match_the_torch_path():
    g = torch.Generator().manual_seed(3)
    rows, vocab = 64, 128256
    state = seeded_row_state(torch.randint(0, 2**62, (rows,), generator=g), torch.randint(0, 2**31, (rows,), generator=g))
    ids = torch.randint(0, vocab, (rows, 300), generator=g)
    noise_cpu = gumbel_noise(state, ids, impl="torch")
    noise_gpu = gumbel_noise(state.to(CUDA), ids.to(CUDA), impl="triton").cpu()
    torch.testing.assert_close(noise_gpu, noise_cpu, rtol=2e-6, atol=2e-6)  # the device's log may differ in the last bits

    scores = torch.randn(rows, vocab, generator=g) * 3
    scores[:, ::7] = float("-inf")
    scores[5] = float("-inf")  # nothing allowed: column 0
    chosen_cpu = gumbel_argmax(scores, state, impl="torch")
    chosen_gpu = gumbel_argmax(scores.to(CUDA), state.to(CUDA), impl="triton")
    assert chosen_gpu.device.type == "cuda"
    assert torch.equal(chosen_gpu.cpu(), chosen_cpu)


@pytest.mark.parametrize("with_probs", [True, False])
@pytest.mark.parametrize("vocab", [4099, 128256])
def test_rejection_rows_match_the_torch_path(vocab, with_probs):
    args = rejection_case(rows=32, vocab=vocab, seed=vocab + with_probs, with_probs=with_probs, strided=vocab == 4099)
    ratio_cpu, token_cpu = rejection_rows(*args, impl="torch")
    on_gpu = [a.to(CUDA) if isinstance(a, torch.Tensor) else a for a in args]
    ratio_gpu, token_gpu = rejection_rows(*on_gpu, impl="triton")
    assert torch.equal(token_gpu.cpu(), token_cpu)
    torch.testing.assert_close(ratio_gpu.cpu(), ratio_cpu, rtol=1e-5, atol=1e-7)


def test_rejection_sample_emits_the_same_tokens_on_cuda():
    g = torch.Generator().manual_seed(17)
    counts, vocab = [3, 0, 2, 4, 1, 3], 128256
    rows, drafts = sum(counts) + len(counts), sum(counts)
    logits = torch.randn(rows, vocab, generator=g) * 2
    mask = bool_to_bitmask(torch.rand(rows, vocab, generator=g) < 0.6)
    probs = torch.softmax(torch.randn(drafts, vocab, generator=g) * 2, dim=-1)
    draft_ids = torch.multinomial(probs, 1, generator=g).flatten()
    params = [SamplingParams(seed=1), SamplingParams(temperature=0), SamplingParams(seed=2, top_k=5),
              SamplingParams(seed=3, top_p=0.9), SamplingParams(seed=4, min_p=0.05), SamplingParams(temperature=0)]
    outputs = []
    for device in ("cpu", CUDA):
        batch = SamplingBatch.build(params, vocab_size=vocab, device=device)
        out = rejection_sample(logits.to(device), draft_ids.to(device), counts, mask.to(device), batch,
                               draft_probs=probs.to(device))
        outputs.append(out.to_lists())
    assert outputs[0] == outputs[1]


def sampler_mix() -> list[SamplingParams]:
    """Every stage of the sampler: greedy, seeded top-k / top-p / min-p, penalties, bias, logprobs."""
    params = []
    for i in range(48):
        kind = i % 8
        params.append(
            [
                SamplingParams(temperature=0.0, logprobs=5),
                SamplingParams(temperature=0.7, top_p=0.9, seed=i),
                SamplingParams(temperature=0.8, top_k=50, seed=i, logprobs=3),
                SamplingParams(top_k=40, top_p=0.95, repetition_penalty=1.1, frequency_penalty=0.3, seed=i),
                SamplingParams(temperature=1.0, presence_penalty=0.5, min_p=0.1, seed=i),
                SamplingParams(temperature=1.3, logit_bias={7: 5.0, 11: -100.0}, seed=i, token_ids_logprobs=[7, 11]),
                SamplingParams(temperature=0.0, repetition_penalty=1.3, min_new_tokens=3),
                SamplingParams(temperature=0.9, top_k=1000, top_p=0.5, min_p=0.02, seed=i, logprobs=2),
            ][kind]
        )
    return params


def lm_like_logits(rows: int, vocab: int, g: torch.Generator) -> torch.Tensor:
    logits = torch.randn(rows, vocab, generator=g) * 1.5
    boosted = torch.randint(0, vocab, (rows, 400), generator=g)
    return logits.scatter_add_(1, boosted, torch.rand(rows, 400, generator=g) ** 2 * 12 + 3)


def sampler_case(g: torch.Generator, rows: int, vocab: int):
    """LM-shaped logits, and a bitmask (3% allowed) for every third row with the rows it applies to."""
    logits = lm_like_logits(rows, vocab, g)
    masked_rows = torch.arange(0, rows, 3)
    bitmask = bool_to_bitmask(torch.rand(len(masked_rows), vocab, generator=g) < 0.03)
    return logits, bitmask, masked_rows


def test_sampler_steps_match_the_cpu_path():
    """Seeded and greedy rows draw the same tokens on CUDA (whole-row sorts) as on CPU (candidate view),
    step after step, with the same logprobs; masked rows stay inside their masks."""
    g = torch.Generator().manual_seed(5)
    params, vocab = sampler_mix(), 128256
    prompts = torch.randint(0, vocab, (len(params), 30), generator=g).tolist()
    batches = {device: SamplingBatch.build(params, vocab_size=vocab, eos_ids=[128001], prompt_token_ids=prompts, device=device)
               for device in ("cpu", "cuda")}
    sampler = Sampler()
    for step in range(4):
        logits, bitmask, masked_rows = sampler_case(g, len(params), vocab)
        cpu = sampler(logits.clone(), batches["cpu"], bitmask, indices=masked_rows)
        gpu = sampler(logits.to(CUDA), batches["cuda"], bitmask.to(CUDA), indices=masked_rows.to(CUDA))
        assert gpu.token_ids.device.type == "cuda"
        tokens = gpu.token_ids.cpu()
        assert torch.equal(tokens, cpu.token_ids), f"step {step}: rows {(tokens != cpu.token_ids).nonzero().flatten().tolist()}"
        assert bitmask_to_bool(bitmask, vocab)[torch.arange(len(masked_rows)), tokens[masked_rows]].all()
        for name in ("logprobs", "top_logprobs", "token_ids_logprobs"):
            torch.testing.assert_close(getattr(gpu, name).cpu(), getattr(cpu, name), rtol=1e-4, atol=1e-4, equal_nan=True)
        assert torch.equal(gpu.ranks.cpu(), cpu.ranks) and torch.equal(gpu.top_ids.cpu(), cpu.top_ids)
        batches["cpu"].update(cpu.token_ids)
        batches["cuda"].update(gpu.token_ids)


def never_waits(step) -> None:
    """Run ``step`` with torch's sync debug mode set to raise on an operation that waits for the device:
    a device value read on the host, or a copy from pageable host memory (each stalls the host until
    the GPU's queue drains)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_sampler_step_never_waits_for_the_device():
    """After a batch's first step (which builds its index tensors), neither a step nor the batch's update waits."""
    g = torch.Generator().manual_seed(6)
    params, vocab = sampler_mix(), 128256
    batch = SamplingBatch.build(params, vocab_size=vocab, eos_ids=[128001], device=CUDA)
    logits, bitmask, masked_rows = (t.to(CUDA) for t in sampler_case(g, len(params), vocab))
    sampler = Sampler(generator=torch.Generator(device=CUDA).manual_seed(0))
    outputs = []

    def step() -> None:
        outputs.append(sampler(logits.clone(), batch, bitmask, indices=masked_rows))
        batch.update(outputs[-1].token_ids)

    step()
    never_waits(step)
    never_waits(step)
    assert all((out.token_ids.cpu() >= 0).all() for out in outputs)


def test_rejection_sample_never_waits_for_the_device():
    """The step's index plan goes to the device in one copy from pinned memory; nothing is read back."""
    g = torch.Generator().manual_seed(8)
    counts, vocab = [3, 2, 4, 1], 128256
    rows, drafts = sum(counts) + len(counts), sum(counts)
    logits = (torch.randn(rows, vocab, generator=g) * 2).to(CUDA)
    mask = bool_to_bitmask(torch.rand(rows, vocab, generator=g) < 0.6).to(CUDA)
    probs = torch.softmax(torch.randn(drafts, vocab, generator=g) * 2, dim=-1).to(CUDA)
    draft_ids = torch.randint(0, vocab, (drafts,), generator=g).to(CUDA)
    params = [SamplingParams(seed=1), SamplingParams(temperature=0), SamplingParams(top_k=5), SamplingParams(top_p=0.9, seed=3)]
    batch = SamplingBatch.build(params, vocab_size=vocab, device=CUDA)
    generator = torch.Generator(device=CUDA).manual_seed(0)
    outputs = []

    def step() -> None:
        outputs.append(rejection_sample(logits, draft_ids, counts, mask, batch, draft_probs=probs, generator=generator))

    step()
    never_waits(step)
    assert outputs[0].to_lists()[:2] == outputs[1].to_lists()[:2]  # seeded and greedy requests repeat


def test_unseeded_rows_follow_the_distribution_on_cuda():
    """Unseeded rows draw with a CUDA generator: over many rows, the frequencies follow softmax(logits / T)
    over the top-k of the allowed tokens (a chi-square bound that a wrong temperature or a leak fails)."""
    rows, vocab = 20000, 4096
    logits = torch.full((rows, vocab), -5.0)
    logits[:, :5] = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0])
    allowed = torch.ones(rows, vocab, dtype=torch.bool)
    allowed[:, 1] = False
    batch = SamplingBatch.build([SamplingParams(temperature=0.5, top_k=4)] * rows, vocab_size=vocab, device=CUDA)
    out = Sampler(generator=torch.Generator(device=CUDA).manual_seed(0))(
        logits.to(CUDA), batch, bool_to_bitmask(allowed).to(CUDA)
    )
    counts = torch.bincount(out.token_ids.cpu(), minlength=vocab)
    assert counts[1] == 0 and counts[5:].sum() == 0  # masked, and outside the top 4 of what is allowed
    expected = torch.tensor([2.0, 1.0, 0.5, 0.0]).div(0.5).softmax(0).double() * rows  # tokens 0, 2, 3, 4
    observed = counts[[0, 2, 3, 4]].double()
    chi_square = ((observed - expected) ** 2 / expected).sum().item()
    assert chi_square < 16.27  # p = 0.001 at 3 degrees of freedom


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 150}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["red", "green", 3, None]}, "minItems": 2, "maxItems": 4},
    {"type": "string", "pattern": "^[a-c]{2,4}$"},
]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_generate_json_batch_with_a_model_on_cuda(llama_hf, llama_info, temperature):
    """Use 1 on a GPU: a Hugging Face causal LM on CUDA (tiny, random, the real Llama-3.2 tokenizer), masks
    filled on the host and applied on the device; every output valid under jsonschema."""
    import jsonschema

    from grammask import GrammarCompiler
    from grammask.generate import generate_json_batch
    from tests.tiny_models import tiny_llama

    model = tiny_llama().to(CUDA)
    compiler = GrammarCompiler(llama_info, backend="fsm")
    sampling = SamplingParams(temperature=temperature, seed=7)
    results = generate_json_batch(SCHEMAS, model, llama_hf, prompts=["Person:", "Colours, a longer prompt:", "x"],
                                  max_new_tokens=40, compiler=compiler, sampling=sampling)
    for schema, result in zip(SCHEMAS, results):
        assert result.valid and result.finish_reason == "stop", (result.text, result.errors)
        jsonschema.validate(json.loads(result.text), schema)
        assert b"".join(llama_info.token_bytes[t] for t in result.token_ids[:-1]).decode() == result.text
