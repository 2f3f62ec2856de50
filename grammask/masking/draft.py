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

from grammask.errors import InvalidParameterError
from grammask.grammars.base import Matcher
from grammask.masking.batch import fill_next_token_bitmask

__all__ = ["fill_draft_bitmask"]


class _DraftWalk:
    """One request's walk, behind the ``fill_next_token_bitmask(bitmask, row)`` that the shared
    thread pool of :func:`~grammask.masking.batch.fill_next_token_bitmask` calls; ``row`` is the request's first row."""

    def __init__(self, matcher: Matcher, drafts: Sequence[int]) -> None:
        self.matcher, self.drafts, self.valid = matcher, [int(d) for d in drafts], 0

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
        InvalidParameterError: a count of drafts that does not match the matchers, or a bitmask too small.
    """
    if len(draft_token_ids) != len(matchers):
        raise InvalidParameterError("draft_token_ids", f"{len(draft_token_ids)} lists", f"one per matcher ({len(matchers)})")
    starts, row = [], 0
    for drafts in draft_token_ids:
        starts.append(row)
        row += len(drafts) + 1
    if bitmask.dim() != 2 or bitmask.shape[0] < row:
        raise InvalidParameterError("bitmask.shape", tuple(bitmask.shape), f"at least {row} rows: sum(K_i + 1)")
    walks = [_DraftWalk(m, d) for m, d in zip(matchers, draft_token_ids)]
    fill_next_token_bitmask(walks, bitmask, starts, max_workers=max_workers)
    return [w.valid for w in walks]
