"""Kernels, one dispatcher each over a torch implementation and a Triton one: applying the token
bitmask to logits, and seeded Gumbel-max sampling."""

from grammask.kernels.apply_mask import apply_mask
from grammask.kernels.gumbel_sample import gumbel_argmax, gumbel_noise

__all__ = ["apply_mask", "gumbel_argmax", "gumbel_noise"]
