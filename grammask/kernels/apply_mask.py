"""``apply_mask``: one signature, one implementation per file, chosen here.

- ``torch`` (:mod:`grammask.kernels.apply_mask_torch`): table lookup + in-place clamp; the CPU path.
- ``triton`` (:mod:`grammask.kernels.apply_mask_triton`): the CUDA kernel, imported only when used; it also
  runs on CPU tensors when ``TRITON_INTERPRET=1`` was set before triton was imported (that is how the tests
  prove it without a GPU).
"""

from __future__ import annotations

import enum
import importlib.util
import os
from typing import Callable

import torch

from grammask.checks import check_tensor
from grammask.errors import InvalidParameterError
from grammask.kernels.apply_mask_torch import apply_mask_torch

LOGITS_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_INDEX_DTYPES = (torch.int32, torch.int64)


class ApplyMaskImpl(str, enum.Enum):
    """Which implementation of :func:`apply_mask` runs."""

    AUTO = "auto"
    """Triton for CUDA tensors when triton is installed, torch otherwise."""
    TORCH = "torch"
    TRITON = "triton"


def apply_mask(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    indices: torch.Tensor | None = None,
    impl: ApplyMaskImpl | str = ApplyMaskImpl.AUTO,
) -> None:
    """Set the logits of tokens the bitmask forbids to ``-inf``, in place.

    For each bitmask row ``i`` (logits row ``r = indices[i]``, or ``r = i`` without ``indices``) and
    column ``j < vocab``: ``logits[r, j] = -inf`` unless bit ``j % 32`` of ``bitmask[i, j // 32]`` is 1.
    Logit columns at or past ``32 * words`` are masked; bitmask words past the vocabulary are ignored.
    Logits rows no bitmask row applies to are untouched. A row named twice in ``indices`` gets the
    intersection of its masks. (One edge: the torch path leaves a masked NaN logit NaN; Triton writes ``-inf``.)

    Args:
        logits: ``(batch, vocab)``, float32 / float16 / bfloat16, modified in place. Any strides
            (e.g. ``wide[:, :vocab]`` or ``wide[::2]``).
        bitmask: ``(rows, words)``, int32, same device as ``logits``; bit ``j`` (least significant first)
            of word ``w`` is token ``32 * w + j``, 1 = allowed. ``words`` may be more or fewer than
            ``ceil(vocab / 32)``.
        indices: ``(rows,)``, int32 / int64, same device, values in ``[0, batch)``; bitmask row ``i``
            applies to logits row ``indices[i]``. ``None``: ``rows`` must equal ``batch``. The range is
            checked where the values are read anyway (CPU tensors, the torch path); the Triton kernel
            on CUDA does not read them on the host (that would make the step wait for the device) and
            writes nothing for an index out of range.
        impl: ``"auto"``, ``"torch"`` or ``"triton"`` (see :class:`ApplyMaskImpl`).

    Raises:
        InvalidParameterError: an argument that is not a dense tensor, a wrong dtype, shape or device
            (naming the argument, expected vs got), logits whose rows share memory (``expand()``, so
            one row's mask would land on others) or that autograd forbids editing in place, an index
            out of range, or an implementation that cannot run here.
    """
    check_tensor("logits", logits)
    check_tensor("bitmask", bitmask)
    choice = _resolve_impl(impl, logits.device)
    _check_args(logits, bitmask, indices, read_indices=choice is ApplyMaskImpl.TORCH)
    _IMPLEMENTATIONS[choice]()(logits, bitmask, indices)


def _load_torch() -> Callable[..., None]:
    return apply_mask_torch


def _load_triton() -> Callable[..., None]:
    from grammask.kernels.apply_mask_triton import apply_mask_triton

    return apply_mask_triton


_IMPLEMENTATIONS: dict[ApplyMaskImpl, Callable[[], Callable[..., None]]] = {
    ApplyMaskImpl.TORCH: _load_torch,
    ApplyMaskImpl.TRITON: _load_triton,
}


def triton_available() -> bool:
    """Whether triton is installed (without importing it)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreting() -> bool:
    """Whether ``TRITON_INTERPRET=1`` is set, so the Triton kernel can run on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _resolve_impl(impl: ApplyMaskImpl | str, device: torch.device) -> ApplyMaskImpl:
    try:
        choice = ApplyMaskImpl(impl)
    except ValueError:
        allowed = " or ".join(repr(member.value) for member in ApplyMaskImpl)
        raise InvalidParameterError("impl", impl, allowed) from None
    if choice is ApplyMaskImpl.AUTO:
        use_triton = device.type == "cuda" and triton_available()
        return ApplyMaskImpl.TRITON if use_triton else ApplyMaskImpl.TORCH
    if choice is ApplyMaskImpl.TRITON:
        if not triton_available():
            raise InvalidParameterError("impl", impl, "'torch' or 'auto': triton is not installed (pip install triton)")
        if device.type != "cuda" and not triton_interpreting():
            raise InvalidParameterError(
                "impl", impl, f"CUDA tensors for 'triton' (got {device}; set TRITON_INTERPRET=1 to interpret on CPU)"
            )
    return choice


def has_overlapping_rows(tensor: torch.Tensor) -> bool:
    """Whether two elements of a 2-D tensor share memory (a stride of 0, or rows that interleave)."""
    dims = sorted((tensor.stride(d), tensor.shape[d]) for d in range(2) if tensor.shape[d] > 1)
    if not dims:
        return False
    (inner_stride, inner_size), *outer = dims
    return inner_stride == 0 or any(stride < inner_stride * inner_size for stride, _ in outer)


def _check_args(
    logits: torch.Tensor, bitmask: torch.Tensor, indices: torch.Tensor | None, *, read_indices: bool
) -> None:
    if logits.dim() != 2:
        raise InvalidParameterError("logits.shape", tuple(logits.shape), "2 dimensions (batch, vocab)")
    if has_overlapping_rows(logits):
        raise InvalidParameterError(
            "logits.stride", logits.stride(), "logits whose elements do not share memory (not an expand()ed view)"
        )
    if logits.requires_grad and logits.is_leaf and torch.is_grad_enabled():
        raise InvalidParameterError("logits.requires_grad", True, "logits autograd lets us edit in place (use torch.no_grad())")
    if logits.dtype not in LOGITS_DTYPES:
        raise InvalidParameterError("logits.dtype", logits.dtype, "torch.float32, torch.float16 or torch.bfloat16")
    if bitmask.dim() != 2:
        raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), "2 dimensions (rows, words)")
    if bitmask.dtype != torch.int32:
        raise InvalidParameterError("bitmask.dtype", bitmask.dtype, "torch.int32")
    if bitmask.device != logits.device:
        raise InvalidParameterError("bitmask.device", bitmask.device, f"the logits' device {logits.device}")
    if indices is None:
        if bitmask.shape[0] != logits.shape[0]:
            raise InvalidParameterError(
                "bitmask.shape", tuple(bitmask.shape), f"{logits.shape[0]} rows, one per logits row (or pass indices)"
            )
        return
    _check_indices(indices, rows=bitmask.shape[0], batch=logits.shape[0], device=logits.device, read=read_indices)


def _check_indices(indices: torch.Tensor, *, rows: int, batch: int, device: torch.device, read: bool) -> None:
    if not isinstance(indices, torch.Tensor):
        raise InvalidParameterError("indices", type(indices).__name__, "a torch.Tensor of int32 / int64")
    if indices.dtype not in _INDEX_DTYPES:
        raise InvalidParameterError("indices.dtype", indices.dtype, "torch.int32 or torch.int64")
    if indices.device != device:
        raise InvalidParameterError("indices.device", indices.device, f"the logits' device {device}")
    if tuple(indices.shape) != (rows,):
        raise InvalidParameterError("indices.shape", tuple(indices.shape), f"({rows},), one per bitmask row")
    # The range check reads values: done where they are read anyway, so a CUDA step on the Triton
    # kernel never waits for the device (the kernel itself skips an index out of range).
    if rows and (read or indices.device.type == "cpu") and not (0 <= int(indices.min()) and int(indices.max()) < batch):
        bad = indices[(indices < 0) | (indices >= batch)]
        raise InvalidParameterError("indices", bad.tolist()[:8], f"values in [0, {batch}) (logits rows)")
