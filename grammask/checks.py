"""Argument checks shared by the public entry points: a malformed argument becomes an
:class:`~grammask.errors.InvalidParameterError` that names it, never a foreign exception later on."""

from __future__ import annotations

import enum
import operator
from typing import Any, TypeVar

import torch

from grammask.errors import InvalidParameterError

E = TypeVar("E", bound=enum.Enum)

MAX_VOCAB_SIZE = 2**31 - 1
"""The largest vocabulary: token ids are int32 wherever they are packed (bitmasks, xgrammar)."""


def as_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as a Python int (ints, NumPy ints, one-element integer tensors) in ``[low, high]``.

    Raises:
        InvalidParameterError: a bool, a float, a string or anything else that is not an integer, or
            an integer out of range.
    """
    if type(value) is not int:
        if isinstance(value, bool):
            raise InvalidParameterError(name, value, _int_words(low, high))
        try:
            value = operator.index(value)
        except (TypeError, RuntimeError):  # RuntimeError: a tensor of several elements
            raise InvalidParameterError(name, value, _int_words(low, high)) from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidParameterError(name, value, _int_words(low, high))
    return value


def _int_words(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an int in [{low}, {high}]"
    if low is not None:
        return f"an int >= {low}"
    if high is not None:
        return f"an int <= {high}"
    return "an int"


def as_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (a truthy string such as ``"no"`` is not silently read as true)."""
    if not isinstance(value, bool):
        raise InvalidParameterError(name, value, "True or False")
    return value


def as_enum(name: str, value: Any, enum_type: type[E]) -> E:
    """``value`` as a member of ``enum_type`` (a member, or a member's value such as ``"compact"``)."""
    try:
        return enum_type(value)
    except (ValueError, TypeError):
        allowed = ", ".join(repr(member.value) for member in enum_type)
        raise InvalidParameterError(name, value, f"one of {allowed}") from None


def as_device(name: str, value: Any) -> torch.device:
    """``value`` as a ``torch.device`` (a device, or a string such as ``"cuda:0"``)."""
    try:
        return torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise InvalidParameterError(name, value, "a torch.device or a device string such as 'cpu' or 'cuda:0'") from None


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are the same, ``cuda`` meaning the current CUDA device (``cuda:0`` here)."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or (a.index is not None and b.index is not None):
        return a.index == b.index
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def check_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` if it is a dense ``torch.Tensor``."""
    if not isinstance(value, torch.Tensor):
        raise InvalidParameterError(name, type(value).__name__, "a torch.Tensor")
    if value.layout is not torch.strided:
        raise InvalidParameterError(f"{name}.layout", value.layout, "torch.strided (a dense tensor)")
    return value


def check_instance(name: str, value: Any, expected: type | tuple[type, ...], words: str) -> Any:
    """``value`` if it is an ``expected`` instance; ``words`` says what is expected."""
    if not isinstance(value, expected):
        raise InvalidParameterError(name, type(value).__name__, words)
    return value


__all__ = ["MAX_VOCAB_SIZE", "as_bool", "as_device", "as_enum", "as_int", "check_instance", "check_tensor", "same_device"]
