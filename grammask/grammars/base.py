"""The backend protocol: a backend compiles a spec into a :class:`CompiledGrammar`, whose
:meth:`~CompiledGrammar.matcher` gives one :class:`Matcher` per request.

A compiled grammar is immutable and shared between threads and requests; a matcher is a cheap
cursor over it that holds one request's state.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import torch

from grammask.checks import as_int
from grammask.errors import InvalidParameterError
from grammask.grammars.spec import Spec
from grammask.tokenizer import TokenizerInfo


@dataclass(frozen=True)
class Unenforced:
    """A keyword (or construct) of a spec that a backend does not enforce.

    Attributes:
        keyword: the keyword, e.g. ``"uniqueItems"``.
        path: JSON pointer of the schema object that holds it.
        reason: one line on what is accepted instead (e.g. "any array of the item type").
    """

    keyword: str
    path: str
    reason: str = ""

    def __str__(self) -> str:
        suffix = f" ({self.reason})" if self.reason else ""
        return f"{self.keyword} at '{self.path or '/'}'{suffix}"


class Matcher(abc.ABC):
    """One request's position in a compiled grammar.

    The mask and :meth:`accept_token` always agree: a token is allowed by
    :meth:`fill_next_token_bitmask` exactly when :meth:`accept_token` would accept it.
    A rejected token leaves the state unchanged. Special tokens are never accepted inside a
    structure; an EOS id is accepted exactly where the structure may end, and then the matcher is
    terminated.
    """

    @abc.abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token. Returns ``False`` (state unchanged) when the token is not allowed."""

    def accept_tokens(self, token_ids: Sequence[int]) -> int:
        """Advance by each token in turn; stops at the first rejected one.

        Returns:
            how many tokens were accepted (``len(token_ids)`` when all were).
        """
        ids = _token_list(token_ids)
        for count, token_id in enumerate(ids):
            if not self.accept_token(token_id):
                return count
        return len(ids)

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """How many leading tokens of ``token_ids`` the grammar accepts, without advancing
        (for speculative decoding drafts)."""
        accepted = self.accept_tokens(_token_list(token_ids))
        if accepted:
            self.rollback(accepted)
        return accepted

    @abc.abstractmethod
    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (all zero once terminated).

        Args:
            bitmask: ``(batch, ceil(vocab_size / 32))``, int32, contiguous, on the CPU; bit ``j`` of
                word ``w`` is token ``32 * w + j``, 1 = allowed.
            row: the row to fill. Other rows are untouched. The matcher's state is not changed.

        Raises:
            InvalidParameterError: any other bitmask, or a row out of range
                (:func:`grammask.masking.bitmask.host_row`).
        """

    @abc.abstractmethod
    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""

    @abc.abstractmethod
    def is_terminated(self) -> bool:
        """Whether an EOS token has been accepted (nothing more can be accepted)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Go back to the start state."""

    @abc.abstractmethod
    def jump_forward_string(self) -> str:
        """The longest text that every valid continuation starts with (``""`` when there is a choice)."""

    @abc.abstractmethod
    def fork(self) -> "Matcher":
        """An independent copy of this matcher at the same state."""

    @property
    @abc.abstractmethod
    def num_accepted(self) -> int:
        """How many tokens have been accepted since the start (what :meth:`rollback` can undo)."""


def _token_list(token_ids: Sequence[int]) -> list[int]:
    if isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__iter__"):
        raise InvalidParameterError("token_ids", type(token_ids).__name__, "a sequence of int token ids")
    return [as_int(f"token_ids[{i}]", token) for i, token in enumerate(token_ids)]


@dataclass(frozen=True, eq=False)
class CompiledGrammar(abc.ABC):
    """A spec compiled for one tokenizer by one backend. Immutable; share it freely.

    Attributes:
        spec: what was compiled.
        tokenizer_info: the tokenizer it was compiled for.
        backend: the backend's registered name.
        unenforced: keywords the grammar does not enforce; outputs satisfy the grammar but may break these.
        narrowed: places where the grammar is stricter than the spec (valid instances it rejects),
            beyond the spec's own whitespace and property-order policies.
        choice: why this backend was chosen (set by the ``auto`` policy).
        compile_seconds: wall time of the compile.
    """

    spec: Spec
    tokenizer_info: TokenizerInfo
    backend: str
    unenforced: tuple[Unenforced, ...] = ()
    narrowed: tuple[Unenforced, ...] = ()
    choice: str = ""
    compile_seconds: float = 0.0

    @abc.abstractmethod
    def matcher(self, *, max_tokens: int | None = None) -> Matcher:
        """A fresh matcher at the start state.

        Args:
            max_tokens: a token budget for budget-aware closing. Backends that support it allow only
                tokens that leave a way to finish within the budget; others ignore it (see
                :attr:`CompiledGrammar.supports_budget`).
        """

    @property
    def supports_budget(self) -> bool:
        """Whether :meth:`matcher` honours ``max_tokens``."""
        return False

    @property
    @abc.abstractmethod
    def memory_bytes(self) -> int:
        """What the grammar holds in memory now, in bytes (an estimate; a lazily explored grammar
        grows as requests use it). :class:`~grammask.grammars.compiler.GrammarCompiler` bounds its
        cache by the sum."""

    @property
    def is_exact(self) -> bool:
        """Whether the grammar enforces every keyword of its spec."""
        return not self.unenforced

    def with_choice(self, choice: str) -> "CompiledGrammar":
        """A copy that records why its backend was chosen."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        object.__setattr__(copy, "choice", choice)
        return copy

    def with_fallback(
        self,
        compile_fallback: Callable[[], "CompiledGrammar"],
        notes: Callable[[], tuple[tuple[Unenforced, ...], tuple[Unenforced, ...]]] = lambda: ((), ()),
    ) -> "CompiledGrammar":
        """A grammar whose matchers move to ``compile_fallback()`` if a compile limit is reached
        mid-request; ``notes()`` gives the fallback's ``(unenforced, narrowed)`` lists, which such a
        grammar adds to its own (a request may end on the fallback). They are asked for on the first
        read of either list, not while compiling. This one: itself, unchanged, as its limits are
        all met when it compiles; backends that explore lazily override it."""
        return self


@dataclass(frozen=True)
class Support:
    """A backend's answer to "can you compile this spec?" (truthy when it can)."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


class Backend(abc.ABC):
    """Compiles specs for one tokenizer. A backend instance is shared; it must be thread-safe.

    Subclasses set ``name`` and are registered with :func:`grammask.grammars.registry.register_backend`.
    """

    name: ClassVar[str]

    def __init__(self, tokenizer_info: TokenizerInfo, **options: Any) -> None:
        self.tokenizer_info = tokenizer_info

    def supports(self, spec: Spec) -> Support:
        """Whether this backend can compile ``spec`` (cheap; no compile). Default: yes."""
        return Support(True)

    def predict_unenforced(self, spec: Spec) -> tuple[Unenforced, ...]:
        """What a compile of ``spec`` would list as unenforced, found without compiling (cheap).
        Default: nothing."""
        return ()

    def predict_narrowed(self, spec: Spec) -> tuple[Unenforced, ...]:
        """What a compile of ``spec`` would list as narrowed, found without compiling (cheap).
        Default: nothing."""
        return ()

    @abc.abstractmethod
    def compile(self, spec: Spec) -> CompiledGrammar:
        """Compile ``spec``. Raises a :class:`~grammask.errors.GrammaskError` subclass on failure."""


__all__ = ["Backend", "CompiledGrammar", "Matcher", "Support", "Unenforced"]
