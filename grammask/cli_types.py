"""argparse value types shared by the subcommands: a bad value is reported by argparse with the
option's name (``argument --max-new-tokens: expected an int >= 1, got '0'``)."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """An int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite float >= 0."""
    return _float_at_least(text, 0.0, strict=False)


def positive_float(text: str) -> float:
    """A finite float > 0."""
    return _float_at_least(text, 0.0, strict=True)


def _float_at_least(text: str, low: float, *, strict: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"expected a number {'>' if strict else '>='} {low:g}, got {text!r}")
    return value
