"""Kernels: applying the token bitmask to logits (more to come: seeded sampling)."""

from grammask.kernels.apply_mask import apply_mask

__all__ = ["apply_mask"]
