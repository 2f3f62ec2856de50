"""The packed token bitmask: public layout and helpers.

Layout (the same as xgrammar's, so engines can mix them): ``torch.int32``, shape
``(batch, ceil(vocab_size / 32))``; bit ``j`` (least significant first) of word ``w`` is token
``32 * w + j``; 1 = allowed.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from grammask.checks import MAX_VOCAB_SIZE, as_device, as_int, check_tensor
from grammask.errors import InvalidParameterError

BITMASK_DTYPE = torch.int32
"""dtype of every bitmask."""

_BIT_VALUES = torch.tensor([1 << j for j in range(31)] + [-(1 << 31)], dtype=torch.int32)


def bitmask_width(vocab_size: int) -> int:
    """Words per row: ``ceil(vocab_size / 32)``."""
    return (vocab_size + 31) // 32


def bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """``(batch_size, ceil(vocab_size / 32))``."""
    return (batch_size, bitmask_width(vocab_size))


def allocate_token_bitmask(batch_size: int, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A new bitmask with every token allowed.

    Returns:
        ``(batch_size, ceil(vocab_size / 32))``, int32, all bits set. Allocated in pinned memory when
        ``device`` is CPU and CUDA is available, so copies to the GPU can be asynchronous.
    """
    batch_size = as_int("batch_size", batch_size, low=0)
    vocab_size = as_int("vocab_size", vocab_size, low=1, high=MAX_VOCAB_SIZE)
    device = as_device("device", device)
    pin = device.type == "cpu" and torch.cuda.is_available()
    try:
        bitmask = torch.full(bitmask_shape(batch_size, vocab_size), -1, dtype=BITMASK_DTYPE, device=device)
    except (RuntimeError, MemoryError) as exc:  # too large for memory, or a device that is not there
        raise InvalidParameterError(
            "batch_size, vocab_size, device", (batch_size, vocab_size, str(device)), f"a bitmask that can be allocated ({exc})"
        ) from None
    return bitmask.pin_memory() if pin else bitmask


def check_fillable(bitmask: object) -> None:
    """Raise unless ``bitmask`` is what a fill may write into: a contiguous 2-D int32 CPU tensor.

    Matchers write rows in place through the host memory, so a view whose rows share memory
    (``expand()``) or skip rows (``big[::2]``) would land in other rows (native fills ignore strides);
    fill a contiguous tensor and copy it where it belongs.

    Raises:
        InvalidParameterError: naming what is wrong (type, layout, dtype, device, shape or strides).
    """
    if not isinstance(bitmask, torch.Tensor):
        raise InvalidParameterError("bitmask", type(bitmask).__name__, "a torch.Tensor (batch, ceil(vocab_size / 32)) of int32")
    if bitmask.layout is not torch.strided:
        raise InvalidParameterError("bitmask.layout", bitmask.layout, "torch.strided (a dense tensor)")
    if bitmask.dtype != BITMASK_DTYPE:
        raise InvalidParameterError("bitmask.dtype", bitmask.dtype, str(BITMASK_DTYPE))
    if bitmask.device.type != "cpu":
        raise InvalidParameterError("bitmask.device", bitmask.device, "a CPU tensor (copy it to the GPU after filling)")
    if bitmask.dim() != 2:
        raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), "2 dimensions (batch, ceil(vocab_size / 32))")
    if not bitmask.is_contiguous():
        raise InvalidParameterError(
            "bitmask.stride", bitmask.stride(), "a contiguous tensor (not an expand()ed or strided view; fill a contiguous one)"
        )


_VIEWS: dict[int, tuple["weakref.ref[torch.Tensor]", np.ndarray, int, torch.Size, list, int]] = {}
"""By ``id`` of a tensor: (weak reference to it, its NumPy view, its address and shape when the view
was made, the views of its rows made so far (``None`` where not yet), its width)."""
_MAX_VIEWS = 16


def _known_entry(bitmask: torch.Tensor) -> tuple | None:
    """The entry :func:`host_words` made for ``bitmask`` if the tensor is still that one, at the
    same address and of the same shape (so the checks made then still hold); else ``None``."""
    entry = _VIEWS.get(id(bitmask))
    if entry is not None and entry[0]() is bitmask and bitmask.data_ptr() == entry[2] and bitmask.shape == entry[3]:
        return entry
    return None


def host_words(bitmask: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU bitmask (``[batch, width]`` int32), shared by every matcher that fills
    it: ``Tensor.numpy()`` costs up to ~80 µs when its allocator is cold, a lookup here ~0.3 µs.
    A view is dropped when its tensor is freed, and made again when the tensor's memory moved or
    its shape changed (``resize_``, ``set_``).

    Raises:
        InvalidParameterError: ``bitmask`` fails :func:`check_fillable`.
    """
    entry = _known_entry(bitmask)
    if entry is not None:
        return entry[1]
    check_fillable(bitmask)
    if len(_VIEWS) >= _MAX_VIEWS:
        _VIEWS.clear()
    view = bitmask.numpy()
    key = id(bitmask)
    rows = [None] * len(view)
    _VIEWS[key] = (weakref.ref(bitmask, lambda _ref, key=key: _VIEWS.pop(key, None)), view, bitmask.data_ptr(), bitmask.shape, rows, view.shape[1])
    return view


def host_row(bitmask: torch.Tensor, row: int, width: int) -> np.ndarray:
    """The NumPy view of ``bitmask[row]`` a matcher fills, after checking the bitmask
    (:func:`check_fillable`), its width and the row. It is on every warm mask fill, so a tensor
    already seen, with a plain int row, takes a short path: the checks made when its view was
    first made still hold while it has the same address and shape, and each row's view is kept.

    Args:
        bitmask: ``(batch, width)``, int32, contiguous, on the CPU.
        row: an int in ``[0, batch)``.
        width: the words per row the matcher's vocabulary needs, ``ceil(vocab_size / 32)``.

    Raises:
        InvalidParameterError: a malformed bitmask, another width, or a row that is not an int in range.
    """
    entry = _known_entry(bitmask) if type(row) is int else None
    if entry is not None and entry[5] == width and 0 <= row < len(entry[4]):
        found = entry[4][row]
        if found is None:
            found = entry[4][row] = entry[1][row]
        return found
    words = host_words(bitmask)
    if words.shape[1] != width:
        raise InvalidParameterError(
            "bitmask.shape", tuple(words.shape), f"(batch, {width}): {width} words per row for this vocabulary"
        )
    row = as_int("row", row)
    if not 0 <= row < words.shape[0]:
        raise InvalidParameterError("row", row, f"a row in [0, {words.shape[0]}) of the bitmask")
    return words[row]


def reset_token_bitmask(bitmask: torch.Tensor) -> None:
    """Allow every token again, in place. ``bitmask``: ``(batch, words)``, int32."""
    _check_bitmask_dtype(check_tensor("bitmask", bitmask))
    bitmask.fill_(-1)


def _check_bitmask_dtype(bitmask: torch.Tensor) -> None:
    if bitmask.dtype != BITMASK_DTYPE:
        raise InvalidParameterError("bitmask.dtype", bitmask.dtype, str(BITMASK_DTYPE))


def _check_rank(name: str, tensor: torch.Tensor) -> None:
    if tensor.dim() not in (1, 2):
        raise InvalidParameterError(f"{name}.shape", tuple(tensor.shape), "1 or 2 dimensions")


def bool_to_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """Pack a boolean mask.

    Args:
        allowed: ``(batch, vocab_size)`` or ``(vocab_size,)``, bool; True = allowed.

    Returns:
        ``(batch, ceil(vocab_size / 32))`` (or ``(words,)`` for 1-D input), int32, on ``allowed``'s device.
        Padding bits past ``vocab_size`` are 0 (not allowed).
    """
    if check_tensor("allowed", allowed).dtype != torch.bool:
        raise InvalidParameterError("allowed.dtype", allowed.dtype, "torch.bool")
    _check_rank("allowed", allowed)
    squeeze = allowed.dim() == 1
    rows = allowed.reshape(1, -1) if squeeze else allowed
    batch, vocab = rows.shape
    padded = torch.zeros(batch, bitmask_width(vocab) * 32, dtype=torch.bool, device=rows.device)
    padded[:, :vocab] = rows
    words = padded.view(batch, -1, 32).to(torch.int32) * _BIT_VALUES.to(rows.device)
    packed = words.sum(dim=2, dtype=torch.int32)
    return packed[0] if squeeze else packed


def bitmask_to_bool(bitmask: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
    """Unpack a bitmask.

    Args:
        bitmask: ``(batch, words)`` or ``(words,)``, int32.
        vocab_size: how many columns to return, at most ``32 * words`` (default ``32 * words``).

    Returns:
        ``(batch, vocab_size)`` (or ``(vocab_size,)``), bool, on ``bitmask``'s device.
    """
    _check_bitmask_dtype(check_tensor("bitmask", bitmask))
    _check_rank("bitmask", bitmask)
    if vocab_size is not None:
        vocab_size = as_int("vocab_size", vocab_size, low=0, high=32 * bitmask.shape[-1])
    squeeze = bitmask.dim() == 1
    rows = bitmask.reshape(1, -1) if squeeze else bitmask
    shifts = torch.arange(32, dtype=torch.int32, device=rows.device)
    allowed = ((rows.unsqueeze(-1) >> shifts) & 1).bool().reshape(rows.shape[0], -1)
    if vocab_size is not None:
        allowed = allowed[:, :vocab_size]
    return allowed[0] if squeeze else allowed
