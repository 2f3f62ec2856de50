"""A lazily explored byte-level DFA over an expression's derivatives.

States are numbered as they are discovered: ``0`` is the dead state (∅), ``1`` the start state.
Transitions live in a dense table ``[capacity, width]`` (int32, ``-1`` = not computed yet), one
column per atom of the expression's byte sets (:func:`~grammask.grammars.fsm.expr.byte_atoms`;
``column_of_byte`` maps a byte to its column), that grows by half again; entries are filled one
byte class at a time (one derivative per class), either a whole row (:meth:`LazyDfa.row`) or just
the class a token walk meets unknown (:meth:`LazyDfa.transition`, which the native walks call back). Readers may index a table
snapshot without the lock: a computed entry never changes, and growth copies.

Limits: :attr:`LazyDfa.max_states` caps the number of states. Exploration is lazy, so the cap can be
reached mid-generation (by a matcher stepping into new territory): the error is then raised from
the matcher call that needed the new state.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading

import numpy as np

from grammask.errors import CompileLimitError
from grammask.grammars.fsm.expr import (
    ALT_KIND,
    AND_KIND,
    BYTES_KIND,
    CALL_KIND,
    CAT_KIND,
    COUNT_KIND,
    EMPTY,
    EMPTY_KIND,
    EPS_KIND,
    STAR_KIND,
    INFINITE_LENGTH,
    NOT_KIND,
    Expr,
    byte_atoms,
    byte_classes,
    call_derivative,
    derivative,
    first_calls,
    is_plain,
    min_length,
    nullable,
)

DEAD = 0
START = 1
UNKNOWN = -1
GREEDY_WEIGHT = 1 << 20
"""Weight of the lower bound in the greedy fallback distance search (see :meth:`LazyDfa.distance`)."""
INFINITE = np.iinfo(np.int32).max
"""Distance of a state from which no accepting state is reachable."""


# ------------------------------------------------------------------ exact lengths of & / ¬ parts

SETTLE_EXPANSIONS = 256
"""Full rows the search for one ``&`` / ``¬`` node's shortest match may expand (:func:`settle`)."""
_GAVE_UP = -1
_GENERATION = [0]  # bumped whenever a node is settled: structural_length memos older than it may improve


INITIAL_CAPACITY = 16
"""States a :class:`LazyDfa`'s table holds before it first grows: a grammar has a rule automaton
per schema location, most of them with a few dozen states."""


def larger(capacity: int) -> int:
    """The next capacity of a per-state table: half as large again (a doubling leaves a third of
    a large table unused on average, and the copy holds both while it is made)."""
    return capacity + max(capacity // 2, 1)


def grown(array: np.ndarray, capacity: int, fill) -> np.ndarray:
    """A copy of ``array`` with ``capacity`` rows, the new ones set to ``fill`` (per-state tables grow
    by copying, so readers of the old array stay valid)."""
    out = np.full((capacity, *array.shape[1:]), fill, dtype=array.dtype)
    out[: len(array)] = array
    return out


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (a shared constant no caller may write)."""
    array.flags.writeable = False
    return array


def settle(node: Expr, max_states: int) -> None:
    """Find the exact shortest match of an ``&`` / ``¬`` node by a bounded search of its own lazy
    DFA and record it on the node (``node._settled``), with those of the nodes on its shortest
    path, so that a state one byte along the path is settled too. A search that gives up is
    recorded as such and not retried."""
    if node._settled is not None:
        return
    node._settled = _GAVE_UP  # until found: a search never settles its own start
    if node._has_calls:
        found = _shortest_with_free_values(node, max_states)
        if found is not None:
            node._settled = found
            _GENERATION[0] += 1
        return
    dfa = LazyDfa(node, max_states=max_states)
    try:
        found = dfa.exact_distance(START, SETTLE_EXPANSIONS)
    except CompileLimitError:
        found = None
    if found is None:
        return
    for expr, distance in dfa.known_distances():  # exact_distance records exact values only
        if expr.kind in (AND_KIND, NOT_KIND) and (expr._settled is None or expr is node):
            expr._settled = INFINITE_LENGTH if distance == INFINITE else distance
    if node._settled == _GAVE_UP:
        node._settled = INFINITE_LENGTH if found == INFINITE else found
    _GENERATION[0] += 1


def _shortest_with_free_values(node: Expr, max_states: int, weight: int = 1) -> int | None:
    """The exact shortest match of an ``&`` / ``¬`` node whose calls are of free-value rules
    (:func:`~grammask.grammars.fsm.expr.inter`): a best-first search of its derivatives, a call
    one move at the cost of its rule's shortest value, ordered by length so far plus the least
    still to read (``min_length``); a state without calls ends the search at its own settled
    length. ``INFINITE_LENGTH`` for no match; ``None`` past ``max_states`` states or where a
    state without calls stays unsettled. A ``weight`` above one counts the least length still
    to read that many times: a match is found after fewer states, but its length is only an
    upper bound (:func:`has_text`)."""
    order = itertools.count()
    dive = -1 if weight > 1 else 1  # a greedy search goes deeper first among states as close to the end
    best = {node: 0}
    pending = [(weight * node._min_length, 0, 0, node)]
    while pending:
        _, _, length, state = heapq.heappop(pending)
        if state is None:  # a state without calls, with its exact length added
            return length
        if length > best.get(state, length):
            continue
        if state._nullable or (weight > 1 and state._productive):
            return length
        moves = [(call_derivative(state, rule), _value_length(rule)) for rule in first_calls(state)]
        if not state._has_calls:
            for part in unsettled_parts(state):
                settle(part, max_states)
            rest, exact = structural_length(state)
            if not exact:
                return None
            if rest < INFINITE_LENGTH:
                heapq.heappush(pending, (length + rest, next(order), length + rest, None))
            continue
        moves += [(derivative(state, (mask & -mask).bit_length() - 1), 1) for mask in byte_classes(state)]
        for after, cost in moves:
            if after._min_length >= INFINITE_LENGTH or after._productive is False or length + cost >= best.get(after, INFINITE_LENGTH):
                continue
            if len(best) >= max_states:
                return None
            best[after] = length + cost
            key = weight * after._min_length + dive * (length + cost)
            heapq.heappush(pending, (key, next(order), length + cost, after))
    for state in best:  # the search saw every state reachable from these: none has a text
        if state._has_calls:
            state._productive = False
    return INFINITE_LENGTH


def has_text(node: Expr, max_states: int) -> bool | None:
    """Whether the ``&`` / ``¬`` node ``node`` with free-value calls matches some text (``None``:
    not decided within ``max_states`` states). Its parts' witnesses are tried first
    (:func:`witness_candidates`, a free value read as one call); else the search of
    :func:`settle`, led by the least length still to read, so that a text is found after few
    states (its length is not needed)."""
    if node._settled is not None and node._settled != _GAVE_UP:
        return node._settled < INFINITE_LENGTH
    if any(_reads_whole(node, witness) for witness in witness_candidates(node)):
        return True
    found = _shortest_with_free_values(node, max_states, weight=GREEDY_WEIGHT)
    return None if found is None else found < INFINITE_LENGTH


FREE_VALUE_MARK = b"\xff"
"""A free value in a witness (no JSON text has the byte): :func:`_reads_whole` reads it as a call."""


def _reads_whole(expr: Expr, witness: bytes) -> bool:
    """Whether ``expr`` matches ``witness``, each :data:`FREE_VALUE_MARK` a free value: a call of
    the free-value rule where ``expr`` makes one, else the value ``0``."""
    for byte in witness:
        if byte == FREE_VALUE_MARK[0]:
            called = [call_derivative(expr, rule) for rule in first_calls(expr) if getattr(rule, "free_value", False)]
            expr = called[0] if called and called[0] is not EMPTY else derivative(expr, ord("0"))
        else:
            expr = derivative(expr, byte)
        if expr is EMPTY:
            return False
    return nullable(expr)


def _value_length(rule) -> int:
    """The shortest text of a free-value rule (its body's least length; ``0`` is a value)."""
    return rule.min_length if rule.min_length is not None else rule.body._min_length


SETTLE_MAX_STATES = 50_000
"""State cap of one :func:`settle` search when no automaton's own cap applies."""


def invalidate_length_memos() -> None:
    """Make :func:`structural_length` recompute the memos that were not exact (after facts it
    reads, such as rules' lengths, became known)."""
    _GENERATION[0] += 1


def unsettled_parts(expr: Expr) -> list[Expr]:
    """The ``&`` / ``¬`` nodes of ``expr`` never tried by :func:`settle` that its shortest match may
    depend on (not those under a star, nor inside another such node).

    A node found to have none below it is marked so (``_parts_tried``: settling is permanent), and
    its subtree is not walked again: a derivative shares most of its parent's nodes, so a state's
    first distance walks only what its derivative built anew."""
    found, expanded, stack = [], set(), [expr]
    while stack:
        node = stack.pop()
        if _nothing_untried_below(node):
            continue
        if node.kind in (AND_KIND, NOT_KIND):
            if id(node) not in expanded:
                expanded.add(id(node))
                found.append(node)
        elif id(node) not in expanded:  # first visit: its parts, then itself again
            expanded.add(id(node))
            stack.append(node)
            stack.extend(part for part in node.args if not _nothing_untried_below(part))
        elif all(_nothing_untried_below(part) for part in node.args):
            node._parts_tried = True
    return found


def _nothing_untried_below(node: Expr) -> bool:
    """Whether no & / ¬ part of ``node`` (as :func:`unsettled_parts` counts them) is left to settle."""
    if node._parts_tried or node._plain or node.kind == STAR_KIND:
        return True
    return node.kind in (AND_KIND, NOT_KIND) and node._settled is not None


def structural_length(expr: Expr) -> tuple[int, bool]:
    """``(length, exact)``: the shortest match of ``expr`` from its structure (sums over
    concatenations, minima over alternatives), with every settled ``&`` / ``¬`` node's exact
    length; where an unsettled one decides it, a lower bound (:func:`min_length`).
    ``INFINITE_LENGTH`` for ∅. Memoised on the nodes (iterative: expressions nest deeply)."""
    generation = _GENERATION[0]
    stack = [expr]
    while stack:
        node = stack[-1]
        if _known_length(node, generation) is not None:
            stack.pop()
            continue
        pending = [part for part in node.args if _known_length(part, generation) is None]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        parts = [_known_length(part, generation) for part in node.args]
        if node.kind == CAT_KIND:
            (a, a_exact), (b, b_exact) = parts
            if (a >= INFINITE_LENGTH and a_exact) or (b >= INFINITE_LENGTH and b_exact):
                value = (INFINITE_LENGTH, True)
            else:
                value = (min(INFINITE_LENGTH, a + b), a_exact and b_exact)
        else:  # ALT: exact when an exact part has the least length
            least = min(length for length, _ in parts)
            value = (least, any(exact and length == least for length, exact in parts))
        node._length_memo = (generation, *value)
    return _known_length(expr, generation)


def _known_length(node: Expr, generation: int) -> tuple[int, bool] | None:
    if node.kind == CALL_KIND:  # the rule's exact shortest text once the pushdown runtime knows it
        length = getattr(node.args[0], "min_length", None)
        return (length, True) if length is not None else (node._min_length, False)
    if (node._plain and not node._has_calls) or node.kind == STAR_KIND:
        return node._min_length, True
    if node.kind in (AND_KIND, NOT_KIND):
        settled = node._settled
        return (settled, True) if settled is not None and settled != _GAVE_UP else (node._min_length, False)
    memo = node._length_memo
    if memo is not None and (memo[2] or memo[0] == generation):
        return memo[1], memo[2]
    return None


class LazyDfa:
    """The DFA of ``expr``, built on demand. Thread-safe.

    Attributes:
        table: ``[capacity, width]`` int32 transitions, ``-1`` where a row is not computed yet.
        column_of_byte: ``[256]`` uint8, the table column of each byte (bytes of one atom of the
            expression's byte sets share a column: most automata need a few dozen, not 256).
        accepting: ``[capacity]`` bool, whether each state is nullable.
        max_states: the state cap (``CompileLimitError('max_states')`` past it).
    """

    def __init__(self, expr: Expr, *, max_states: int = 50_000) -> None:
        self.max_states = max_states
        self.may_have_dead_states = not is_plain(expr)  # with & or ¬, a non-∅ state may still be dead
        self._lock = threading.RLock()
        self._exprs: list[Expr] = []
        self._ids: dict[Expr, int] = {}
        self._atoms = byte_atoms(expr)
        self.column_of_byte = _class_of_byte(self._atoms)
        self._column = bytes(self.column_of_byte)  # the same map, read one byte at a time
        self._column_bytes = np.array([(atom & -atom).bit_length() - 1 for atom in self._atoms], dtype=np.intp)  # a byte of each column
        self._partitions: dict[int, tuple[tuple[int, ...], np.ndarray, list]] = {}
        self.table = np.full((INITIAL_CAPACITY, len(self._atoms)), UNKNOWN, dtype=np.int32)
        self.accepting = np.zeros(INITIAL_CAPACITY, dtype=bool)
        self.complete = np.zeros(INITIAL_CAPACITY, dtype=bool)
        self._distance: dict[int, int] = {DEAD: INFINITE}
        self._add(EMPTY)
        if expr is EMPTY:  # the start state must exist even when it is the dead state's twin
            self._exprs.append(EMPTY)
            self.table[START, :] = DEAD
            self.complete[START] = True
        else:
            self._add(expr)
        self.table[DEAD, :] = DEAD
        self.complete[DEAD] = True

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

    def state_of(self, expr: Expr) -> int:
        """The state whose language is ``expr`` (added if new): for a caller that knows where a
        run of bytes leads without walking it. ``expr`` must be a derivative of the start."""
        with self._lock:
            return self._add(expr)

    def _grow(self) -> None:
        capacity = larger(len(self.accepting))
        # Readers holding the old arrays stay valid (entries only go from unknown to known).
        self.table = grown(self.table, capacity, UNKNOWN)
        self.accepting, self.complete = grown(self.accepting, capacity, False), grown(self.complete, capacity, False)

    # ------------------------------------------------------------------ transitions

    @property
    def width(self) -> int:
        """The table's columns (atoms of the expression's byte sets)."""
        return len(self._atoms)

    def row(self, state: int) -> np.ndarray:
        """The 256 successors of ``state`` (computed on first use). ``[256]`` int32, a new array."""
        return self.columns(state)[self.column_of_byte]

    def columns(self, state: int) -> np.ndarray:
        """The successors of ``state`` per table column (computed on first use). ``[width]`` int32."""
        if not self.complete[state]:
            self.materialise([state])
        return self.table[state]

    def materialise(self, states) -> None:
        """Compute every transition of ``states`` (an iterable of ids) not computed yet."""
        with self._lock:
            for state in states:
                state = int(state)
                if not self.complete[state]:
                    self._fill(state)
                    self.complete[state] = True  # set last: readers trust a complete row

    def _fill(self, state: int, byte: int | None = None) -> None:
        """Fill the row of ``state``: the class of ``byte`` (if still unknown), or with ``None`` every class."""
        expr = self._exprs[state]
        literal = literal_head(expr)
        if literal is not None and self._atoms[self._column[literal]] == 1 << literal:
            # inside a literal (most states of a schema's keys): its whole row, no derivative
            row = np.zeros(self.width, dtype=np.int32)  # DEAD
            row[self._column[literal]] = self._add(expr.args[1])
            self.table[state] = row  # one write: a reader never sees the byte DEAD; self.table after _add, which may grow it
            return
        classes = byte_classes(expr)
        partition = self._partition(classes)
        if byte is None or len(classes) == 1:  # the whole row, written at once
            targets = [self._add(derivative(expr, (mask & -mask).bit_length() - 1)) for mask in classes]
            self.table[state] = np.array(targets, dtype=np.int32)[partition[1]]
            return
        index = int(partition[1][self._column[byte]])
        columns = partition[2][index]
        if columns is None:
            columns = partition[2][index] = np.flatnonzero(partition[1] == index)
        if self.table[state, columns[0]] == UNKNOWN:  # (another thread may have filled it meanwhile)
            target = self._add(derivative(expr, byte))
            self.table[state, columns] = target  # self.table: _add may have grown it

    def _partition(self, classes: tuple[int, ...]) -> tuple[tuple[int, ...], np.ndarray, list]:
        """``(classes, class_of_column, columns_of_class)`` for a state's byte classes (a shared
        partition): ``[width]`` uint8 the index in ``classes`` of the class of each column, and per
        class the ``[c]`` int64 columns it covers (``None`` until a fill needs them). Kept per
        partition by identity: a large automaton's states have few distinct partitions, and hashing
        a tuple of 256-bit masks per filled state cost more."""
        known = self._partitions.get(id(classes))
        if known is None or known[0] is not classes:
            class_of_byte = _class_of_byte(classes)
            class_of_column = class_of_byte[self._column_bytes]
            if not (class_of_column[self.column_of_byte] == class_of_byte).all():
                raise AssertionError("a state's byte classes are not unions of its automaton's byte atoms")
            known = self._partitions[id(classes)] = (classes, class_of_column, [None] * len(classes))
        return known

    def transition(self, state: int, byte: int) -> int:
        """The state after ``byte`` (computed if needed; ``DEAD`` if none)."""
        column = self._column[byte]
        following = int(self.table[state, column])
        if following == UNKNOWN:
            with self._lock:
                self._fill(state, byte)
            following = int(self.table[state, column])
        return following

    def step(self, state: int, data: bytes) -> int:
        """The state after ``data`` from ``state`` (``DEAD`` if it dies)."""
        for byte in data:
            state = self.transition(state, byte)
            if state == DEAD:
                return DEAD
        return state

    def successors(self, state: int) -> list[tuple[int, int]]:
        """``(state, length)`` of every move out of ``state``: one byte to each distinct target."""
        return [(target, 1) for target in set(self.columns(state).tolist())]

    def self_loop_bytes(self, state: int) -> np.ndarray:
        """``[256]`` bool: the bytes that lead from ``state`` back to itself."""
        return self.row(state) == state

    # ------------------------------------------------------------------ distances

    def distance(self, state: int) -> int:
        """Bytes from ``state`` to an accepting state along a completion (:data:`INFINITE` if none). Cached.

        Usually exact (the fewest bytes): a state without ``&`` / ``¬`` has it in its expression
        (:func:`min_length`); one whose ``&`` / ``¬`` parts are inside it gets it from its structure
        once each part is :func:`settle`d by a small search of its own (:func:`structural_length`);
        otherwise candidate strings are tried (exact when one meets the lower
        bound), then an A* search over the lazy DFA guided by ``min_length`` (a lower bound there),
        capped at :attr:`EXACT_EXPANSIONS` full rows. Past the cap the length of the shortest
        candidate that completes is used; else a greedy search (:data:`GREEDY_WEIGHT`,
        :attr:`PATIENT_EXPANSIONS` rows), and finally an A* bounded only by ``max_states``.
        A candidate's or the greedy search's length is an upper bound. Cached values only ever
        decrease (:meth:`_improve`), and every state on a found
        path gets ``found - depth``, so the first step of a state's completion always leads to a state
        at most one byte closer: what budget-aware closing needs to stay sound.
        """
        known = self._distance.get(state)
        if known is not None:
            return known
        found = self._search_distance(state)
        self._improve(state, found)
        return self._distance[state]

    def known_distances(self):
        """Yield ``(expression, distance)`` for every state whose distance is cached."""
        for state, distance in list(self._distance.items()):
            yield self._exprs[state], distance

    EXACT_EXPANSIONS = 48
    """Full rows an exact (A*) distance search may expand before falling back to a greedy search."""
    PATIENT_EXPANSIONS = 6000
    """Cap of the greedy search, used when no candidate string completes."""

    def _improve(self, state: int, value: int) -> None:
        known = self._distance.get(state)
        if known is None or value < known:
            self._distance[state] = value

    def _estimate(self, state: int) -> tuple[int, bool]:
        """(lower bound of the distance, whether it is final: exact, or a cached value)."""
        known = self._distance.get(state)
        if known is not None:
            return known, True
        length, exact = structural_length(self._exprs[state])
        if length >= INFINITE_LENGTH:
            return INFINITE, True
        return length, exact or bool(self.accepting[state])

    def _search_distance(self, start: int) -> int:
        if self.accepting[start]:
            return 0
        settled = self._settle_parts(start)  # settles first: the structure is then walked once
        if settled is not None:
            return settled
        estimate, final = self._estimate(start)
        if final:
            return estimate
        witnessed = self._probe(start)
        if witnessed == estimate:
            return estimate  # the lower bound is met: exact
        found = self._best_first(start, weight=1, max_expansions=self.EXACT_EXPANSIONS)
        if found is not None:
            return found
        if witnessed is not None:
            return witnessed
        # A greedy completion (an upper bound, which budgets tolerate) is usually found in a few
        # dozen rows; a wide exact search over an intersection can build thousands of states.
        found = self._best_first(start, weight=GREEDY_WEIGHT, max_expansions=self.PATIENT_EXPANSIONS)
        if found is not None:
            return found
        return self._best_first(start, weight=1, max_expansions=None)

    def _settle_parts(self, state: int) -> int | None:
        """The exact distance of ``state`` from its structure once the ``&`` / ``¬`` parts that
        decide it are :func:`settle`d (each by a small search of its own), or ``None`` when one
        stays unsettled or ``state`` is itself such a part (then the state is searched whole)."""
        expr = self._exprs[state]
        if expr.kind in (AND_KIND, NOT_KIND):
            return None
        for part in unsettled_parts(expr):
            settle(part, self.max_states)
        length, exact = structural_length(expr)
        if not exact:
            return None
        return INFINITE if length >= INFINITE_LENGTH else length

    def exact_distance(self, state: int, max_expansions: int) -> int | None:
        """The distance of ``state`` if a bounded exact search finds it (``None`` otherwise); only
        exact values are recorded on the way."""
        estimate, final = self._estimate(state)
        if final:
            return estimate
        if self._probe(state, exact_only=True) == estimate:
            return estimate
        return self._best_first(state, weight=1, max_expansions=max_expansions)

    def _probe(self, start: int, *, exact_only: bool = False) -> int | None:
        """Try candidate shortest strings (:func:`witness_candidates`; for JSON one of them is
        usually a shortest completion). Returns the length of the shortest candidate that reaches
        acceptance (every state on its way gets its distance too), or ``None``. Only the
        transitions on the way are computed (no full rows). With ``exact_only``, only a candidate
        as short as the lower bound counts."""
        best: int | None = None
        bound = self._estimate(start)[0] if exact_only else None
        for witness in witness_candidates(self._exprs[start]):
            if best is not None and len(witness) >= best:
                continue
            if exact_only and len(witness) != bound:
                continue
            path = [start]
            state = start
            for byte in witness:
                state = self.step(state, bytes((byte,)))
                if state == DEAD:
                    break
                path.append(state)
            if state == DEAD or not self.accepting[state]:
                continue
            best = len(witness)
            for offset, state in enumerate(path[1:], start=1):
                self._improve(state, best - offset)
        return best

    def _best_first(self, start: int, *, weight: int, max_expansions: int | None) -> int | None:
        """Weighted A* from ``start``, ordered by ``depth + weight * lower bound``: exact with weight 1,
        otherwise a completion at most ``weight`` times the shortest, found much sooner. Returns the
        completion length found, ``INFINITE`` when nothing reachable accepts, ``None`` when
        ``max_expansions`` ran out. Bounded by :attr:`max_states` in any case."""
        estimate, _ = self._estimate(start)
        estimate *= weight
        best_depth = {start: 0}
        parent: dict[int, int] = {}
        queue = [(estimate, 0, start, False)]  # (priority, -depth: deeper first among ties, state, final)
        expansions = 0
        while queue:
            _, negative_depth, state, final = heapq.heappop(queue)
            depth = -negative_depth
            if final:
                # A* pops in order of lower bounds, so this final value is the optimum; a greedy
                # search just found a completion. States on the way get their share of it.
                found = depth + self._estimate(state)[0]
                while state != start:
                    self._improve(state, found - best_depth[state])
                    state = parent[state]
                return found
            if depth > best_depth.get(state, INFINITE):
                continue
            if max_expansions is not None and expansions >= max_expansions:
                return None
            expansions += 1
            for target, cost in self.successors(state):
                reached = depth + cost
                if target == DEAD or reached >= best_depth.get(target, INFINITE):
                    continue
                best_depth[target] = reached
                parent[target] = state
                estimate, target_final = self._estimate(target)
                if estimate != INFINITE:
                    # Greedy: by the bound alone (deeper first among ties, via the tuple).
                    priority = estimate if weight == GREEDY_WEIGHT else reached + weight * estimate
                    heapq.heappush(queue, (priority, -reached, target, target_final))
        for dead in best_depth:  # nothing reachable accepts: every state seen is dead
            self._distance[dead] = INFINITE
        return INFINITE

    def is_live(self, state: int) -> bool:
        """Whether an accepting state is reachable from ``state``."""
        if state == DEAD or self._exprs[state] is EMPTY:  # START is ∅'s twin when nothing matches
            return False
        if not self.may_have_dead_states or is_plain(self._exprs[state]):
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


def witness_candidates(expr: Expr) -> list[bytes]:
    """Candidate shortest strings of ``expr``: :func:`shortest_witness` of it and, for an ``&``, of
    each of its parts (one of them often satisfies all). Unverified; the caller checks them."""
    parts = [expr, *expr.args] if expr.kind == AND_KIND else [expr]
    found = []
    for part in parts:
        witness = shortest_witness(part)
        if witness is not None and witness not in found:
            found.append(witness)
    return sorted(found, key=len)


def shortest_witness(expr: Expr) -> bytes | None:
    """A candidate shortest string of ``expr``: exact for plain expressions; for ``&`` the witness
    of the part with the longest lower bound, for ``¬x`` the empty string when ``x`` rejects it
    (``None`` when no candidate is found). The caller verifies it."""
    try:
        return _witness(expr, {})
    except RecursionError:
        return None


def _witness(expr: Expr, memo: dict[int, bytes | None]) -> bytes | None:
    key = id(expr)
    if key in memo:
        return memo[key]
    kind = expr.kind
    result: bytes | None
    if kind == CALL_KIND and getattr(expr.args[0], "free_value", False):
        result = FREE_VALUE_MARK  # any value: the verifier reads the call (or a value's bytes)
    elif kind in (EMPTY_KIND, CALL_KIND):  # a call's text is its rule's: no byte witness here
        result = None
    elif kind in (EPS_KIND, STAR_KIND):
        result = b""
    elif kind == BYTES_KIND:
        mask = expr.args[0]
        result = bytes(((mask & -mask).bit_length() - 1,))
    elif kind == CAT_KIND:
        pieces = []
        node = expr
        while node.kind == CAT_KIND:  # the right spine, iteratively
            pieces.append(_witness(node.args[0], memo))
            node = node.args[1]
        pieces.append(_witness(node, memo))
        result = None if any(p is None for p in pieces) else b"".join(pieces)
    elif kind == ALT_KIND:
        shortest = min(min_length(p) for p in expr.args)
        result = next(
            (w for p in expr.args if min_length(p) == shortest and (w := _witness(p, memo)) is not None), None
        )
    elif kind == AND_KIND:
        longest = max(expr.args, key=min_length)
        result = _witness(longest, memo)
    elif kind == COUNT_KIND:
        piece = _witness(expr.args[0], memo)
        result = None if piece is None else piece * expr.bounds[0]
    else:  # NOT
        result = b"" if not nullable(expr.args[0]) else None
    memo[key] = result
    return result


def literal_head(expr: Expr) -> int | None:
    """The byte ``b`` when ``expr`` is ``b·rest``: then its derivative is ``rest`` by ``b`` and ∅
    by every other byte (what :func:`derivative` finds, without its calls)."""
    if expr.kind != CAT_KIND:
        return None
    head = expr.args[0]
    if head.kind != BYTES_KIND:
        return None
    mask = head.args[0]
    return None if mask & (mask - 1) else mask.bit_length() - 1


@functools.lru_cache(maxsize=4096)
def _class_of_byte(classes: tuple[int, ...]) -> np.ndarray:
    """``[256]`` uint8: the index in ``classes`` (a partition of the bytes, as masks; at most 256
    classes) of each byte's class. Read-only, shared by every state with this partition. Set
    bit by bit, the largest class as the default: partitions of rule automata hold dozens of
    single bytes (key letters), and one NumPy scatter per class cost about 5 µs each."""
    largest = max(range(len(classes)), key=lambda i: classes[i].bit_count())
    index = bytearray([largest]) * 256
    for i, mask in enumerate(classes):
        if i == largest:
            continue
        while mask:
            low = mask & -mask
            index[low.bit_length() - 1] = i
            mask ^= low
    return np.frombuffer(bytes(index), dtype=np.uint8)
