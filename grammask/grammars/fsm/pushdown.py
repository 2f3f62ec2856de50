"""The runtime of an fsm grammar: a pushdown automaton over bytes, its positions and token rows.

A *stack* is a chain of frames ``(rule, state)``: the top frame's state is where the text is in
that rule, every frame below holds the state its rule returns to when the call above it ends.
Stacks are interned (a frame and the id of the stack below it), so a stack is one int and a push
is one dictionary lookup. A *position* is the set of stacks the text so far may be in (usually
one; more where alternatives share a prefix, like ``anyOf`` of two object shapes), also interned.
Positions are the states of a lazily built DFA over bytes (:meth:`PushdownAutomaton.step`), so a
matcher is a stack of position ids, exactly as it was over the old single automaton.

Rows are composed, not walked whole. The tokens a stack allows are the union of:

* the tokens read wholly inside the top rule from the top state, a :class:`RuleRow` computed once
  per rule state (shared by every stack with that top: every position inside a string body of the
  same rule has the same one), from the per-tokenizer partition of the vocabulary by the state's
  self-loop bytes, so only the tokens with a byte outside that set are walked. Rows of states
  that call no grammar's own rule (a string body, a number, a format, an object's free members)
  are shared by every grammar of the tokenizer (:class:`SharedRuleRows`; those of the lexical
  pieces are made at set-up, :func:`prepare_rule_rows`);
* the tokens that leave the top rule at their very start: the rows of the stacks reached by
  returning or calling at once (:meth:`PushdownAutomaton.stack_row`, recursively, cached);
* the tokens that leave the top rule part-way (a closing quote followed by ``,"``): the rule row
  records these exits, and only their remaining bytes are read by the native pushdown walk from
  the rest of the stack (a few thousand short walks: microseconds).

A warm mask is a copy of the position's cached row; a position's first row costs a few of the
pieces above, most of them cached already. Equal rows are stored once (:class:`_RowStore`): most
positions have a single stack and exactly its row, and many stacks reached by different paths
allow the same tokens.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import ContextManager

import numpy as np

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm import walk
from grammask.grammars.fsm.automaton import DEAD, INFINITE, START, UNKNOWN, grown, larger, literal_head, read_only, shortest_witness
from grammask.grammars.fsm.collector import PAUSE_GC
from grammask.grammars.fsm.expr import CAT_KIND, Expr, has_calls
from grammask.grammars.fsm.json_text import BODY_AND_QUOTE, ENCODED_CHAR, TEXT_OPEN, excluded_closings
from grammask.grammars.fsm.expr import matches as expr_matches
from grammask.grammars.fsm.rules import Rule, RuleDfa, RuleSet
from grammask.grammars.fsm.vocab import VocabIndex

NO_PARENT = -1
MAX_GREEDY_TOKEN = 48
"""Longest token tried when cutting a completion into tokens."""
SPARSE_LIMIT = 1024
"""A rule row allowing at most this many tokens keeps their ids rather than a packed row."""
_ADVANCE_CACHE = 1 << 18
_MADE_KEPT = 4096
"""Packed rows an automaton remembers how it made (:meth:`PushdownAutomaton._put_composed`);
forgotten all at once when full."""
SHARED_ROW_BYTES = 32 << 20
"""Memory for the rule rows every grammar of one tokenizer shares (:class:`SharedRuleRows`)."""
SHARED_REACH = 8
"""A stack row whose making read more frames than this under the top is not shared
(:meth:`PushdownAutomaton._shared_key`): its key would grow with the depth."""
INITIAL_POSITIONS = 16
"""Positions an automaton's byte table holds before it first grows (it grows by half again). A
compile reaches a handful; each row is 1 KB, and every compiled grammar starts with the table."""
DEFAULT_MAX_STACKS = 4096
"""Default cap on the stacks one position holds (parses alive at once). Real schemas hold up to
about a hundred; alternatives that overlap over a recursive value (a ``oneOf`` of two object
shapes whose members recurse) double them at every level of nesting, and each byte reads them all."""
ENTRY_BYTES = 220
"""What one interned stack, position, cached step or cache key costs in Python objects (a tuple and
its dict entry, measured with ``tracemalloc``): the unit of :attr:`PushdownAutomaton.memory_bytes`."""


@dataclass(frozen=True, eq=False)
class RuleRow:
    """The tokens of one rule state, read inside its rule (shared by all stacks with that top).

    Attributes:
        words: ``[width]`` int32 packed row of the tokens read wholly inside the rule, or ``None``
            when ``ids`` holds them (few).
        ids: ``[k]`` int32 those token ids when ``words`` is ``None``.
        exit_positions: ``[x]`` int64 vocabulary positions of tokens that may leave the rule
            part-way; exit_begins ``[x]`` int64 the flat index where the rest of each begins;
            exit_ends ``[x]`` int64 where each token ends; exit_states ``[x]`` int32 the rule
            state it leaves from. Exits from states that call come first, then those from states
            that only accept (taken when a parent frame is there to return to), then the others.
        calling: how many exits leave from a state that calls.
        leaving: how many leave from a state that calls or accepts.
        derived: ``(state, ids)`` when these are the tokens and exits of ``state`` of the same rule
            less the token ids ``ids`` (``[d]`` int32) and neither state accepts or calls: then
            every stack's row over this one is that of the stack over ``state`` less ``ids``
            (:func:`_trie_node_row`); else ``None``.
    """

    words: np.ndarray | None
    ids: np.ndarray
    exit_positions: np.ndarray
    exit_begins: np.ndarray
    exit_ends: np.ndarray
    exit_states: np.ndarray
    calling: int
    leaving: int
    derived: tuple[int, np.ndarray] | None = None

    def new_words(self, width: int) -> np.ndarray:
        """``[width]`` int32 a new writable packed row of this row's tokens (a copy: one pass)."""
        if self.words is not None:
            return self.words.copy()
        words = np.zeros(width, dtype=np.int32)
        walk.set_bits(words, self.ids)
        return words

    def token_ids(self) -> np.ndarray:
        """``[k]`` int32 the tokens, unpacked if need be."""
        if self.words is None:
            return self.ids
        return walk.unpack_bits(self.words)

    @functools.cached_property
    def calling_exits(self) -> tuple[np.ndarray, ...] | None:
        """``(positions, states, begins, ends)`` of the first :attr:`calling` exits; ``None`` if none."""
        return self._first_exits(self.calling)

    @functools.cached_property
    def leaving_exits(self) -> tuple[np.ndarray, ...] | None:
        """The same of the first :attr:`leaving` exits (a parent frame is there to return to)."""
        return self._first_exits(self.leaving)

    def _first_exits(self, count: int) -> tuple[np.ndarray, ...] | None:
        if not count:
            return None
        return self.exit_positions[:count], self.exit_states[:count], self.exit_begins[:count], self.exit_ends[:count]

    @functools.cached_property
    def nbytes(self) -> int:  # read whenever a cache takes the row: summed once
        arrays = (self.words, self.ids, self.exit_positions, self.exit_begins, self.exit_ends, self.exit_states)
        return sum(a.nbytes for a in arrays if a is not None)


@dataclass(frozen=True, eq=False)
class _RunPrefixes:
    """The rows of the positions along a literal ``data``: after ``data[:k]``, ``rows[k]`` is the
    held row of its tokens (``[t]`` int32 ids, read-only, as :meth:`VocabIndex.run_prefixes`
    finds them), or ``None`` where a token runs past the literal's end, there are more than a
    held row of ids takes, or the end is not live (a row there has to ask more)."""

    data: bytes
    rows: tuple[np.ndarray | None, ...]

    @functools.cached_property
    def nbytes(self) -> int:
        return len(self.data) + sum(row.nbytes for row in self.rows if row is not None)


class _Profile(dict):
    """A stack's budget profile, ``{distance: [k] int32 ids}``, sized for a :class:`_BoundedCache`."""

    @property
    def nbytes(self) -> int:
        return sum(ids.nbytes for ids in self.values())


class _BoundedCache:
    """An LRU dict bounded by bytes: each value's ``nbytes``, once while any key holds that very
    object, and :data:`ENTRY_BYTES` per key (the most recent entry is always kept). Reading takes
    no lock; writing is for one thread at a time (the owner's lock)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict = OrderedDict()
        self._holders: dict[int, list] = {}  # id of a held value → [value, how many keys hold it]

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key):
        value = self._items.get(key)
        if value is not None:
            try:
                self._items.move_to_end(key)
            except KeyError:  # a writer evicted it meanwhile
                pass
        return value

    def put(self, key, value):
        """Hold ``value`` under ``key``; returns what is held (see :meth:`_hold`). The least recently
        used entries are dropped past :attr:`max_bytes`."""
        value = self._hold(value)
        previous = self._items.pop(key, None)
        self._items[key] = value
        if previous is None:
            self.bytes += ENTRY_BYTES
        else:
            self._release(previous)
        while self.bytes > self.max_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self.bytes -= ENTRY_BYTES
            self._release(old)
        return value

    def _hold(self, value):
        entry = self._holders.get(id(value))
        if entry is None:
            entry = self._holders[id(value)] = [value, 0]
            self.bytes += value.nbytes
        entry[1] += 1
        return value

    def _release(self, value) -> None:
        entry = self._holders[id(value)]
        entry[1] -= 1
        if not entry[1]:
            del self._holders[id(value)]
            self.bytes -= value.nbytes


class _RowStore(_BoundedCache):
    """A :class:`_BoundedCache` of held rows (C-contiguous int32 arrays: packed words, or a few
    token ids, :meth:`PushdownAutomaton.held_row`) in which equal rows are one read-only array,
    whatever keys hold them.

    A row is interned by its content: :meth:`put` returns the array already held for equal words,
    or else the row itself, made read-only: the store takes an array that owns its memory (the
    callers hand over rows they have just built and never write again; a view is copied).
    Candidates are found by a native fingerprint of the words (:func:`walk.fingerprint`: a few
    microseconds for 16 KB, where hashing a copy of its bytes took fifteen) and confirmed by
    comparing them (:func:`walk.same_bytes`). An array's bytes count once, while at least one key
    holds it: dropping a key whose array another key holds frees only the key.
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._by_fingerprint: dict[int, list[np.ndarray]] = {}
        self._fingerprints: dict[int, int] = {}  # id of a held array → its fingerprint

    @property
    def distinct_rows(self) -> int:
        return len(self._holders)

    def _hold(self, row: np.ndarray) -> np.ndarray:
        entry = self._holders.get(id(row))
        if entry is None or entry[0] is not row:  # not an array of this store: look up its content
            row = self._interned(np.ascontiguousarray(row))
        return super()._hold(row)

    def _interned(self, row: np.ndarray) -> np.ndarray:
        """The held array with ``row``'s words, or ``row`` made read-only (a copy if it is a view),
        not yet held."""
        key = walk.fingerprint(row)
        same = self._by_fingerprint.get(key)
        for held in same or ():
            if walk.same_bytes(held, row):
                return held
        found = row if row.base is None else row.copy()  # a new row is taken, not copied
        found.flags.writeable = False
        if same is None:
            self._by_fingerprint[key] = [found]
        else:
            same.append(found)
        self._fingerprints[id(found)] = key
        return found

    def _release(self, row: np.ndarray) -> None:
        super()._release(row)
        if id(row) in self._holders:
            return
        key = self._fingerprints.pop(id(row))
        same = self._by_fingerprint[key]
        same[:] = [held for held in same if held is not row]
        if not same:
            del self._by_fingerprint[key]


class _SharedRow:
    """A :class:`RuleRow` as :class:`SharedRuleRows` keeps it: its exit states and the state it
    derives from named by expression, since each rule's automaton numbers its states its own way.
    Expressions are held by weak reference: an entry keeps no grammar alive."""

    __slots__ = ("expr", "row", "sources", "exits", "derived", "nbytes")

    def __init__(self, dfa: RuleDfa, state: int, row: RuleRow) -> None:
        self.expr = weakref.ref(dfa.expr(state))
        self.row = row
        self.sources = np.flatnonzero(np.bincount(row.exit_states)) if len(row.exit_states) else _NO_IDS
        """``[d]`` the distinct exit states in the automaton that made the row, ascending."""
        self.exits = tuple(weakref.ref(dfa.expr(s)) for s in self.sources.tolist())
        self.derived = None if row.derived is None else weakref.ref(dfa.expr(row.derived[0]))
        self.nbytes = row.nbytes

    def row_in(self, dfa: RuleDfa, expr: Expr) -> RuleRow | None:
        """The row for the state of ``dfa`` whose expression is ``expr`` (``None`` if this entry is
        another expression's, or one of its expressions is gone)."""
        if self.expr() is not expr:
            return None
        exits = [ref() for ref in self.exits]
        derived = None if self.derived is None else self.derived()
        if None in exits or (self.derived is not None and derived is None):
            return None
        row, states = self.row, _NO_IDS
        if exits:
            translated = np.zeros(int(self.sources[-1]) + 1, dtype=np.int32)
            translated[self.sources] = [dfa.state_of(e) for e in exits]
            states = translated[row.exit_states]
        return RuleRow(row.words, row.ids, row.exit_positions, row.exit_begins, row.exit_ends, states, row.calling,
                       row.leaving, None if derived is None else (dfa.state_of(derived), row.derived[1]))


class SharedRuleRows:
    """Rule rows by the expression of their state, for every grammar of one tokenizer.

    A rule row depends on its state's expression alone (and on whether the rule is called, which
    sets where text may leave it): the string body, a number, an object's other members are the
    same expressions in every grammar of a text policy, so one grammar's row serves the next,
    each grammar's automaton translating the exit states into its own. Kept: the rows of states
    that call no rule or only rules shared by every grammar (:attr:`Rule.shared`), and take no
    intersection or complement: a row calling a grammar's own rules cannot serve another grammar,
    and one inside a combinator's inlined values (``not``, overlapping ``oneOf``) hardly would,
    while such a grammar makes thousands. LRU, bounded by bytes.
    """

    def __init__(self, max_bytes: int) -> None:
        self._cache = _BoundedCache(max_bytes)
        self._lock = threading.Lock()
        self.prepared: set[Expr] = set()
        """The bodies of the rules :func:`prepare_rule_rows` made the rows of (once per tokenizer)."""

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, dfa: RuleDfa, state: int) -> RuleRow | None:
        """The row of ``state`` of ``dfa`` that some grammar computed, in ``dfa``'s states."""
        expr = dfa.expr(state)
        entry = self._cache.get((id(expr), dfa.exit_mask))
        return None if entry is None else entry.row_in(dfa, expr)

    def put(self, dfa: RuleDfa, state: int, row: RuleRow) -> None:
        """Keep ``row``, the row of ``state`` of ``dfa``, if other grammars can use it."""
        expr = dfa.expr(state)
        if not E.is_plain(expr) or not _calls_shared_rules_only(expr):
            return
        entry = _SharedRow(dfa, state, row)
        with self._lock:
            self._cache.put((id(expr), dfa.exit_mask), entry)


_SHARED_ROWS: "weakref.WeakKeyDictionary[VocabIndex, SharedRuleRows]" = weakref.WeakKeyDictionary()
_SHARED_ROWS_LOCK = threading.Lock()


def shared_rule_rows(vocab: VocabIndex) -> SharedRuleRows:
    """The :class:`SharedRuleRows` of ``vocab``'s tokenizer (:data:`SHARED_ROW_BYTES`)."""
    found = _SHARED_ROWS.get(vocab)
    if found is None:
        with _SHARED_ROWS_LOCK:
            found = _SHARED_ROWS.setdefault(vocab, SharedRuleRows(SHARED_ROW_BYTES))
    return found


MAX_SHARED_NODES = 64
"""Expressions with calls whose first this many nodes do not settle that every call is to a
shared rule are not shared (the walk stays short)."""


def _calls_shared_rules_only(expr: Expr) -> bool:
    """Whether every call in ``expr`` is to a rule shared by every grammar (:attr:`Rule.shared`)."""
    if not has_calls(expr):
        return True
    stack, seen = [expr], set()
    while stack:
        node = stack.pop()
        if id(node) in seen or not node._has_calls:
            continue
        if len(seen) >= MAX_SHARED_NODES:
            return False
        seen.add(id(node))
        if node.kind == E.CALL_KIND:
            if not node.args[0].shared:
                return False
        else:
            stack.extend(node.args)
    return True


class _Building:
    """A cold section of a :class:`PushdownAutomaton`: its lock, the collector's pause
    (:data:`~grammask.grammars.fsm.collector.PAUSE_GC`) and, when no budget is active, a build
    budget. Re-entrant: a section entered inside another (a row built for a row) only takes the
    lock again, since the outermost one holds the pause and the budget for all of them."""

    __slots__ = ("_lock", "_budget", "_depth", "_entered")

    def __init__(self, lock: threading.RLock, budget: Callable[[], ContextManager] | None) -> None:
        self._lock = lock
        self._budget = budget
        self._depth = 0  # sections the lock's holder is in (only it reads or writes this)
        self._entered: ContextManager | None = None

    def __enter__(self) -> None:
        self._lock.acquire()
        if self._depth:
            self._depth += 1
            return
        try:
            PAUSE_GC.__enter__()
            try:
                budget = self._budget() if self._budget is not None and E.current_budget() is None else None
                if budget is not None:
                    budget.__enter__()
            except BaseException:
                PAUSE_GC.__exit__(None, None, None)
                raise
        except BaseException:
            self._lock.release()
            raise
        self._entered = budget
        self._depth = 1

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth:
            self._lock.release()
            return
        budget, self._entered = self._entered, None
        try:
            if budget is not None:
                budget.__exit__(*exc_info)
        finally:
            try:
                PAUSE_GC.__exit__(*exc_info)
            finally:
                self._lock.release()


class PushdownAutomaton:
    """A grammar's rules, stacks, positions and rows; shared by every matcher of the grammar.

    Thread-safe: new positions, stacks and rows are made under one lock; reading a computed
    transition or a cached row takes none.

    Args:
        rules: the grammar's rules (rule 0 is the start).
        vocab: the tokenizer's :class:`VocabIndex` (``None`` for an automaton that only reads
            bytes: no rows).
        max_positions: cap on positions (``CompileLimitError('max_states')``).
        max_stacks: cap on the stacks of one position, also while a token is read through
            (``CompileLimitError('max_stacks')``).
        max_row_bytes: memory for cached rows (a quarter for rule rows, an eighth for the
            budget profiles of stacks, the rest for the :class:`_RowStore` of position, stack and
            budget rows); the least recently used are dropped past it.
        build_budget: makes the :class:`~grammask.grammars.fsm.expr.BuildBudget` context a cold
            section (a new position, row or budget row) runs under when no budget is active
            already (a compile's own): its caps stop a first visit that runs away
            (``CompileLimitError``) as they stop a compile. ``None``: no caps.
    """

    def __init__(
        self,
        rules: RuleSet,
        vocab: VocabIndex | None,
        *,
        max_positions: int,
        max_row_bytes: int,
        max_stacks: int = DEFAULT_MAX_STACKS,
        build_budget: Callable[[], ContextManager] | None = None,
    ) -> None:
        self.rules = rules
        self.vocab = vocab
        self.max_positions = max_positions
        self.max_stacks = max_stacks
        self._lock = threading.RLock()
        self._building = _Building(self._lock, build_budget)
        self._frames: list[tuple[int, int, int]] = []
        self._stack_ids: dict[tuple[int, int, int], int] = {}
        self._stack_accepting: list[bool] = []
        self._depths: list[int] = []  # frames of each stack
        # Per stack whose row was made: the lowest and highest depth its making read a frame at
        # (highest INFINITE where a walk found no room for a call). Per top (rule, state): how many
        # frames under it and over it the last row made for it read (:meth:`_shared_stack_row`).
        self._spans: dict[int, tuple[int, int]] = {}
        self._shared: dict[tuple[int, int], tuple[int, int]] = {}
        self._frame_arrays: dict[int, np.ndarray] = {}
        self._frame_bytes = 0  # the arrays of _frame_arrays together (memory_bytes stays O(1))
        self._sets: list[tuple[int, ...]] = [()]
        self._set_ids: dict[tuple[int, ...], int] = {(): DEAD}
        self.table = np.full((INITIAL_POSITIONS, 256), UNKNOWN, dtype=np.int32)
        self.table[DEAD] = DEAD
        self.accepting = np.zeros(INITIAL_POSITIONS, dtype=bool)
        root = rules.dfas[0]
        start = (self._stack(0, START, NO_PARENT),) if root.is_live(START) else ()
        self._sets.append(start)
        if start:
            self._set_ids[start] = START
        self.accepting[START] = any(self._stack_accepting[s] for s in start)
        self._rule_rows = _BoundedCache(max_row_bytes // 4)
        self._shared_rows = None if vocab is None else shared_rule_rows(vocab)
        self._profiles = _BoundedCache(max_row_bytes // 8)
        # Keys: a position (an int >= 0: the warm lookup builds no key), a stack (``~stack``, an
        # int < 0: nor does a stack's) and ("budget", position, limit).
        self._rows = _RowStore(max_row_bytes - max_row_bytes // 4 - max_row_bytes // 8)
        self._advance: dict[tuple[int, int], int] = {}
        self._written: set[int] = set()  # positions written once without a held row (:meth:`fill`)
        self._stack_distances: dict[int, int] = {}
        self._token_distances: dict[int, tuple[int, int]] = {DEAD: (INFINITE, -1)}
        self._frame_completions: dict[tuple[int, int], bytes] = {}
        self._forced: dict[int, tuple[int, int] | None] = {}
        # (ids of the rows composed, the exit ids' bytes, with EOS) → (weak references to those
        # rows, and to the packed row made of them): an id names its array while the reference lives.
        self._made: dict[tuple, tuple[tuple[weakref.ref, ...], weakref.ref]] = {}
        # A held row of ids must be shorter than a packed row, which is how the two are told apart.
        self._max_sparse = 0 if vocab is None else min(SPARSE_LIMIT, vocab.width - 1)

    @property
    def memory_bytes(self) -> int:
        """What the automaton holds now, in bytes: its cached rows (each distinct row once), budget
        profiles and tables exactly, and a fixed :data:`ENTRY_BYTES` per position, stack, known
        step and cache key for the Python objects behind them, plus its rules' automata
        (:attr:`RuleSet.memory_bytes`)."""
        caches = (self._rows, self._rule_rows, self._profiles)
        tables = self.table.nbytes + self.accepting.nbytes + self._frame_bytes
        entries = len(self._sets) + len(self._frames) + len(self._written) + len(self._spans) + len(self._shared)
        entries += len(self._advance) + len(self._token_distances) + len(self._made)
        return sum(c.bytes for c in caches) + tables + ENTRY_BYTES * entries + self.rules.memory_bytes

    # ------------------------------------------------------------------ stacks and positions

    @property
    def num_positions(self) -> int:
        return len(self._sets)

    def stacks(self, position: int) -> tuple[int, ...]:
        """The stacks of ``position``."""
        return self._sets[position]

    def frames(self, stack: int) -> list[tuple[int, int]]:
        """``(rule, state)`` of every frame of ``stack``, bottom first."""
        out = []
        while stack != NO_PARENT:
            rule, state, stack = self._frames[stack]
            out.append((rule, state))
        return out[::-1]

    def _stack(self, rule: int, state: int, parent: int) -> int:
        """The stack ``(rule, state)`` on ``parent``, with a finished top frame popped at once."""
        if parent != NO_PARENT and self.rules.dfas[rule].is_final(state):
            return parent
        key = (rule, state, parent)
        stack = self._stack_ids.get(key)
        if stack is None:
            stack = len(self._frames)
            self._frames.append(key)
            self._stack_ids[key] = stack
            accepts = bool(self.rules.dfas[rule].flags[state] & walk.ACCEPTING)
            self._stack_accepting.append(accepts and (parent == NO_PARENT or self._stack_accepting[parent]))
            self._depths.append(1 if parent == NO_PARENT else self._depths[parent] + 1)
        return stack

    def _position(self, stacks: set[int]) -> int:
        key = tuple(sorted(stacks))
        position = self._set_ids.get(key)
        if position is not None:
            return position
        self._check_stacks(stacks)
        position = len(self._sets)
        if position >= self.max_positions:
            raise CompileLimitError("max_states", position + 1, self.max_positions, "the grammar's positions grew too many")
        if position >= len(self.accepting):
            self._grow()
        self._sets.append(key)
        self._set_ids[key] = position
        self.accepting[position] = any(self._stack_accepting[s] for s in key)
        return position

    def _check_stacks(self, stacks: set[int] | tuple[int, ...]) -> None:
        if len(stacks) > self.max_stacks:
            raise CompileLimitError("max_stacks", len(stacks), self.max_stacks,
                                    "parses alive at once: alternatives that overlap over a recursive value multiply at each level")

    def _grow(self) -> None:
        capacity = larger(len(self.accepting))
        self.table, self.accepting = grown(self.table, capacity, UNKNOWN), grown(self.accepting, capacity, False)

    def _frame_array(self, stack: int) -> np.ndarray:
        """``[d, 2]`` int32 frames of ``stack`` (bottom first); empty for :data:`NO_PARENT`."""
        if stack == NO_PARENT:
            return np.zeros((0, 2), dtype=np.int32)
        found = self._frame_arrays.get(stack)
        if found is None:
            found = np.array(self.frames(stack), dtype=np.int32).reshape(-1, 2)
            with self._lock:
                held = self._frame_arrays.setdefault(stack, found)
                if held is found:
                    self._frame_bytes += found.nbytes
            found = held
        return found

    # ------------------------------------------------------------------ bytes

    def step(self, position: int, byte: int) -> int:
        """The position after ``byte`` (``DEAD`` when no stack can read it)."""
        following = int(self.table[position, byte])
        if following != UNKNOWN:
            return following
        with self._building:
            following = int(self.table[position, byte])
            if following == UNKNOWN:
                reached = self._read_all(self._sets[position], byte)
                following = self._position(reached) if reached else DEAD
                self.table[position, byte] = following
        return following

    def walk(self, position: int, data: bytes) -> int:
        """The position after ``data`` (``DEAD`` if it cannot be read). Steps already taken are
        looked up; from the first one not yet taken, the stacks read the rest and only the end
        becomes a position (:meth:`_read_through`)."""
        for offset, byte in enumerate(data):
            following = int(self.table[position, byte])
            if following == UNKNOWN:
                if offset + 1 < len(data):
                    return self._read_through(position, data[offset:])
                following = self.step(position, byte)
            position = following
            if position == DEAD:
                break
        return position

    def _read_through(self, position: int, data: bytes) -> int:
        """The position after ``data`` read from ``position`` by its stacks, with no position made
        inside: those inside a token are never asked for a row, and each would hold a ``[256]``
        row of the step table (a token's bytes inside a key made most of a walk's positions).
        Where they can, the stacks read bytes on their expressions, making no state per byte: a
        single stack inside a literal compares them (:meth:`_read_literal`), stacks that neither
        call nor return take derivatives (:meth:`_read_derived`); a byte where a stack calls or
        returns is read by :meth:`_read_all`."""
        stacks = self._sets[position]
        offset = 0
        with self._building:
            while offset < len(data):
                if len(stacks) == 1:  # inside a literal, its bytes are compared, not stepped
                    stack, through = self._read_literal(next(iter(stacks)), data, offset)
                    if stack is None:
                        return DEAD
                    if through > offset:
                        stacks, offset = (stack,), through
                        continue
                derived = self._read_derived(stacks, data, offset)
                if derived is not None:
                    stacks, offset = derived
                    if not stacks:
                        return DEAD
                    continue
                reached = self._read_all(stacks, data[offset])
                if not reached:
                    return DEAD
                self._check_stacks(reached)
                stacks, offset = reached, offset + 1
            return self._position(set(stacks))

    def _read_literal(self, stack: int, data: bytes, offset: int) -> tuple[int | None, int]:
        """``(stack, offset)`` after the bytes of ``data`` from ``offset`` that ``stack``'s top
        reads as a literal (``b·rest``: neither accepting nor calling, ``rest`` after ``b``); a
        state is made only where the literal stops being read. ``(None, offset)`` when a byte
        differs or that state is dead (then so was every state on the way)."""
        rule, state, parent = self._frames[stack]
        dfa = self.rules.dfas[rule]
        expr = start = dfa.expr(state)
        while offset < len(data) and (byte := literal_head(expr)) is not None:
            if byte != data[offset]:
                return None, offset
            expr, offset = expr.args[1], offset + 1
        if expr is start:
            return stack, offset
        following = dfa.state_of(expr)
        if not dfa.is_live(following):
            return None, offset
        return self._stack(rule, following, parent), offset

    def _read_derived(self, stacks: Iterable[int], data: bytes, offset: int) -> tuple[set[int], int] | None:
        """``(stacks, offset)`` after the bytes of ``data`` from ``offset`` that ``stacks`` read
        with no call and no return (their tops neither call nor, over a parent, accept: each
        byte is a derivative of each top's expression), with states made only where that stops
        (inside a key, a token read through the declared key's run and the other members' trie
        made a state per byte in each). ``None`` when a top calls or may return before the first
        byte; an empty set when no stack reads the bytes."""
        tops = []
        for stack in stacks:
            rule, state, parent = self._frames[stack]
            dfa = self.rules.dfas[rule]
            expr = dfa.expr(state)
            if _moves_first(expr, parent):
                return None
            tops.append((rule, expr, parent))
        while offset < len(data):
            byte = data[offset]
            tops = [top for top in {(rule, E.derivative(expr, byte), parent) for rule, expr, parent in tops} if top[1] is not E.EMPTY]
            offset += 1
            if not tops or any(_moves_first(expr, parent) for _, expr, parent in tops):
                break
        reached = set()
        for rule, expr, parent in tops:
            dfa = self.rules.dfas[rule]
            state = dfa.state_of(expr)
            if dfa.is_live(state):
                reached.add(self._stack(rule, state, parent))
        return reached, offset

    def _read_all(self, stacks: Iterable[int], byte: int) -> set[int]:
        """Every stack reached from ``stacks`` by reading ``byte``."""
        reached: set[int] = set()
        for stack in stacks:
            self._read(stack, byte, reached, 0)
        return reached

    def _read(self, stack: int, byte: int, out: set[int], epsilon: int) -> None:
        """Add to ``out`` every stack reached from ``stack`` by reading ``byte``."""
        if epsilon > walk.MAX_EPSILON_MOVES:
            return
        rule, state, parent = self._frames[stack]
        dfa = self.rules.dfas[rule]
        following = dfa.transition(state, byte)
        if following != DEAD and dfa.is_live(following):
            out.add(self._stack(rule, following, parent))
        for pushed in self._calls(stack):
            self._read(pushed, byte, out, epsilon + 1)
        if parent != NO_PARENT and dfa.flags[state] & walk.ACCEPTING:
            self._read(parent, byte, out, epsilon + 1)

    def _calls(self, stack: int) -> list[int]:
        """The stacks reached from ``stack`` by each call its top state can make (before any byte)."""
        rule, state, parent = self._frames[stack]
        dfa = self.rules.dfas[rule]
        out = []
        for callee, back in dfa.calls(state):
            if not dfa.is_live(back) or not self.rules.dfas[callee].is_live(START):
                continue
            base = parent if dfa.is_final(back) else self._stack(rule, back, parent)
            out.append(self._stack(callee, START, base))
        return out

    def advance(self, position: int, token_id: int) -> int:
        """The position after the ordinary token ``token_id`` (``DEAD`` if it cannot be read)."""
        key = (position, token_id)
        found = self._advance.get(key)
        if found is not None:
            return found
        data = self.vocab.text.get(token_id)
        following = DEAD if data is None else self.walk(position, data)
        if len(self._advance) >= _ADVANCE_CACHE:
            self._advance.clear()
        self._advance[key] = following
        return following

    # ------------------------------------------------------------------ rows

    def row(self, position: int) -> np.ndarray:
        """``[width]`` int32 read-only packed row of the tokens ``position`` allows (EOS where it accepts)."""
        return walk.packed_row(self.held_row(position), self.vocab.width)

    def held_row(self, position: int) -> np.ndarray:
        """:meth:`row` as held, read-only: ``[width]`` int32 packed words or, when the position
        allows a few tokens, their ``[k]`` int32 ids (``k < width``); :func:`walk.fill_row`
        writes either into a mask. Most positions inside a literal allow a few tokens: their rows
        are made, stored and written without a packed row. A position whose stacks' rows need
        nothing built (:meth:`_built_stack_row`) is composed under the lock alone; the others in
        a cold section, which computes only the stack rows still missing."""
        found = self._rows.get(position)
        if found is not None:
            return found
        found = self._literal_position_row(position)
        if found is not None:
            return found
        with self._lock:  # made of held rows: nothing to build, no cold section
            stack_rows = self._built_stack_rows(position)
            if stack_rows is not None:
                return self._position_row(position, stack_rows)
        return self._cold_row(position)

    def fill(self, target: np.ndarray, position: int) -> None:
        """Write :meth:`row` of ``position`` into ``target`` (``[width]`` int32, writable).

        A position reached for the first time whose stacks' rows are held is written from them
        in one native pass (:func:`walk.fill_union`) and held only when it is reached again: most
        positions of a request are reached once (a key's bytes, a counter's value), and a row
        composed, interned and kept for them was work no later fill read."""
        found = self._rows.get(position)
        if found is None and position in self._written:
            found = self.held_row(position)
        elif found is None:
            found = self._literal_position_row(position)
            if found is None:
                rows = self._unheld_rows(position)
                if rows is not None:
                    self._written.add(position)
                    walk.fill_union(target, rows)
                    return
                found = self._cold_row(position)
        walk.fill_row(target, found)

    def _cold_row(self, position: int) -> np.ndarray:
        """:meth:`held_row` in a cold section, where a stack's row is missing: those are built."""
        with self._building:
            found = self._rows.get(position)
            if found is None:
                found = self._position_row(position, [self._held_stack_row(stack) for stack in self._sets[position]])
        return found

    def allows(self, position: int, token_id: int) -> bool:
        """Whether :meth:`row` of ``position`` has ``token_id``. A position written once from its
        stacks' rows (:meth:`fill`) is read from them: the token accepted after that first fill
        composes no row either."""
        found = self._rows.get(position)
        if found is None and position in self._written:
            rows = self._unheld_rows(position)
            if rows is not None:
                return any(walk.row_has(row, self.vocab.width, token_id) for row in rows)
        return walk.row_has(self.held_row(position) if found is None else found, self.vocab.width, token_id)

    def _unheld_rows(self, position: int) -> list[np.ndarray] | None:
        """The held rows whose union is :meth:`row` of ``position``, without composing it: its
        stacks' rows (:meth:`_built_stack_rows`) and, where it accepts, the EOS ids; ``None``
        where a stack's row needs building."""
        with self._lock:
            stack_rows = self._built_stack_rows(position)
        if stack_rows is None or not self.accepting[position]:
            return stack_rows
        return [*stack_rows, self.vocab.eos_ids]

    def _built_stack_rows(self, position: int) -> list[np.ndarray] | None:
        """The held rows of the stacks of ``position`` (in order) where none needs building
        (:meth:`_built_stack_row`, under the lock); ``None`` otherwise."""
        stack_rows = []
        for stack in self._sets[position]:
            row = self._built_stack_row(stack)
            if row is None:
                return None
            stack_rows.append(row)
        return stack_rows

    def _position_row(self, position: int, stack_rows: list[np.ndarray]) -> np.ndarray:
        """Hold and return the row of ``position``, of the held rows of its stacks (in order)."""
        # Stack rows are interned: stacks with equal rows (the alternatives of a union that read
        # alike so far) give one array, taken once.
        rows = list({id(row): row for row in stack_rows}.values())
        if len(rows) == 1 and not self.accepting[position]:
            return self._rows.put(position, rows[0])  # most positions: the very array of their stack
        return self._put_composed(position, rows, _NO_IDS, bool(self.accepting[position]))

    def _literal_position_row(self, position: int) -> np.ndarray | None:
        """The held row of a position inside a literal whose tokens were learnt when it was
        entered (:meth:`_learn_run`) and where none runs past its end: those few ids, read
        without a cold section (nothing is built). ``None`` for any other position."""
        stacks = self._sets[position]
        if len(stacks) != 1:  # (one stack whose top has a run: neither it nor the position accepts)
            return None
        rule, state, _ = self._frames[stacks[0]]
        dfa = self.rules.dfas[rule]
        run = dfa.forced_runs.get(dfa.expr(state))
        if run is None:
            return None
        data, end = run
        learnt = self._rule_rows.get(("run", rule, end))
        if learnt is None or not learnt.data.endswith(data):
            return None
        row = learnt.rows[len(learnt.data) - len(data)]
        if row is None:
            return None
        with self._lock:
            return self._rows.put(position, row)

    def _put_composed(self, key: Hashable, rows: list[np.ndarray], read: np.ndarray, with_eos: bool) -> np.ndarray:
        """Hold under ``key`` the row of the tokens of held ``rows``, of the ids ``read`` (``[k]``
        int32: the exit tokens a walk read) and of EOS with ``with_eos``: ids while they are few
        and no exit was read; else packed, and then the very array made before of the same
        arrays and ids where it is still alive (``_made``). Most compositions repeat one made
        before: a string body under another member reads the same exits (a quote, then a comma
        or a brace), a member rule under another slot calls the same value row. Those take no
        copy, no OR, no fingerprint and no comparison."""
        width = self.vocab.width
        # With exit tokens read, a packed row (remembered) is made: faster in place than the ids
        # of a literal's end and all that reads on from it.
        if not len(read) and all(len(row) < width for row in rows):
            ids = walk.union_ids([*rows, self.vocab.eos_ids] if with_eos else rows)
            if len(ids) <= self._max_sparse:
                return self._rows.put(key, ids)
        made_key = (*map(id, rows), read.tobytes(), with_eos)
        made = self._made.get(made_key)
        if made is not None:
            sources, result = made
            found = result()
            if found is not None and all(source() is row for source, row in zip(sources, rows)):
                return self._rows.put(key, found)
        found = self._packed_union(rows)
        walk.set_bits(found, read)
        if with_eos:
            np.bitwise_or(found, self.vocab.eos_words, out=found)
        found = self._rows.put(key, found)
        if len(self._made) >= _MADE_KEPT:
            self._made.clear()
        self._made[made_key] = (tuple(map(weakref.ref, rows)), weakref.ref(found))
        return found

    def _packed_union(self, rows: list[np.ndarray]) -> np.ndarray:
        """``[width]`` int32 a new writable packed row of the tokens of held ``rows``: a copy of
        the first packed one, the others OR-ed in."""
        width = self.vocab.width
        first = next((row for row in rows if len(row) == width), None)
        found = np.zeros(width, dtype=np.int32) if first is None else first.copy()
        for row in rows:
            if row is not first:
                walk.or_row(found, row)
        return found

    def stack_row(self, stack: int) -> np.ndarray:
        """The held row (as :meth:`held_row`) of the ordinary tokens ``stack`` can read."""
        found = self._rows.get(~stack)
        if found is not None:
            return found
        with self._lock:
            found = self._built_stack_row(stack)
        if found is not None:
            return found
        with self._building:
            return self._held_stack_row(stack)

    def _built_stack_row(self, stack: int) -> np.ndarray | None:
        """:meth:`stack_row` where it needs nothing built (under the lock): held, shared by its top
        (:meth:`_shared_stack_row`), the tokens of its top's rule row alone (:meth:`_alone`), or a
        key trie node's (:meth:`_derived_stack_row`), with the rows it is made of held. ``None``
        otherwise."""
        found = self._rows.get(~stack)
        if found is None:
            found = self._shared_stack_row(stack)
        if found is None:
            rule, state, parent = self._frames[stack]
            rule_row = self._rule_rows.get((rule, state))
            if rule_row is None:
                return None
            if self._alone(rule, state, parent, rule_row):
                return self._put_alone(stack, rule_row)
            if rule_row.derived is not None:
                return self._derived_stack_row(stack, rule_row, self._built_stack_row)
        return found

    def _put_alone(self, stack: int, rule_row: RuleRow) -> np.ndarray:
        """Hold the row of a stack that reads its top's ``rule_row`` alone (:meth:`_alone`): made
        from its top frame, the same under every parent."""
        depth = self._depths[stack]
        self._spans[stack] = (depth, depth)
        return self._rows.put(~stack, self._own_row(rule_row))

    def _shared_stack_row(self, stack: int) -> np.ndarray | None:
        """The row another stack made that reads the same frames as ``stack`` would (the
        ``reach`` frames under its top last seen for that top, :meth:`_shared_key`), held for
        ``stack`` too; ``None`` if there is none, or ``stack`` lacks the room above it that making
        the row used (a walk's calls stop at :data:`walk.MAX_DEPTH`)."""
        rule, state, _ = self._frames[stack]
        shared = self._shared.get((rule, state))
        if shared is None:
            return None
        reach, above = shared
        depth = self._depths[stack]
        # A row that read every frame down to the bottom one is no other stack's (stacks are interned).
        key = self._shared_key(stack, reach) if reach < depth - 1 and depth + above < walk.MAX_DEPTH else None
        found = None if key is None else self._rows.get(key)
        if found is not None:
            self._spans[stack] = (depth - reach, depth + above)
            found = self._rows.put(~stack, found)
        return found

    def _shared_key(self, stack: int, reach: int) -> tuple | None:
        """What a row made from the top ``reach + 1`` frames of ``stack`` depends on: those frames'
        ``(rule, state)``, top first, and whether a frame lies under them (``None`` where
        ``stack`` has fewer frames). Every stack with the same key has the same row: the frames of
        a recursive value at each depth, a subschema under each parent."""
        key: list = ["top"]
        for _ in range(reach + 1):
            if stack == NO_PARENT:
                return None
            rule, state, stack = self._frames[stack]
            key += (rule, state)
        key.append(stack != NO_PARENT)
        return tuple(key)

    def _alone(self, rule: int, state: int, parent: int, rule_row: RuleRow) -> bool:
        """Whether a stack of top ``(rule, state)`` over ``parent`` reads the tokens of its top's
        ``rule_row`` alone: it returns to no parent, leaves by no exit and calls nothing. Then its
        row is the same under every parent (a member rule called from each slot of an object),
        one array for every stack whose top shares the RuleRow."""
        dfa = self.rules.dfas[rule]
        has_parent = parent != NO_PARENT
        return not (has_parent and dfa.flags[state] & walk.ACCEPTING) and self._usable_exits(rule_row, has_parent) is None and not dfa.calls(state)

    def _held_stack_row(self, stack: int) -> np.ndarray:
        """:meth:`stack_row` inside a cold section (the caller's). A row is shared by every stack
        whose frames its making read are the same (:meth:`_shared_key`)."""
        found = self._rows.get(~stack)
        if found is None:
            found = self._shared_stack_row(stack)
        if found is not None:
            return found
        rule, state, parent = self._frames[stack]
        depth = self._depths[stack]
        rule_row = self._held_rule_row(rule, state)
        if self._alone(rule, state, parent, rule_row):
            return self._put_alone(stack, rule_row)
        if rule_row.derived is not None:
            return self._derived_stack_row(stack, rule_row, self._held_stack_row)
        returns = parent != NO_PARENT and self.rules.dfas[rule].flags[state] & walk.ACCEPTING
        parts = [parent] if returns else []
        parts += self._calls(stack)
        rows = [self._own_row(rule_row), *map(self._held_stack_row, parts)]
        read, below, above = self._exit_tokens(stack, self._usable_exits(rule_row, parent != NO_PARENT))
        found = self._put_composed(~stack, rows, read, False)
        self._note_reach(stack, found, [*parts, (depth - below, INFINITE if above < 0 else depth + above)])
        return found

    def _derived_stack_row(self, stack: int, rule_row: RuleRow, row_of: Callable[[int], np.ndarray | None]) -> np.ndarray | None:
        """The row of a stack whose top is a node of a key trie (``rule_row.derived``): its trie
        body's row under the same parent (``row_of`` it: ``None`` gives ``None``), less a few tokens."""
        rule, _, parent = self._frames[stack]
        body_state, less = rule_row.derived
        body = self._stack(rule, body_state, parent)
        body_row = row_of(body)
        if body_row is None:
            return None
        found = self._rows.put(~stack, self._row_less(body_row, less))
        self._note_reach(stack, found, [body])
        return found

    def _note_reach(self, stack: int, found: np.ndarray, parts: list) -> None:
        """Note the depths the making of ``stack``'s row ``found`` read, from its ``parts`` (stacks
        whose rows it is made of, or ``(lowest, highest)`` depths a walk read), and share the row
        with every stack of the same frames that deep (:meth:`_shared_stack_row`)."""
        rule, state, _ = self._frames[stack]
        depth = self._depths[stack]
        floor, top = depth, depth
        for part in parts:
            low, high = self._spans[part] if type(part) is int else part
            floor, top = min(floor, low), max(top, high)
        self._spans[stack] = (floor, top)
        if top < INFINITE and 1 < floor and depth - floor <= SHARED_REACH:  # (floor 1: the bottom frame read)
            self._shared[(rule, state)] = (depth - floor, top - depth)
            self._rows.put(self._shared_key(stack, depth - floor), found)

    def _row_less(self, row: np.ndarray, less: np.ndarray) -> np.ndarray:
        """A new row (as :meth:`held_row`) of the tokens of the held ``row`` but the ids ``less`` (``[d]`` int32)."""
        if len(row) < self.vocab.width:
            return row[_not_in(row, less)]
        words = row.copy()
        walk.clear_bits(words, less)
        return words

    def _own_row(self, rule_row: RuleRow) -> np.ndarray:
        """The held row of ``rule_row``'s tokens alone: its packed words or ids, not copied."""
        if rule_row.words is not None:
            return rule_row.words
        if len(rule_row.ids) <= self._max_sparse:
            return rule_row.ids
        return read_only(rule_row.new_words(self.vocab.width))

    def _exit_tokens(self, stack: int, usable: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, int, int]:
        """``([k] int32 ids, below, above)``: the ids of the tokens that leave the top rule of
        ``stack`` part-way and read on, at ``usable`` (the top rule row's exits,
        :meth:`_usable_exits`), and how many frames under and over the top their walk read
        (:func:`walk.walk_exits`): one native pass, computing the transitions and liveness facts
        it meets on the way (:meth:`_resolve`)."""
        if usable is None:
            return _NO_IDS, 0, 0
        rule, _, parent = self._frames[stack]
        positions, tops, begins, ends = usable
        frames = self._frame_array(parent)
        read, _, limited, _, below, above = walk.walk_exits(
            self.rules.tables(), frames, rule, tops, self.vocab.flat, begins, ends, positions, self.vocab.token_ids, self._resolve
        )
        if limited:
            raise CompileLimitError("walk_steps", walk.MAX_WALK_STEPS, walk.MAX_WALK_STEPS, "a token's paths through the rules branch too much")
        return read, below, above

    @staticmethod
    def _usable_exits(rule_row: RuleRow, has_parent: bool) -> tuple[np.ndarray, ...] | None:
        """``(positions, exit states, begins, ends)`` of the exits from ``rule_row`` a token can
        take: at a state that calls, or (with a parent frame to return to) that accepts; ``None``
        when there are none."""
        return rule_row.leaving_exits if has_parent else rule_row.calling_exits

    def _resolve(self, rule: int, state: int, byte: int) -> tuple[walk.RuleTables, ...]:
        """Compute a fact a pushdown walk met unknown: the transition of ``state`` of ``rule`` on
        ``byte``, or (``byte`` :data:`walk.LIVENESS_REQUEST`) whether ``state`` is live. Answers
        the rules' tables as they are now (computing may grow an automaton or add a rule)."""
        dfa = self.rules.dfas[rule]
        if byte == walk.LIVENESS_REQUEST:
            dfa.is_live(state)
        else:
            dfa.transition(state, byte)
        return self.rules.tables()

    # ------------------------------------------------------------------ distances and budgets

    def distance(self, position: int) -> int:
        """Fewest bytes from ``position`` to an accepted text (:data:`INFINITE` if none)."""
        return min((self.stack_distance(stack) for stack in self._sets[position]), default=INFINITE)

    def stack_distance(self, stack: int) -> int:
        """Fewest bytes that finish every frame of ``stack``, top to bottom (:data:`INFINITE` if none)."""
        found = self._stack_distances.get(stack)
        if found is not None:
            return found
        self.rules.lengths_exact  # noqa: B018 - distances through calls need every rule's length
        chain = []
        while stack != NO_PARENT and stack not in self._stack_distances:
            chain.append(stack)
            stack = self._frames[stack][2]
        below = 0 if stack == NO_PARENT else self._stack_distances[stack]
        for stack in reversed(chain):
            rule, state, _ = self._frames[stack]
            own = self.rules.dfas[rule].distance(state)
            below = INFINITE if INFINITE in (own, below) else min(INFINITE, own + below)
            self._stack_distances[stack] = below
        return below

    def budget_row(self, position: int, limit: int) -> np.ndarray:
        """:meth:`held_row` restricted to the tokens after which at most ``limit`` tokens are
        needed to finish (EOS kept where the position accepts), held alike (read-only).

        The first token of the position's own witness (:meth:`token_distance`) is always kept when
        its completion fits: whatever the cached figures of other positions, the mask holds a way to
        finish within the budget."""
        key = ("budget", position, limit)
        found = self._rows.get(key)
        if found is not None:
            return found
        with self._building:
            needed, first_token = self._witness(position)
            profiles = [self._profile(stack) for stack in self._sets[position]]
            if all(max(profile, default=-1) <= limit for profile in profiles):
                return self.held_row(position)
            found = np.zeros(self.vocab.width, dtype=np.int32)
            for profile in profiles:
                for distance, ids in profile.items():
                    if distance <= limit:
                        walk.set_bits(found, ids)
            if first_token >= 0 and needed - 1 <= limit:
                walk.set_bits(found, np.array([first_token], dtype=np.int32))
            if self.accepting[position]:
                np.bitwise_or(found, self.vocab.eos_words, out=found)
            found = self._rows.put(key, found)
        return found

    def token_distance(self, position: int) -> int:
        """Fewest tokens known to finish from ``position`` (EOS not counted; :data:`INFINITE` when
        nothing can): an upper bound a completion achieves. The completion is the position's
        shortest text (in bytes), cut into tokens greedily, longest first; each position along its
        tokens learns the rest of it, so values only fall and a position's first witness token
        leads to a position at least one token closer."""
        return self._witness(position)[0]

    def _witness(self, position: int) -> tuple[int, int]:
        """``(token_distance, the first token of its completion)`` (``-1``: none, at the end or dead)."""
        found = self._token_distances.get(position)
        if found is not None:
            return found
        self.rules.lengths_exact  # noqa: B018 - distances through calls need every rule's length
        with self._building:
            found = self._token_distances.get(position)
            if found is None:
                stacks = self._sets[position]
                best = min(stacks, key=self.stack_distance, default=None)
                if best is None or self.stack_distance(best) == INFINITE:
                    found = self._token_distances[position] = (INFINITE, -1)
                else:
                    self._learn(position, self._tokens_of(self._completion(best)))
                    found = self._token_distances[position]
        return found

    def _learn(self, position: int, tokens: tuple[int, ...]) -> None:
        """Record that ``tokens`` finish from ``position``, and their tails from each position on the way."""
        for i in range(len(tokens) + 1):
            known = self._token_distances.get(position)
            if known is not None and known[0] <= len(tokens) - i:
                if i:
                    break  # its own witness is as short from here on
            else:
                self._token_distances[position] = (len(tokens) - i, tokens[i] if i < len(tokens) else -1)
            if i < len(tokens):
                position = self.advance(position, tokens[i])
                if position == DEAD:  # pragma: no cover - a completion the rules accept reads on
                    raise RuntimeError("a shortest completion does not read as tokens")

    def _tokens_of(self, data: bytes) -> tuple[int, ...]:
        """``data`` cut into ordinary tokens, longest match first (every byte is a token where
        budgets apply)."""
        ids = self.vocab.id_of_text
        out = []
        i = 0
        while i < len(data):
            for length in range(min(MAX_GREEDY_TOKEN, len(data) - i), 0, -1):
                token = ids.get(data[i : i + length])
                if token is not None:
                    out.append(token)
                    i += length
                    break
            else:
                raise CompileLimitError("max_tokens", data[i : i + 1], "a single-byte token", "this byte is no token of the vocabulary")
        return tuple(out)

    def _completion(self, stack: int) -> bytes:
        """A shortest text finishing every frame of ``stack``, top first."""
        out = bytearray()
        while stack != NO_PARENT:
            rule, state, stack = self._frames[stack]
            out += self._frame_completion(rule, state)
        return bytes(out)

    def _frame_completion(self, rule: int, state: int) -> bytes:
        """A shortest text from ``state`` to the end of ``rule`` (a call is its rule's shortest text)."""
        key = (rule, state)
        found = self._frame_completions.get(key)
        if found is not None:
            return found
        dfa = self.rules.dfas[rule]
        expr = dfa.expr(state)
        if not has_calls(expr) and E.is_plain(expr):  # read off the expression: no state is built
            witness = shortest_witness(expr)
            if witness is not None:
                self._frame_completions[key] = witness
                return witness
        out = bytearray()
        current = state
        while not dfa.flags[current] & walk.ACCEPTING:
            goal = dfa.distance(current)
            row = dfa.row(current)
            step = next((b for b in range(256) if row[b] != DEAD and dfa.distance(int(row[b])) == goal - 1), None)
            if step is not None:
                out.append(step)
                current = int(row[step])
                continue
            for callee, back in dfa.calls(current):
                length = self.rules.rules[callee].min_length
                if length is not None and dfa.distance(back) == goal - length:
                    out += self._frame_completion(callee, START)
                    current = back
                    break
            else:  # pragma: no cover - distances are consistent once rule lengths are settled
                raise RuntimeError(f"no move from state {current} of {dfa.rule!r} keeps to its distance {goal}")
        found = self._frame_completions[key] = bytes(out)
        return found

    def _profile(self, stack: int) -> _Profile:
        """The ordinary tokens ``stack`` can read, grouped by the tokens needed after each
        (``{distance: [k] int32 ids}``)."""
        found = self._profiles.get(stack)
        if found is not None:
            return found
        rule, state, parent = self._frames[stack]
        dfa = self.rules.dfas[rule]
        rule_row = self.rule_row(rule, state)
        groups: dict[int, list[np.ndarray]] = {}

        def add(distance: int, ids: np.ndarray) -> None:
            if distance < INFINITE and len(ids):
                groups.setdefault(distance, []).append(ids)

        for end, ids in self._rule_groups(rule, state, rule_row):
            if dfa.is_live(end):
                add(self.token_distance(self._position({self._stack(rule, end, parent)})), ids)
        expansions = ([parent] if parent != NO_PARENT and dfa.flags[state] & walk.ACCEPTING else []) + self._calls(stack)
        for expansion in expansions:
            for distance, ids in self._profile(expansion).items():
                add(distance, ids)
        single = self._position({stack})
        exits, _, _ = self._exit_tokens(stack, self._usable_exits(rule_row, parent != NO_PARENT))
        for token in walk.union_ids([exits]).tolist():  # walked again: budgets are rare
            add(self.token_distance(self.advance(single, token)), np.array([token], dtype=np.int32))
        found = _Profile((distance, walk.union_ids(parts)) for distance, parts in groups.items())
        return self._profiles.put(stack, found)

    def _rule_groups(self, rule: int, state: int, rule_row: RuleRow) -> list[tuple[int, np.ndarray]]:
        """The row's tokens by the rule state each ends in (``[(state, [k] int32 ids)]``; a state
        may come twice), found by walking them (budgets only: rows themselves never need where a
        token ends). Inside a string of bounded length, a token of plain text ends where the
        count has as many characters less: grouped by character count, not walked."""
        dfa = self.rules.dfas[rule]
        groups, words = [], rule_row.words
        expr = dfa.expr(state)
        if words is not None and _counted_text_head(expr):
            groups, words = self._counted_text_groups(dfa, expr, words)
        ids = rule_row.ids if words is None else walk.unpack_bits(words)
        positions = self.vocab.position_of[ids]
        starts = np.full(len(positions), state, dtype=np.int32)
        status, finals, _ = _walk_in_rule(dfa, starts, self.vocab.begins[positions], self.vocab.ends[positions], self.vocab.flat, 0)
        ended = np.flatnonzero(status == walk.STATUS_END)
        return groups + [(end, ids[items]) for end, items in _group_by_state(finals[ended], ended)]

    def _counted_text_groups(self, dfa: RuleDfa, expr: Expr, words: np.ndarray) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
        """``(groups, rest)`` for the packed row ``words`` (``[width]`` int32) of a state
        ``count·rest`` (:func:`_counted_text_head`): its tokens of plain string text by the state
        their characters lead to, and ``[width]`` int32 the row without them (to walk)."""
        count, rest = expr.args
        char, (lo, hi) = count.args[0], count.bounds
        partition = self.vocab.text_partition(_JSON_TEXT)
        chars, text_ids = self.vocab.within_by_chars(partition)  # ascending counts
        if hi is not None:
            fitting = int(np.searchsorted(chars, hi, side="right"))
            chars, text_ids = chars[:fitting], text_ids[:fitting]
        text_words = self.vocab.within_words_up_to(partition, hi)
        if (text_words & ~words).any():  # some text tokens are not in the row (a pattern): read it per token
            in_row = ((words[text_ids >> 5] >> (text_ids & 31)) & 1).astype(bool)
            chars, text_ids = chars[in_row], text_ids[in_row]
            text_words = self.vocab.pack(text_ids)
        groups = []
        bounds = [0, *(np.flatnonzero(np.diff(chars)) + 1).tolist(), len(chars)]  # a run per count, no sort
        for start, stop in zip(bounds[:-1], bounds[1:]):
            if start < stop:
                read = int(chars[start])
                left = E.counted(char, max(lo - read, 0), None if hi is None else hi - read)
                groups.append((dfa.state_of(E.cat(left, rest)), text_ids[start:stop]))
        return groups, words & ~text_words

    def forced_byte(self, position: int) -> tuple[int, int] | None:
        """``(byte, next position)`` when exactly one byte can follow ``position``; else ``None``."""
        if position not in self._forced:
            live = [(byte, following) for byte in range(256) if (following := self.step(position, byte)) != DEAD]
            self._forced[position] = live[0] if len(live) == 1 else None
        return self._forced[position]

    # ------------------------------------------------------------------ rule rows

    def rule_row(self, rule: int, state: int) -> RuleRow:
        """The :class:`RuleRow` of ``state`` in ``rule`` (computed on first use)."""
        found = self._rule_rows.get((rule, state))
        if found is not None:
            return found
        with self._building:
            return self._held_rule_row(rule, state)

    def _held_rule_row(self, rule: int, state: int) -> RuleRow:
        """:meth:`rule_row` inside a cold section (the caller's)."""
        key = (rule, state)
        found = self._rule_rows.get(key)
        if found is None:
            dfa = self.rules.dfas[rule]
            run = dfa.forced_runs.get(dfa.expr(state))  # inside a literal whose run is known: nothing else to ask
            if run is not None and dfa.is_live(state):
                found = _chain_row(dfa, state, self.vocab, *run)
                self._rule_rows.put(key, found)
                return found
            twin = dfa.length_free_twin(state)
            # A bare count near its bound is read best by counted_text's clipped walks.
            if twin is None or (twin[1] < self.vocab.longest and _counted_text_head(dfa.expr(state))):
                found = self._shared_rows.get(dfa, state)
                if found is None:
                    found = _compute_rule_row(dfa, state, self.vocab, functools.partial(self._held_rule_row, rule))
                    if dfa.forced_runs.get(dfa.expr(state)) is None:  # a literal's rows are cheap and learnt apart
                        self._shared_rows.put(dfa, state, found)
            else:
                found = _row_within_room(dfa, state, self._held_rule_row(rule, twin[0]), twin[1], self.vocab)
            self._rule_rows.put(key, found)
            run = dfa.forced_runs.get(dfa.expr(state))
            if run is not None:  # a literal entered: the positions further in find their tokens learnt
                self._learn_run(rule, *run)
        return found

    def _learn_run(self, rule: int, data: bytes, end: int) -> None:
        """Find the tokens of every position along a literal of ``rule`` at once
        (:meth:`VocabIndex.run_prefixes`), for :meth:`_literal_position_row`."""
        if len(data) > 2:  # two bytes from the end: no position further in has a run
            live = self.rules.dfas[rule].is_live(end)
            ids, offsets, longer = self.vocab.run_prefixes(data, live)
            rows: list[np.ndarray | None] = [None] * len(data)
            if live:
                for at in np.flatnonzero((longer == 0) & (np.diff(offsets) <= self._max_sparse)).tolist():
                    rows[at] = read_only(ids[offsets[at] : offsets[at + 1]].copy())
            self._rule_rows.put(("run", rule, end), _RunPrefixes(data, tuple(rows)))


LOOP_SHORTCUT_TOKENS = 2048
"""A byte class of a state leads many tokens (at least this many) into a state that loops: those
made only of loop bytes end there without a walk, the others are walked from their first other byte."""
TEXT_LOOP_MIN_ASCII = 32
"""A state looping on at least this many ASCII bytes is checked for looping on whole UTF-8 characters."""
_UTF8_SHAPES = (
    (0xC2, 0xDF, ((0x80, 0xBF),)),
    (0xE0, 0xE0, ((0xA0, 0xBF), (0x80, 0xBF))),
    (0xE1, 0xEC, ((0x80, 0xBF), (0x80, 0xBF))),
    (0xED, 0xED, ((0x80, 0x9F), (0x80, 0xBF))),
    (0xEE, 0xEF, ((0x80, 0xBF), (0x80, 0xBF))),
    (0xF0, 0xF0, ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    (0xF1, 0xF3, ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    (0xF4, 0xF4, ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))),
)
"""Lead byte range and continuation byte ranges of every valid multi-byte UTF-8 character."""
_LEAD_BYTES = np.zeros(256, dtype=bool)
_LEAD_BYTES[0xC2:0xF5] = True


def _moves_first(expr: Expr, parent: int) -> bool:
    """Whether a stack whose top is ``expr`` over ``parent`` may call, or return to its parent,
    before it reads a byte."""
    return bool(E.first_calls(expr)) or (E.nullable(expr) and parent != NO_PARENT)


def _text_target(dfa: RuleDfa, state: int) -> int | None:
    """The one state every valid multi-byte UTF-8 character leads to from ``state``, or ``None``
    when they do not all lead to one state other than ``DEAD`` (cached on the automaton)."""
    cache = dfa.text_targets
    if state not in cache:
        target = _text_target_expr(dfa.expr(state))
        cache[state] = None if target is None else dfa.state_of(target)
    return cache[state]


_TEXT_TARGETS: "weakref.WeakKeyDictionary[Expr, weakref.ref | None]" = weakref.WeakKeyDictionary()
_TEXT_TARGETS_LOCK = threading.Lock()
_NOT_DECIDED = object()


def _text_target_expr(expr: Expr) -> Expr | None:
    """:func:`_text_target` of the state whose language is ``expr``, as that state's expression,
    kept per expression for the process: a grammar's string body (the same node in every grammar
    while one holds it) is decided once, and the states its characters pass through are made by
    no automaton (about 180 µs of a string body's first row, a dozen of them a row each). The
    target is kept by a weak reference too: a string body's is itself, which a strong one would
    keep alive for good."""
    with _TEXT_TARGETS_LOCK:
        known = _TEXT_TARGETS.get(expr, _NOT_DECIDED)
    if known is None:
        return None
    target = None if known is _NOT_DECIDED else known()
    if target is None:
        target = _find_text_target(expr)
        with _TEXT_TARGETS_LOCK:
            _TEXT_TARGETS[expr] = None if target is None else weakref.ref(target)
    return target


def _find_text_target(expr: Expr) -> Expr | None:
    found: set[Expr] = set()
    for lead_low, lead_high, continuations in _UTF8_SHAPES:
        reached = _following(expr, lead_low, lead_high)
        for low, high in continuations:
            if E.EMPTY in reached:
                return None
            reached = {after for middle in reached for after in _following(middle, low, high)}
        found |= reached
        if len(found) > 1 or E.EMPTY in found:
            return None
    return found.pop() if found else None


def _following(expr: Expr, low: int, high: int) -> set[Expr]:
    """The derivatives of ``expr`` by the bytes ``low..high``: one per byte class they meet."""
    span = (1 << (high + 1)) - (1 << low)
    return {E.derivative(expr, (part & -part).bit_length() - 1) for mask in E.byte_classes(expr) if (part := mask & span)}


def _loops_on_text(dfa: RuleDfa, state: int) -> bool:
    """Whether ``state`` loops on many ASCII bytes and on every multi-byte UTF-8 character (a
    string body): then its loop is a set of characters, and tokens of whole such characters stay."""
    successors = dfa.row(state)
    if int(np.count_nonzero(successors[:0x80] == state)) < TEXT_LOOP_MIN_ASCII or dfa.flags[state] & dfa.exit_mask:
        return False
    return _text_target(dfa, state) == state


class _RowParts:
    """What a rule row is built from: packed rows and ids of tokens allowed, walks still to do,
    exits found."""

    def __init__(self, dfa: RuleDfa, state: int, vocab: VocabIndex) -> None:
        self.dfa, self.state, self.vocab = dfa, state, vocab
        self.packed: list[np.ndarray] = []
        self.listed: list[np.ndarray] = []
        self.walks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # positions, begins, start states
        self.exits: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def walk_from(self, positions: np.ndarray, begins: np.ndarray, state: int | np.ndarray) -> None:
        """Walk ``positions`` from ``begins`` (``[m]`` int64 each) in ``state``, one for all or ``[m]`` int32."""
        if len(positions):
            starts = state if isinstance(state, np.ndarray) else np.full(len(positions), state, dtype=np.int32)
            self.walks.append((positions, begins, starts))

    def into_loop(self, first: np.ndarray, target: int, loop: np.ndarray, text: bool) -> None:
        """The tokens whose first byte is in ``first`` (``[256]`` bool) and that read it into
        ``target``, which loops on ``loop`` (bytes, or with ``text`` characters) ⊇ ``first``."""
        dfa, vocab = self.dfa, self.vocab
        partition = vocab.partition(loop, text=text)
        others = (loop | _LEAD_BYTES if text else loop) & ~first  # first bytes of loop tokens not in this class
        if partition.within_count and dfa.is_live(target):
            if not others.any():
                self.packed.append(partition.within_words)
            else:
                self.packed.append(partition.within_words & ~vocab.starting_words(others))
        starts_here = partition.outside_starting_with(first)
        positions, begins = partition.outside[starts_here], partition.outside_begins[starts_here]
        entered = begins > vocab.begins[positions]  # else: the first character is cut or invalid
        live = dfa.row(target) != DEAD
        keep = entered & live[partition.outside_bytes[starts_here]]
        self.walk_from(positions[keep], begins[keep], target)
        self.walk_from(positions[~entered], vocab.begins[positions[~entered]], self.state)
        if dfa.flags[target] & dfa.exit_mask:
            starting = np.concatenate([partition.within[first[partition.within_first]], positions])
            self.exits.append(_loop_prefix_exits(vocab, starting, partition.first_out[starting], target))

    def counted_text(self, count: Expr, rest: Expr) -> None:
        """A state inside a string of bounded length: ``count`` (``counted(ENCODED_CHAR, lo,
        hi)``) then ``rest``, which no text character can start (:func:`_counted_text_head`).

        A token of plain string text is read wholly by the count, so it is allowed when it has at
        most ``hi`` characters. Every other token is walked from its first byte outside plain
        text, after a prefix of ``c`` characters, where the count has ``lo - c`` and ``hi - c``
        left. Reading the ``n`` bytes left of the token, a count cannot tell a lower bound past
        ``n`` from ``n + 1``, nor an upper bound of ``n`` or more from none; so each walk starts
        in the state with its bounds clipped that way. Those few states serve every count of the
        string, so a row builds no state per count, and none per character of text.
        """
        dfa, vocab = self.dfa, self.vocab
        char, (lo, hi) = count.args[0], count.bounds
        partition = vocab.partition(_JSON_TEXT, text=True)
        self.packed.append(vocab.within_words_up_to(partition, hi))
        chars, tails = vocab.outside_text_shape(partition)
        positions, begins = partition.outside, partition.outside_begins
        clipped_lo = np.minimum(np.maximum(lo - chars, 0), tails + 1)
        if hi is None:
            clipped_hi = np.full(len(chars), -1, dtype=np.int64)  # -1: none
        else:
            left = hi - chars
            keep = left >= 0  # the others' text alone is too long
            positions, begins, tails, clipped_lo = positions[keep], begins[keep], tails[keep], clipped_lo[keep]
            left = left[keep]
            clipped_hi = np.where(left >= tails, -1, left)
        span = int(tails.max(initial=0)) + 2
        keys = clipped_lo * span + clipped_hi + 1
        states = np.zeros(int(keys.max(initial=-1)) + 1, dtype=np.int32)
        for key in np.flatnonzero(np.bincount(keys, minlength=1)).tolist():
            low, high = divmod(key, span)
            left_count = E.counted(char, low, None if high == 0 else high - 1)
            states[key] = dfa.state_of(E.cat(left_count, rest))
        self.walk_from(positions, begins, states[keys])

    def text_open(self, body_row: Callable[[int], RuleRow] | None = None) -> None:
        """A state every run of string text leaves a completion from (:data:`json_text.TEXT_OPEN`,
        a node of a key trie): all text tokens are allowed; the others are walked.

        With ``body_row`` (the cached :class:`RuleRow` of a state of this rule), a token whose
        first character leads to the trie's body state ``B`` (any text, the quote, the rest:
        the first character is no child of the node) is read on exactly as from ``B``, which
        loops on text: it is allowed, and leaves the rule where, as ``B``'s own row says. ``B`` is
        one state for every node of the trie, so only the tokens that start outside text or with
        a child's character are walked from each node (about half of them on Llama-3.2)."""
        vocab = self.vocab
        partition = vocab.partition(_JSON_TEXT, text=True)
        self.packed.append(partition.within_words)
        outside = partition.outside
        body = _trie_body(self.dfa, self.state) if body_row is not None else None
        if body is None:
            self.walk_from(outside, vocab.begins[outside], self.state)
            return
        target, leads_in = body
        row = body_row(target)
        entered = partition.outside_begins > vocab.begins[outside]  # a whole first character of text
        by_body = entered & leads_in[partition.outside_first]
        ids = vocab.token_ids[outside[by_body]]
        if row.words is not None:
            allowed = ((row.words[ids >> 5] >> (ids & 31)) & 1).astype(bool)
        else:
            allowed = np.isin(ids, row.ids)
        self.listed.append(ids[allowed])
        taken = leads_in[vocab.first_bytes[row.exit_positions]]
        self.exits.append((row.exit_positions[taken], row.exit_begins[taken], row.exit_states[taken]))
        walked = outside[~by_body]
        self.walk_from(walked, vocab.begins[walked], self.state)


_JSON_TEXT = np.zeros(256, dtype=bool)
_JSON_TEXT[0x20:0x80] = True
_JSON_TEXT[[0x22, 0x5C]] = False
"""The ASCII bytes a JSON string holds raw (with every multi-byte character: string text)."""
_TEXT_STARTS = sum(1 << b for b in np.flatnonzero(_JSON_TEXT | _LEAD_BYTES).tolist())
"""The bytes a character of plain string text can start with (a 256-bit mask)."""
MAX_CHAIN = 256


def prepare_text_tables(vocab: VocabIndex) -> None:
    """Build ``vocab``'s tables of JSON string text now (:meth:`VocabIndex.text_partition`: once per
    tokenizer), so that no request's first mask pays for them."""
    vocab.text_partition(_JSON_TEXT)


def prepare_rule_rows(vocab: VocabIndex, rules: Iterable[Rule]) -> None:
    """Compute the row of every state of each of ``rules``, as a called rule, into ``vocab``'s
    :class:`SharedRuleRows`: per-tokenizer set-up for the lexical pieces every grammar reads (a
    string body, a number, an object's other members), so that no request's first visit pays
    for them. A rule whose body was prepared before is skipped: a backend per compiler repeats
    nothing."""
    store = shared_rule_rows(vocab)
    for rule in rules:
        if rule.body in store.prepared:
            continue
        store.prepared.add(rule.body)
        automaton = PushdownAutomaton(RuleSet(Rule("#", E.call(rule)), max_states=MAX_PIECE_STATES), vocab,
                                      max_positions=MAX_PIECE_STATES, max_row_bytes=SHARED_ROW_BYTES)
        index = automaton.rules.index_of(rule)
        dfa, todo, seen = automaton.rules.dfas[index], [START], {DEAD, START}
        while todo:
            state = todo.pop()
            automaton.rule_row(index, state)
            found = set(dfa.row(state).tolist()) - seen
            seen |= found
            todo += found


MAX_PIECE_STATES = 4096
"""Cap on the states of a piece whose rows :func:`prepare_rule_rows` computes (they have tens)."""


def _trie_body(dfa: RuleDfa, state: int) -> tuple[int, np.ndarray] | None:
    """``(B, leads_in)`` for a key-trie node ``state``: ``B`` the state most plain ASCII text
    bytes lead to, when it loops on every character of string text and is no place to leave the
    rule, and ``leads_in`` (``[256]`` bool) the plain ASCII bytes that lead there; else ``None``."""
    successors = dfa.row(state)
    plain = np.flatnonzero(_JSON_TEXT)
    targets = successors[plain]
    body = int(np.bincount(targets).argmax())
    if body in (DEAD, state) or dfa.flags[body] & dfa.exit_mask or not dfa.is_live(body):
        return None
    if not (dfa.row(body)[plain] == body).all() or _text_target(dfa, body) != body:
        return None
    leads_in = np.zeros(256, dtype=bool)
    leads_in[plain[targets == body]] = True
    return body, leads_in


def _counted_text_head(expr: Expr) -> bool:
    """Whether ``expr`` is a count of string characters then a rest that no text character can
    start, and that neither calls first nor is empty (so a token of plain text is read by the
    count alone, and the state is no place to leave the rule)."""
    if expr.kind != CAT_KIND:
        return False
    head, rest = expr.args
    if head.kind != E.COUNT_KIND or head.args[0] is not ENCODED_CHAR or E.nullable(rest) or E.first_calls(rest):
        return False
    return not E.first_bytes(rest) & _TEXT_STARTS


def _forced_run(dfa: RuleDfa, state: int) -> tuple[bytes, int] | None:
    """``(data, end)`` when only ``data`` (two bytes or more) can follow ``state``, leading to
    ``end``, through states that neither accept nor call; else ``None``. Cached on the automaton
    by expression for every state along the run, so the positions inside a long literal find
    theirs at once.

    Inside a literal (``b·rest``: it neither accepts nor calls, and ``rest`` follows ``b``) the
    run reads the expression alone: no state is made for a byte, only for the end and for what a
    token or a walk later stops at. Most runs (a key's name) would otherwise make a state a byte."""
    runs = dfa.forced_runs
    expr = dfa.expr(state)
    if expr in runs:
        return runs[expr]
    data = bytearray()
    exprs = [expr]
    mask = dfa.exit_mask | walk.ACCEPTING  # the root rule's exits are calls only, but its text may end
    current: int | None = state  # the state of ``expr``; None where none was made
    while len(data) < MAX_CHAIN:
        byte = literal_head(expr)
        if byte is not None:
            expr, current = expr.args[1], None
        else:
            if current is None:
                current = dfa.state_of(expr)
            if dfa.flags[current] & mask:
                break
            live = np.flatnonzero(dfa.row(current) != DEAD)
            if len(live) != 1:
                break
            byte = int(live[0])
            current = dfa.transition(current, byte)
            expr = dfa.expr(current)
        data.append(byte)
        exprs.append(expr)
    if len(data) < 2:
        runs[exprs[0]] = None
        return None
    end = dfa.state_of(expr) if current is None else current
    # A run cut at MAX_CHAIN may go on past its end: only its first state learns it.
    cut = len(data) == MAX_CHAIN
    for offset in range(1 if cut else len(data) - 1):
        runs[exprs[offset]] = (bytes(data[offset:]), end)
    if not cut:
        runs[exprs[-2]] = None  # one byte to the end: no run of two
    return runs[exprs[0]]


def _compute_rule_row(dfa: RuleDfa, state: int, vocab: VocabIndex, rule_row_of: Callable[[int], RuleRow] | None = None) -> RuleRow:
    """The tokens read inside ``dfa``'s rule from ``state``, by byte class of their first byte.
    ``rule_row_of`` gives the cached row of another state of the rule, where one row can serve
    many (:meth:`_RowParts.text_open`).

    The state's own loop (a string body, a run of digits) takes the tokens made only of loop bytes
    (or whole characters, where every UTF-8 character loops) in one per-tokenizer lookup and walks
    the others from their first byte outside it. So does a class leading many tokens into another
    state that loops on bytes including the class (``[a-z]+`` after its first letter). Other
    classes are walked from the start.
    """
    if state == DEAD or not dfa.is_live(state):
        return _listed_row(_NO_IDS)
    parts = _RowParts(dfa, state, vocab)
    expr = dfa.expr(state)
    head = expr.args[0] if expr.kind == CAT_KIND else expr
    if head in TEXT_OPEN and not dfa.flags[state] & dfa.exit_mask:
        found = None if rule_row_of is None else _trie_node_row(dfa, state, vocab, rule_row_of)
        if found is not None:
            return found
        parts.text_open(rule_row_of)
        return _finish_rule_row(dfa, parts)
    if _counted_text_head(expr):
        parts.counted_text(head, expr.args[1])
        return _finish_rule_row(dfa, parts)
    run = _forced_run(dfa, state)  # first: inside a literal, the state's row is never needed
    if run is not None:
        return _chain_row(dfa, state, vocab, *run)
    successors = dfa.row(state)
    covered = successors == DEAD
    loop = successors == state
    if loop.any():
        text = _loops_on_text(dfa, state)
        first = loop | _LEAD_BYTES if text else loop
        parts.into_loop(first, state, loop, text)
        covered |= first
    # Where every multi-byte character leads to one state, its lead bytes join that state's class.
    char_target = _text_target(dfa, state) if not covered[0xC2] else None
    if char_target is not None:
        leads = _LEAD_BYTES & ~covered
        covered = covered | leads
    for target in np.flatnonzero(np.bincount(np.append(successors[~covered], char_target or 0), minlength=1)).tolist():
        first = (successors == target) & ~covered
        if target == char_target:
            first |= leads
        if vocab.count_starting_with(first) >= LOOP_SHORTCUT_TOKENS:
            target_loop = dfa.row(target) == target
            leads = bool((first & _LEAD_BYTES).any())
            text = leads and _loops_on_text(dfa, target)
            if target_loop.any() and not (first & ~target_loop & ~(_LEAD_BYTES if text else False)).any() and (text or not leads):
                parts.into_loop(first, target, target_loop, text)
                continue
        starting = vocab.starting_with(first)
        parts.walk_from(starting, vocab.begins[starting], state)
    return _finish_rule_row(dfa, parts)


MAX_TRIE_CLOSINGS = 256
"""A key trie's node excluding more values than this has its row walked (:meth:`_RowParts.text_open`)."""


def _trie_node_row(dfa: RuleDfa, state: int, vocab: VocabIndex, rule_row_of: Callable[[int], RuleRow]) -> RuleRow | None:
    """The row of ``state``, a node of a key trie then a rest (:data:`json_text.TEXT_OPEN`: the
    key of a member the object's declared keys do not name), from the row of the trie's body state
    ``B`` (any key text, the closing quote, the rest). The node reads every text as ``B`` does
    but those that close the key at a value it excludes (:func:`json_text.excluded_closings`).
    So its row is ``B``'s less the tokens that start with such a closing, found by one prefix
    search each, where walking the tokens from each node of the trie cost about a millisecond.
    ``None`` where the node excludes more than :data:`MAX_TRIE_CLOSINGS` values, or it or ``B``
    accepts, calls or is a place to leave the rule."""
    expr = dfa.expr(state)
    node, rest = (expr.args[0], expr.args[1]) if expr.kind == CAT_KIND else (expr, None)
    closings = excluded_closings(node, MAX_TRIE_CLOSINGS)
    if closings is None:
        return None
    # B follows the node by any character no excluded value goes on with: made without the node's row.
    body_state = dfa.state_of(BODY_AND_QUOTE if rest is None else E.cat(BODY_AND_QUOTE, rest))
    if (dfa.flags[state] | dfa.flags[body_state]) & (walk.ACCEPTING | walk.HAS_CALLS | dfa.exit_mask):
        return None
    closing = [np.concatenate(vocab.prefix_split(text)[1:]) for text in closings]
    positions = np.concatenate(closing) if closing else _NO_POSITIONS
    row = rule_row_of(body_state)
    less = vocab.token_ids[positions]
    kept = _not_in(row.exit_positions, positions)
    if row.words is not None:
        words, ids = row.words.copy(), _NO_IDS
        walk.clear_bits(words, less)
        words.flags.writeable = False
    else:
        words, ids = None, row.ids[_not_in(row.ids, less)]
    calling, leaving = int(kept[: row.calling].sum()), int(kept[: row.leaving].sum())
    exits = (row.exit_positions[kept], row.exit_begins[kept], row.exit_ends[kept], row.exit_states[kept])
    return RuleRow(words, ids, *exits, calling, leaving, (body_state, less))


def _not_in(values: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """``[n]`` bool: whether each of ``values`` is none of the few ``excluded``."""
    if len(excluded) > 16:
        return ~np.isin(values, excluded, kind="table")  # a table over their range: no sort
    kept = np.ones(len(values), dtype=bool)
    for value in excluded.tolist():
        kept &= values != value
    return kept


def _chain_row(dfa: RuleDfa, state: int, vocab: VocabIndex, data: bytes, end: int) -> RuleRow:
    """The row of a forced run: from ``state`` only ``data`` can follow, leading to ``end`` (no
    state on the way accepts or calls). A token that is a prefix of ``data`` is allowed (all of it
    too, where ``end`` is live); one that starts with all of it is walked on from ``end``; every
    other token dies. Most positions inside a literal reach no token that goes past its end:
    their row is a few token ids, made without the general assembly."""
    shorter, exact, longer = vocab.prefix_split(data)
    if len(exact) and dfa.is_live(end):
        shorter = np.concatenate([shorter, exact])
    ids = vocab.token_ids[shorter] if len(shorter) else _NO_IDS
    if not len(longer):
        return _listed_row(ids)
    parts = _RowParts(dfa, state, vocab)
    parts.listed.append(ids)
    parts.walk_from(longer, vocab.begins[longer] + len(data), end)
    if dfa.flags[end] & dfa.exit_mask:  # leaving the rule right after the run
        parts.exits.append((longer, vocab.begins[longer] + len(data), np.full(len(longer), end, dtype=np.int32)))
    return _finish_rule_row(dfa, parts)


def _listed_row(ids: np.ndarray) -> RuleRow:
    """A rule row of the tokens ``ids`` (``[k]`` int32) and no exits."""
    return RuleRow(None, ids, _NO_POSITIONS, _NO_POSITIONS, _NO_POSITIONS, _NO_IDS, 0, 0)


_NO_POSITIONS = read_only(np.zeros(0, dtype=np.int64))
_NO_IDS = read_only(np.zeros(0, dtype=np.int32))
"""Empty exits and ids, shared by every row that has none."""


def _row_within_room(dfa: RuleDfa, state: int, twin_row: RuleRow, room: int, vocab: VocabIndex) -> RuleRow:
    """The rule row of ``state`` from the row of its length-free twin
    (:meth:`RuleDfa.length_free_twin`): the twin's tokens and exits of at most ``room`` bytes, and
    the longer tokens walked from ``state`` itself. The twin's row itself when no token is longer."""
    if room >= vocab.longest:
        return twin_row
    parts = _RowParts(dfa, state, vocab)
    if twin_row.words is not None:
        parts.packed.append(twin_row.words & vocab.words_up_to_length(room))
    elif len(twin_row.ids):
        parts.listed.append(twin_row.ids[vocab.lengths[vocab.position_of[twin_row.ids]] <= room])
    short = vocab.lengths[twin_row.exit_positions] <= room
    parts.exits.append((twin_row.exit_positions[short], twin_row.exit_begins[short], twin_row.exit_states[short]))
    longer = vocab.longer_than(room)
    parts.walk_from(longer, vocab.begins[longer], state)
    return _finish_rule_row(dfa, parts)


def _finish_rule_row(dfa: RuleDfa, parts: _RowParts) -> RuleRow:
    """Walk what is left to walk and assemble the row."""
    vocab = parts.vocab
    if parts.walks:
        positions, begins, starts = (np.concatenate(column) for column in zip(*parts.walks))
        status, finals, walked_exits = _walk_in_rule(dfa, starts, begins, vocab.ends[positions], vocab.flat, dfa.exit_mask)
        exit_items, exit_begins, exit_states = walked_exits
        parts.exits.append((positions[exit_items], exit_begins, exit_states))
        ended = np.flatnonzero(status == walk.STATUS_END)
        if dfa.may_have_dead_states and len(ended):
            ended = ended[_live_states(dfa, finals[ended])]
        parts.listed.append(vocab.token_ids[positions[ended]])
    exits = _ordered_exits(dfa, parts.exits, vocab)
    listed = [ids for ids in parts.listed if len(ids)]
    if not parts.packed and sum(len(ids) for ids in listed) <= SPARSE_LIMIT:
        words, ids = None, np.concatenate(listed).astype(np.int32) if listed else _NO_IDS
    else:
        words = parts.packed[0].copy() if parts.packed else np.zeros(vocab.width, dtype=np.int32)
        for more in parts.packed[1:]:
            np.bitwise_or(words, more, out=words)
        for group in listed:
            walk.set_bits(words, group)
        words.flags.writeable = False
        ids = _NO_IDS
    return RuleRow(words, ids, *exits)


def _ordered_exits(dfa: RuleDfa, exits: list[tuple[np.ndarray, np.ndarray, np.ndarray]], vocab: VocabIndex) -> tuple:
    """``(positions, begins, ends, states, calling, leaving)`` of a :class:`RuleRow` from parts of
    ``(positions, begins, states)``: exits from calling states first, then from accepting ones."""
    exits = [part for part in exits if len(part[0])]
    if not exits:
        return _NO_POSITIONS, _NO_POSITIONS, _NO_POSITIONS, _NO_IDS, 0, 0
    positions, begins, states = (np.concatenate(column) for column in zip(*exits))
    flags = dfa.flags[states]
    rank = np.where(flags & walk.HAS_CALLS, 0, np.where(flags & walk.ACCEPTING, 1, 2)).astype(np.int8)
    counts = np.bincount(rank, minlength=3)
    if (rank[1:] < rank[:-1]).any():
        order = np.argsort(rank, kind="stable")
        positions, begins, states = positions[order], begins[order], states[order]
    return positions, begins, vocab.ends[positions], states.astype(np.int32), int(counts[0]), int(counts[0] + counts[1])


def _live_states(dfa: RuleDfa, states: np.ndarray) -> np.ndarray:
    """``[m]`` bool: whether each of ``states`` (``[m]`` int32) is live (asked once per distinct state)."""
    distinct = np.flatnonzero(np.bincount(states))
    table = np.zeros(int(distinct[-1]) + 1, dtype=bool)
    table[distinct] = [dfa.is_live(int(s)) for s in distinct]
    return table[states]


def _group_by_state(states: np.ndarray, items: np.ndarray):  # used by budgets
    """Yield ``(state, items with that state)`` for ``states`` (``[m]`` non-negative ints: states,
    character counts) and ``items`` (``[m]``)."""
    if not len(states):
        return
    distinct = np.flatnonzero(np.bincount(states))
    if len(distinct) <= 16:
        for state in distinct.tolist():
            yield state, items[states == state]
        return
    # Numpy sorts 16-bit keys by radix: about five times faster on a string body's 100k tokens.
    keys = states.astype(np.uint16) if distinct[-1] < 1 << 16 else states
    order = np.argsort(keys, kind="stable")
    sorted_states = states[order]
    bounds = np.flatnonzero(np.diff(sorted_states)) + 1
    for chunk in np.split(order, bounds):
        yield int(states[chunk[0]]), items[chunk]


def _walk_in_rule(dfa: RuleDfa, states: np.ndarray, begins: np.ndarray, ends: np.ndarray, flat: np.ndarray, exit_mask: int):
    """:func:`walk.walk_rule` to the end, computing the transitions it meets unknown on the way.

    Returns:
        ``(status, finals, (exit_items, exit_begins, exit_states))``.
    """

    def fill(state: int, byte: int) -> tuple[np.ndarray, np.ndarray]:
        dfa.transition(state, byte)
        return dfa.table, dfa.flags

    result = walk.walk_rule(dfa.table, dfa.flags, flat, states, begins, ends, exit_mask, dfa.column_of_byte, dfa.width, fill)
    return result.status, result.finals, (result.exit_items, result.exit_at, result.exit_states)


def _loop_prefix_exits(vocab: VocabIndex, starting: np.ndarray, first_out: np.ndarray, state: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exits inside the loop prefix of tokens, for a loop state that may be left (a number's
    digits): after each of the first ``L`` bytes, ``L`` the length of the token's prefix in the
    loop (``first_out``: ``[m]`` int64 flat index of each token's first byte outside it), short of
    the token's end. ``starting``: ``[m]`` int64 positions of tokens whose first byte is in the loop."""
    counts = np.minimum(first_out - vocab.begins[starting], vocab.lengths[starting] - 1)
    keep = counts > 0
    positions, counts = starting[keep], counts[keep]
    repeated = np.repeat(positions, counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + 1
    return repeated, vocab.begins[repeated] + offsets, np.full(len(repeated), state, dtype=np.int32)


_LANGUAGES: "OrderedDict[Expr, PushdownAutomaton]" = OrderedDict()
"""The automata :func:`matches` walked last, most recent last. Held strongly and a few only: an
automaton's root rule holds its expression, so a table keyed weakly by the expression kept every
automaton it ever made."""
_LANGUAGES_KEPT = 8
_LANGUAGES_LOCK = threading.Lock()


def matches(expr: Expr, data: bytes | str) -> bool:
    """Whether the grammar whose start rule is ``expr`` matches all of ``data`` (``str`` as UTF-8);
    :func:`expr.matches <grammask.grammars.fsm.expr.matches>` for expressions that call rules."""
    if not has_calls(expr):
        return expr_matches(expr, data)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _LANGUAGES_LOCK:
        automaton = _LANGUAGES.get(expr)
        if automaton is None:
            rules = RuleSet(Rule("language", expr), max_states=1 << 20)
            automaton = PushdownAutomaton(rules, None, max_positions=1 << 20, max_row_bytes=0)
            _LANGUAGES[expr] = automaton
            while len(_LANGUAGES) > _LANGUAGES_KEPT:
                _LANGUAGES.popitem(last=False)
        else:
            _LANGUAGES.move_to_end(expr)
    position = automaton.walk(START, raw)
    return position != DEAD and bool(automaton.accepting[position])


__all__ = ["DEFAULT_MAX_STACKS", "NO_PARENT", "PushdownAutomaton", "RuleRow", "matches"]
