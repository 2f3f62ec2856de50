"""The packed token bitmask and filling it from many matchers."""

from grammask.masking.batch import fill_next_token_bitmask
from grammask.masking.draft import fill_draft_bitmask
from grammask.masking.bitmask import (
    BITMASK_DTYPE,
    allocate_token_bitmask,
    bitmask_shape,
    bitmask_to_bool,
    bitmask_width,
    bool_to_bitmask,
    reset_token_bitmask,
)

__all__ = [
    "BITMASK_DTYPE",
    "allocate_token_bitmask",
    "bitmask_shape",
    "bitmask_to_bool",
    "bitmask_width",
    "bool_to_bitmask",
    "fill_draft_bitmask",
    "fill_next_token_bitmask",
    "reset_token_bitmask",
]
