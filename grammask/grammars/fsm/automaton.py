"""A lazily explored byte-level DFA over an expression's derivatives.

States are numbered as they are discovered: ``0`` is the dead state (∅), ``1`` the start state.
Transitions live in a dense table ``[capacity, 256]`` (int32, ``-1`` = row not computed yet) that
grows by doubling; a state's row is filled all at once, one derivative per byte class. Readers may
index a table snapshot without the lock: a computed entry never changes, and growth copies.

Limits: :attr:`LazyDfa.max_states` caps the number of states. Exploration is lazy, so the cap can be
reached mid-generation (by a matcher stepping into new territory): the error is then raised from
the matcher call that needed the new state.
"""

from __future__ import annotations

import threading

import numpy as np

from grammask.errors import CompileLimitError
from grammask.grammars.fsm.expr import AND_KIND, EMPTY, NOT_KIND, Expr, byte_classes, derivative, nullable

DEAD = 0
START = 1
UNKNOWN = -1
INFINITE = np.iinfo(np.int32).max
"""Distance of a state from which no accepting state is reachable."""


def has_boolean_ops(expr: Expr) -> bool:
    """Whether ``expr`` uses ``&`` or ``¬`` (then a non-∅ state may still be dead)."""
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.kind in (AND_KIND, NOT_KIND):
            return True
        stack.extend(node.args if node.kind > 2 else ())
    return False


class LazyDfa:
    """The DFA of ``expr``, built on demand. Thread-safe.

    Attributes:
        table: ``[capacity, 256]`` int32 transitions, ``-1`` where a row is not computed yet.
        accepting: ``[capacity]`` bool, whether each state is nullable.
        max_states: the state cap (``CompileLimitError('max_states')`` past it).
    """

    def __init__(self, expr: Expr, *, max_states: int = 50_000) -> None:
        self.max_states = max_states
        self.may_have_dead_states = has_boolean_ops(expr)
        self._lock = threading.RLock()
        self._exprs: list[Expr] = []
        self._ids: dict[Expr, int] = {}
        self.table = np.full((64, 256), UNKNOWN, dtype=np.int32)
        self.accepting = np.zeros(64, dtype=bool)
        self._distance: dict[int, int] = {DEAD: INFINITE}
        self._add(EMPTY)
        self._add(expr)
        self.table[DEAD, :] = DEAD

    # ------------------------------------------------------------------ states

    @property
    def num_states(self) -> int:
        return len(self._exprs)

    def expr(self, state: int) -> Expr:
        """The expression (the language still to be matched) of ``state``."""
        return self._exprs[state]

    def _add(self, expr: Expr) -> int:
        state = self._ids.get(expr)
        if state is not None:
            return state
        state = len(self._exprs)
        if state >= self.max_states:
            raise CompileLimitError("max_states", state + 1, self.max_states, "the lazily explored DFA grew too large")
        if state >= len(self.accepting):
            self._grow()
        self._exprs.append(expr)
        self._ids[expr] = state
        self.accepting[state] = nullable(expr)
        return state

    def _grow(self) -> None:
        capacity = 2 * len(self.accepting)
        table = np.full((capacity, 256), UNKNOWN, dtype=np.int32)
        table[: len(self.table)] = self.table
        accepting = np.zeros(capacity, dtype=bool)
        accepting[: len(self.accepting)] = self.accepting
        self.table, self.accepting = table, accepting  # readers holding the old arrays stay valid

    # ------------------------------------------------------------------ transitions

    def row(self, state: int) -> np.ndarray:
        """The 256 successors of ``state`` (computed on first use). ``[256]`` int32."""
        table = self.table
        if table[state, 0] == UNKNOWN:
            self.materialise([state])
            table = self.table
        return table[state]

    def materialise(self, states) -> None:
        """Compute the transition rows of ``states`` (an iterable of ids) that are not computed yet."""
        with self._lock:
            for state in states:
                state = int(state)
                if self.table[state, 0] != UNKNOWN:
                    continue
                expr = self._exprs[state]
                row = np.empty(256, dtype=np.int32)
                for mask in byte_classes(expr):
                    low = (mask & -mask).bit_length() - 1
                    target = self._add(derivative(expr, low))
                    row[_mask_to_bytes(mask)] = target
                self.table[state] = row  # written last: a complete row or none

    def step(self, state: int, data: bytes) -> int:
        """The state after ``data`` from ``state`` (``DEAD`` if it dies)."""
        for byte in data:
            state = int(self.row(state)[byte])
            if state == DEAD:
                return DEAD
        return state

    def self_loop_bytes(self, state: int) -> np.ndarray:
        """``[256]`` bool: the bytes that lead from ``state`` back to itself."""
        return self.row(state) == state

    # ------------------------------------------------------------------ distances

    def distance(self, state: int) -> int:
        """Fewest bytes from ``state`` to an accepting state (:data:`INFINITE` if none).

        A breadth-first search over the lazy DFA, reusing distances already known: a state at depth
        ``k`` with known distance ``d`` bounds the answer by ``k + d``, and the search stops once its
        depth reaches the best bound. Cached per state.
        """
        known = self._distance.get(state)
        if known is not None:
            return known
        best = INFINITE
        frontier = [state]
        seen = {state}
        depth = 0
        while frontier and depth < best:
            next_frontier = []
            for current in frontier:
                if self.accepting[current]:
                    best = min(best, depth)
                    continue
                cached = self._distance.get(current)
                if cached is not None and current != state:
                    if cached != INFINITE:
                        best = min(best, depth + cached)
                    continue
                for target in np.unique(self.row(current)):
                    target = int(target)
                    if target != DEAD and target not in seen:
                        seen.add(target)
                        next_frontier.append(target)
            frontier = next_frontier
            depth += 1
        self._distance[state] = best
        if best == INFINITE:  # nothing reachable accepts: every state seen is dead
            for dead in seen:
                self._distance[dead] = INFINITE
        return best

    def is_live(self, state: int) -> bool:
        """Whether an accepting state is reachable from ``state``."""
        if state == DEAD:
            return False
        if not self.may_have_dead_states:
            return True  # without & and ¬, every non-∅ expression matches something
        return self.distance(state) != INFINITE

    def shortest_completion(self, state: int) -> bytes:
        """One shortest byte string from ``state`` to acceptance (``b""`` if accepting).

        Raises:
            ValueError: ``state`` is dead.
        """
        if not self.is_live(state):
            raise ValueError(f"state {state} is dead: no completion exists")
        out = bytearray()
        while not self.accepting[state]:
            goal = self.distance(state) - 1
            row = self.row(state)
            for byte in range(256):
                target = int(row[byte])
                if target != DEAD and self.distance(target) == goal:
                    out.append(byte)
                    state = target
                    break
        return bytes(out)


def _mask_to_bytes(mask: int) -> np.ndarray:
    bits = np.frombuffer(mask.to_bytes(32, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(bits, bitorder="little"))
