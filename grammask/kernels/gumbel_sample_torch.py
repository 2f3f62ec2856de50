"""Seeded Gumbel-max sampling with plain torch (the CPU path and the reference of the Triton kernel).

The noise of token ``t`` at step ``position`` of a request seeded with ``seed`` is a pure function of
``(seed, position, t)``: a MurmurHash3 (x86, 32-bit) of the four 32-bit words ``seed_lo, seed_hi,
position, t``, turned into a uniform in (0, 1) and then into Gumbel noise. It does not depend on the
batch, the row, or which other tokens are scored, so a seeded request draws the same token wherever it is.

uint32 arithmetic is emulated in int64 tensors (torch's uint32 has no shifts): products of two 32-bit
values are taken modulo 2**64 and masked to 32 bits (checked at import; a split multiply that never
overflows is the fallback), and every result is masked to 32 bits.

The Gumbel transform ``-log(-log(u))`` runs in float64 and is rounded to float32: float32 ``log``
differs in the last ulp between libraries (torch vs numpy vs libdevice), float64 rounded to float32
does not, which is what keeps the Triton kernel and this reference bit-identical.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
C1 = 0xCC9E2D51
C2 = 0x1B873593
MIX_ADD = 0xE6546B64
FMIX1 = 0x85EBCA6B
FMIX2 = 0xC2B2AE35
KEY_BYTES = 16
"""The size of the hashed key, four 32-bit words (seed low, seed high, position, token id)."""


def mul32_split(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``(x * constant) mod 2**32`` for int64 tensors holding uint32 values, without int64 overflow."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def mul32_wrapping(x: torch.Tensor, constant: int) -> torch.Tensor:
    """The same through one int64 multiply that wraps modulo 2**64 (its low 32 bits are exact)."""
    return (x * constant) & MASK32


def _int64_multiply_wraps() -> bool:
    """Whether this torch's int64 multiply wraps on overflow, on its scalar and vectorised paths."""
    values = [(2**32 - 1 - 7919 * i) for i in range(67)]
    got = mul32_wrapping(torch.tensor(values, dtype=torch.int64), 0xCC9E2D51).tolist()
    return got == [(v * 0xCC9E2D51) & MASK32 for v in values]


# Signed overflow wraps on every platform torch ships for, but it is not promised: check once, and fall
# back to the split multiply (twice the work) if it ever does not.
mul32 = mul32_wrapping if _int64_multiply_wraps() else mul32_split


def rotl32(x: torch.Tensor, r: int) -> torch.Tensor:
    """Rotate the uint32 values of an int64 tensor left by ``r`` bits."""
    return ((x << r) | (x >> (32 - r))) & MASK32


def mix_block(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """One MurmurHash3 body step: fold the 32-bit block ``k`` into the state ``h``."""
    k = mul32(rotl32(mul32(k & MASK32, C1), 15), C2)
    h = rotl32(h ^ k, 13)
    return (mul32(h, 5) + MIX_ADD) & MASK32


def fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's finaliser (avalanche): every input bit flips each output bit with probability ~1/2."""
    h = h ^ (h >> 16)
    h = mul32(h, FMIX1)
    h = h ^ (h >> 13)
    h = mul32(h, FMIX2)
    return h ^ (h >> 16)


def seeded_row_state(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The hash state of each row after its seed and position blocks (shared by the torch and Triton paths).

    Args:
        seeds: ``(rows,)``, int64, each in ``[0, 2**63)``.
        positions: ``(rows,)``, int64, the 0-based index of the token being drawn (its output position).

    Returns:
        ``(rows,)``, int64 holding uint32 values.
    """
    seeds = seeds.to(torch.int64)
    h = torch.zeros_like(seeds)
    h = mix_block(h, seeds & MASK32)
    h = mix_block(h, (seeds >> 32) & MASK32)
    return mix_block(h, positions.to(torch.int64) & MASK32)


def hash_tokens(row_state: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Finish the hash with the token block: ``(rows,)`` state × ``(rows, k)`` token ids → ``(rows, k)`` uint32 in int64."""
    h = mix_block(row_state.to(torch.int64).unsqueeze(1), token_ids.to(torch.int64))
    return fmix32(h ^ KEY_BYTES)


def gumbel_from_hash(hashed: torch.Tensor) -> torch.Tensor:
    """uint32 hashes (in int64) → standard Gumbel noise, float32. ``u = (h + 0.5) / 2**32`` is in (0, 1)."""
    uniform = (hashed.to(torch.float64) + 0.5) * (2.0**-32)
    return (-torch.log(-torch.log(uniform))).to(torch.float32)


def gumbel_noise_torch(row_state: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Gumbel noise of each (row, token).

    Args:
        row_state: ``(rows,)``, int64, from :func:`seeded_row_state`.
        token_ids: ``(rows, k)``, integer token ids.

    Returns:
        ``(rows, k)``, float32.
    """
    return gumbel_from_hash(hash_tokens(row_state, token_ids))


def gumbel_argmax_torch(
    scores: torch.Tensor, row_state: torch.Tensor, token_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Column of ``argmax(scores + gumbel)`` per row: a draw from ``softmax(scores)``.

    Args:
        scores: ``(rows, k)``, float32 log-weights (logits divided by temperature); ``-inf`` excludes a column.
        row_state: ``(rows,)``, int64, from :func:`seeded_row_state`.
        token_ids: ``(rows, k)``, the token id of each column; ``None`` when column ``j`` is token ``j``.

    Returns:
        ``(rows,)``, int64 column index (the first one on a tie). A row of only ``-inf`` returns 0.
    """
    if token_ids is None:
        token_ids = torch.arange(scores.shape[1], device=scores.device).expand(scores.shape[0], -1)
    noise = gumbel_noise_torch(row_state, token_ids)
    return (scores.to(torch.float32) + noise).argmax(dim=1)
