"""The bitmask rows of speculative drafts: one row per draft position, from each request's matcher.

For a request with drafts ``d_0 … d_{K-1}``, row ``j`` (``0 <= j <= K``) is the mask after
``d_0 … d_{j-1}``: the matcher is walked forward over the drafts with the public matcher API
(``fill_next_token_bitmask`` then ``accept_token``) and rolled back, so it ends where it started.
Where the grammar rejects ``d_j``, the rows after ``j`` are all zero: the rejection sampler rejects
``d_j`` at row ``j`` (it is outside that mask) and never reads them.
"""

from __future__ import annotations

from typing import Sequence

import torch

from grammask.checks import as_int
from grammask.errors import InvalidParameterError
from grammask.grammars.base import Matcher
from grammask.masking.batch import check_matchers, fill_rows
from grammask.masking.bitmask import check_fillable

__all__ = ["fill_draft_bitmask"]


class _DraftWalk:
    """One request's walk, behind the ``fill_next_token_bitmask(bitmask, row)`` that the shared
    thread pool of :func:`~grammask.masking.batch.fill_next_token_bitmask` calls; ``row`` is the request's first row."""

    def __init__(self, matcher: Matcher, drafts: list[int]) -> None:
        self.matcher, self.drafts, self.valid = matcher, drafts, 0

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        matcher = self.matcher
        matcher.fill_next_token_bitmask(bitmask, row)
        accepted = 0
        for j, draft in enumerate(self.drafts):
            if not matcher.accept_token(draft):
                bitmask[row + j + 1 : row + len(self.drafts) + 1] = 0
                break
            accepted += 1
            matcher.fill_next_token_bitmask(bitmask, row + j + 1)
        if accepted:
            matcher.rollback(accepted)
        self.valid = accepted


def fill_draft_bitmask(
    matchers: Sequence[Matcher],
    draft_token_ids: Sequence[Sequence[int]],
    bitmask: torch.Tensor,
    *,
    max_workers: int | None = None,
) -> list[int]:
    """Fill the ``K_i + 1`` rows of every request (requests one after another) and return, per request,
    how many of its drafts the grammar accepts in a row. Matchers end in the state they started in.

    Args:
        matchers: one per request.
        draft_token_ids: per request, its ``K_i`` drafts.
        bitmask: ``(>= sum(K_i + 1), ceil(vocab_size / 32))``, int32, on the CPU.
        max_workers: threads for the walks, as :func:`~grammask.masking.batch.fill_next_token_bitmask`.

    Raises:
        InvalidParameterError: matchers that are not a list of matchers, drafts that are not one list of
            token ids per matcher, a bitmask that is not a contiguous 2-D int32 CPU tensor or has too few
            rows, or ``max_workers < 1``.
    """
    check_matchers(matchers)
    drafts = _draft_lists(draft_token_ids, len(matchers))
    check_fillable(bitmask)
    starts, row = [], 0
    for request in drafts:
        starts.append(row)
        row += len(request) + 1
    if bitmask.shape[0] < row:
        raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), f"at least {row} rows: sum(K_i + 1)")
    walks = [_DraftWalk(m, d) for m, d in zip(matchers, drafts)]
    fill_rows(walks, bitmask, starts, max_workers=max_workers)
    return [w.valid for w in walks]


def _draft_lists(draft_token_ids: Sequence[Sequence[int]], num_matchers: int) -> list[list[int]]:
    """Each request's drafts as a list of ints (checked: one list per matcher, token ids >= 0)."""
    if isinstance(draft_token_ids, (str, bytes)) or not isinstance(draft_token_ids, Sequence):
        raise InvalidParameterError("draft_token_ids", type(draft_token_ids).__name__, "a list of token id lists, one per matcher")
    if len(draft_token_ids) != num_matchers:
        raise InvalidParameterError("draft_token_ids", f"{len(draft_token_ids)} lists", f"one per matcher ({num_matchers})")
    lists = []
    for i, request in enumerate(draft_token_ids):
        if isinstance(request, (str, bytes)) or not isinstance(request, (Sequence, torch.Tensor)):
            raise InvalidParameterError(f"draft_token_ids[{i}]", type(request).__name__, "a list of token ids")
        lists.append([as_int(f"draft_token_ids[{i}][{j}]", token, low=0) for j, token in enumerate(request)])
    return lists
