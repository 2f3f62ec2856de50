"""Regular expressions over bytes with intersection and complement, and their derivatives.

This is the algebra of the native backend. JSON Schema lowering builds expressions with the smart
constructors below (``allOf`` is :func:`inter`, ``anyOf`` is :func:`alt`, ``not`` is :func:`neg`);
the automaton is then explored lazily by taking Brzozowski derivatives: the state reached from
expression ``e`` by byte ``b`` is ``derivative(e, b)``, and a state accepts when it is
:func:`nullable`. Smart constructors normalise (associativity, commutativity and idempotence of
``|`` and ``&``, identities of ``∅``, ``ε`` and ``¬∅``), so every expression has finitely many
distinct derivatives and the lazily built DFA is finite.

Expressions are hash-consed: structurally equal expressions are the same object, so identity is
equality and states can be dictionary keys. Byte sets are 256-bit Python ints (bit ``b`` = byte ``b``).
Everything is over bytes: text is matched as its UTF-8 encoding (see :func:`char_ranges`).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Sequence

from grammask.errors import CompileLimitError
from grammask.grammars.fsm.collector import PAUSE_GC, pending_collection_seconds

ALL_BYTES = (1 << 256) - 1

EMPTY_KIND, EPS_KIND, BYTES_KIND, CAT_KIND, ALT_KIND, AND_KIND, NOT_KIND, STAR_KIND, CALL_KIND, COUNT_KIND = range(10)
_KIND_NAMES = ("∅", "ε", "bytes", "cat", "alt", "and", "not", "star", "call", "count")

CALL_MIN_LENGTH = 1
""":func:`min_length` of a :func:`call` leaf: a lower bound (every rule matches non-empty text); the
pushdown runtime computes rules' exact lengths itself."""


class CallsUnderAlgebraError(Exception):
    """An intersection or complement was asked of an expression with :func:`call` leaves other
    than of free-value rules. Such an operation would act on the call as one symbol, not on the
    language it stands for; the JSON Schema lowering catches this and lowers that subtree with its
    values inlined (free values then calls of the free-value rule)."""


INFINITE_LENGTH = 1 << 62
""":func:`min_length` of an expression that matches nothing."""


def _facts(kind: int, args: tuple) -> tuple[bool, int, bool]:
    """(nullable, min_length, plain) of a node other than a concatenation (whose facts
    :class:`Expr` sets inline) from its children's."""
    if kind == EMPTY_KIND:
        return False, INFINITE_LENGTH, True
    if kind == EPS_KIND:
        return True, 0, True
    if kind == BYTES_KIND:
        return False, 1, True
    if kind == STAR_KIND:
        return True, 0, args[0]._plain
    if kind == CALL_KIND:
        return False, CALL_MIN_LENGTH, True
    if kind == ALT_KIND:
        return any(p._nullable for p in args), min(p._min_length for p in args), all(p._plain for p in args)
    if kind == AND_KIND:
        rest = [p for p in args if not _is_all_strings(p)]
        if len(rest) == 1:  # x ∩ Σ*: a grouping of x (see group()), which keeps x's facts
            return rest[0]._nullable, rest[0]._min_length, rest[0]._plain
        return all(p._nullable for p in args), max(p._min_length for p in args), False
    # NOT: the empty string unless the complemented part matches it
    inner = args[0]._nullable
    return not inner, 1 if inner else 0, False


def _is_all_strings(e: "Expr") -> bool:
    return e.kind == STAR_KIND and e.args[0].kind == BYTES_KIND and e.args[0].args[0] == ALL_BYTES


_NO_SETS: frozenset[int] = frozenset()
_UNCARRIED = frozenset((-1,))
"""What a node carries past :data:`MAX_CARRIED_SETS` sets: none (its sets are gathered from below)."""
MAX_CARRIED_SETS = 64
"""Past this many distinct byte sets (of two bytes or more) below it, a node carries none and
:func:`byte_atoms` walks down to the nodes that do: a long concatenation of distinct classes would
otherwise copy ever larger sets at every node, quadratic work."""


def _carry_byte_sets(e: "Expr") -> None:
    """Set ``_single_bytes`` and ``_byte_sets`` on ``e`` and every node below it that lacks them
    (iteratively, children first): the nodes a derivative built (see :class:`Expr`), on first use
    by :func:`byte_atoms`."""
    pending = [e]
    while pending:
        node = pending[-1]
        if node._byte_sets is not None:
            pending.pop()
            continue
        kind = node.kind
        if BYTES_KIND < kind != CALL_KIND:
            waiting = [part for part in node.args if part._byte_sets is None]
            if waiting:
                pending.extend(waiting)
                continue
        node._single_bytes, node._byte_sets = _byte_sets_of(kind, node.args)
        pending.pop()


def _byte_sets_of(kind: int, args: tuple) -> tuple[int, frozenset[int] | None]:
    """``(single bytes, other byte sets)`` of a node other than a concatenation (whose sets
    :class:`Expr` joins inline) from its children's: the bytes that some part reads alone (a mask:
    each is an atom of its own) and every byte set of two bytes or more below it
    (:data:`_UNCARRIED` past :data:`MAX_CARRIED_SETS`). ``(0, None)`` when a part carries none yet
    (a derivative's node: :func:`_carry_byte_sets` joins them on first use)."""
    if kind == BYTES_KIND:
        mask = args[0]
        return (mask, _NO_SETS) if mask and not mask & (mask - 1) else (0, frozenset((mask,)))
    if kind < BYTES_KIND or kind == CALL_KIND:
        return 0, _NO_SETS
    single, sets = 0, _NO_SETS
    for part in args:
        part_sets = part._byte_sets
        if part_sets is None:  # a derivative's node below: left to byte_atoms
            return 0, None
        single = _joined_bytes(single, part._single_bytes)
        if part_sets is not sets and part_sets:  # most parts add none, or the very same sets
            sets = part_sets if not sets else _joined_sets(sets, part_sets)
    return single, sets


def _joined_bytes(a: int, b: int) -> int:
    """``a | b``, the very object of ``a`` or ``b`` when it is that union: a node's single bytes
    are a 256-bit int, and one new int per node was 2.8 MB over Handwritten/notnames9's nodes."""
    joined = a | b
    return b if joined == b else a if joined == a else joined


def _joined_sets(a: frozenset[int], b: frozenset[int]) -> frozenset[int]:
    """``a | b``, reusing either when it holds the other (most nodes add no byte set of their own);
    :data:`_UNCARRIED` when either is, or past :data:`MAX_CARRIED_SETS`."""
    if a is _UNCARRIED or b is _UNCARRIED:
        return _UNCARRIED
    if a is b or not b or (len(b) <= len(a) and b <= a):
        return a
    if not a or a <= b:
        return b
    union = a | b
    return _shared_sets(union) if len(union) <= MAX_CARRIED_SETS else _UNCARRIED


_SETS: dict[frozenset[int], frozenset[int]] = {}


def _shared_sets(sets: frozenset[int]) -> frozenset[int]:
    """The one frozenset kept for sets equal to ``sets``: the nodes of a grammar's rules hold few
    distinct unions (in an eager version, Handwritten/notnames9 built 13,435 of them, 229
    distinct, 15 MB)."""
    return _kept(_SETS, sets)


def _node_facts(kind: int, args: tuple, bounds: tuple[int, int | None] | None, deriving: bool) -> tuple:
    """``(hash, nullable, min_length, plain, has_calls, single bytes, byte sets)`` of a new node
    other than a concatenation, from its children's (:class:`Expr` sets a concatenation's inline).

    Facts are set when a node is built, from the children's: a node is built after its children,
    so this is O(1) per node and never walks (or recurses through) a large expression. Byte sets
    too (for byte_atoms): joining the children's is cheaper than a walk that gathers them on first
    use, and 70% of the nodes a run built were asked. Not for the nodes a derivative builds (most
    nodes of an intersection-heavy automaton, seldom asked), nor above a node that lacks them:
    byte_atoms walks to those."""
    if kind == COUNT_KIND:  # a plain, call-free, non-nullable part (see counted())
        part, (lo, _) = args[0], bounds
        single, sets = (0, None) if deriving else (part._single_bytes, part._byte_sets)
        return hash((kind, part._hash, bounds)), lo == 0, min(INFINITE_LENGTH, lo * part._min_length), True, False, single, sets
    node_hash = hash((kind, *[a._hash for a in args])) if BYTES_KIND < kind < CALL_KIND else hash((kind, args))
    nullable, min_len, plain = _facts(kind, args)
    has_calls = kind == CALL_KIND or (kind > BYTES_KIND and any(a._has_calls for a in args))
    if deriving and BYTES_KIND < kind != CALL_KIND:
        single, sets = 0, None
    else:
        single, sets = _byte_sets_of(kind, args)
    return node_hash, nullable, min_len, plain, has_calls, single, sets


class Expr:
    """A hash-consed expression node. Build with the module's constructors, never directly."""

    __slots__ = (
        "kind", "args", "bounds", "_hash", "_nullable", "_derivatives", "_call_derivatives", "_classes", "_min_length", "_plain",
        "_settled", "_parts_tried", "_length_memo", "_has_calls", "_first_calls", "_first", "_bound", "_productive", "_single_bytes",
        "_byte_sets", "__weakref__",
    )

    def __init__(self, kind: int, args: tuple, bounds: tuple[int, int | None] | None = None, deriving: bool = False) -> None:
        self.kind = kind
        self.args = args
        self.bounds = bounds
        """``(lo, hi)`` of a :func:`counted` node (``hi`` ``None``: unbounded); ``None`` otherwise."""
        if kind == CAT_KIND:  # most nodes: their facts inline, from the two children's
            head, tail = args
            self._hash = hash((kind, head._hash, tail._hash))
            self._nullable = head._nullable and tail._nullable
            self._min_length = min(INFINITE_LENGTH, head._min_length + tail._min_length)
            self._plain = head._plain and tail._plain
            self._has_calls = head._has_calls or tail._has_calls
            sets, tail_sets = head._byte_sets, tail._byte_sets
            if deriving or sets is None or tail_sets is None:
                self._single_bytes, self._byte_sets = 0, None  # joined by byte_atoms if ever asked
            else:
                # Inline where one side is empty or both are the same: most joins.
                single, tail_single = head._single_bytes, tail._single_bytes
                self._single_bytes = tail_single if not single else single if not tail_single else _joined_bytes(single, tail_single)
                self._byte_sets = tail_sets if sets is tail_sets or not sets else sets if not tail_sets else _joined_sets(sets, tail_sets)
        else:
            (self._hash, self._nullable, self._min_length, self._plain, self._has_calls, self._single_bytes,
             self._byte_sets) = _node_facts(kind, args, bounds, deriving)
        # Made on first use (most nodes are never derived): by index into byte_classes(self), and
        # by called rule.
        self._derivatives: list[Expr | None] | None = None
        self._call_derivatives: dict[object, Expr] | None = None
        self._classes: tuple[int, ...] | None = None
        self._first_calls: tuple | None = None
        self._first: int | None = None
        self._bound: int | None = None
        # Kept by grammask.grammars.fsm.automaton: the exact shortest length of a & / ¬ node found
        # by a search, and a memo of structural_length.
        self._settled: int | None = None
        self._parts_tried = False  # every & / ¬ part below was settled or tried (see unsettled_parts)
        self._length_memo: tuple[int, int, bool] | None = None
        # Kept by grammask.grammars.fsm.rules: whether some text matches, calls standing for
        # their rules' languages (a definitive answer only).
        self._productive: bool | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return to_string(self)

    def __reduce__(self):  # pragma: no cover - expressions are rebuilt, not pickled
        raise TypeError("expressions are process-local; rebuild them from their spec")


# Interning: the kind and the children's ids, packed in one int (64 bits each, the kind highest:
# distinct for distinct kinds and child counts; a third of the memory of a tuple of ids), → weak
# reference to the node; a leaf's key is ``(kind, value)``. Keys hold no references:
# a key that held the children would keep them alive through the global table, and derivatives
# (cached on nodes, often pointing back at their parents) would then keep every expression ever
# built alive. A live node's children are alive, so their ids are unique while it lives; a dead
# node's entry is simply replaced. Plain references without callbacks (a WeakValueDictionary's
# cost more than the rest of building a node); dead entries are swept whenever the table has
# doubled since the last sweep.
_INTERN: dict[tuple | int, "weakref.ref[Expr]"] = {}
_INTERN_LOCK = threading.Lock()
_sweep_at = 1 << 16


def _make(kind: int, args: tuple, bounds: tuple[int, int | None] | None = None) -> Expr:
    global _sweep_at
    if kind <= BYTES_KIND:
        key: tuple | int = (kind, *args)
    elif kind == COUNT_KIND:
        key = (kind, id(args[0]), bounds)
    else:
        key = kind
        for arg in args:
            key = (key << 64) | id(arg)
    ref = _INTERN.get(key)  # a hit needs no lock: reading the table is atomic
    node = ref() if ref is not None else None
    if node is not None:
        return node
    built = False
    with _INTERN_LOCK:
        ref = _INTERN.get(key)
        node = ref() if ref is not None else None
        if node is None:
            node = Expr(kind, args, bounds, _ACTIVE.deriving)
            built = True
            _INTERN[key] = weakref.ref(node)
            if len(_INTERN) >= _sweep_at:
                for dead in [k for k, r in _INTERN.items() if r() is None]:
                    del _INTERN[dead]
                _sweep_at = max(1 << 16, 2 * len(_INTERN))
    if built:
        budget = _ACTIVE.budget
        if budget is not None:
            budget.spend()
    return node


# ---------------------------------------------------------------------------------- budgets

NODE_BYTES = 448
"""What one new node costs, with its interning entry and derivative cache (about 400-450 bytes
measured with ``tracemalloc`` on large schemas): the unit in which :class:`BuildBudget` counts memory."""
_CLOCK_EVERY = 256
_WORK_PER_CLOCK = 1 << 14
"""Units of :meth:`BuildBudget.work` (parts of a large union looked at, about a microsecond each)
between two readings of the clock."""
LARGE_UNION = 256
"""A union or intersection with at least this many parts charges its derivatives and byte classes
to the build budget by part (:meth:`BuildBudget.work`)."""


class _Active(threading.local):
    budget: "BuildBudget | None" = None  # per thread; the class default spares a failed lookup
    deriving = False  # inside derivative(): new nodes leave their byte sets to byte_atoms


_ACTIVE = _Active()

try:  # the C build of Expr and _make (grammask/grammars/fsm/_expr.c): the same contract, built at install
    if os.environ.get("GRAMMASK_PURE_PYTHON"):
        raise ImportError("GRAMMASK_PURE_PYTHON is set")
    from grammask.grammars.fsm import _expr as _native
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _native = None

PythonExpr = Expr
"""The pure-Python node class: the reference of the C one, and what runs without it."""
NATIVE = _native is not None
"""Whether the C build of nodes is in use."""
if _native is not None:
    _native.setup(
        table=_INTERN, active=_ACTIVE, node_facts=_node_facts, joined_sets=_joined_sets,
        to_string=lambda e: to_string(e), infinite_length=INFINITE_LENGTH,
    )
    Expr = _native.Expr  # type: ignore[misc,assignment]  # noqa: F811
    _make = _native.make  # noqa: F811


class BuildBudget:
    """What building expressions may cost in one thread: a wall-clock deadline and a memory cap,
    counted as :data:`NODE_BYTES` per new node. Within ``with budget:``, every node this thread
    builds is counted (hash-consing hits cost nothing) and the clock is read every
    :data:`_CLOCK_EVERY` nodes, so a construction that runs away (nested counts, huge
    alternations, products of combinators) stops right where it passes a cap, in a regex parser,
    a schema lowering or a first derivative alike, with :class:`~grammask.errors.CompileLimitError`
    naming ``"compile_seconds"`` or ``"expression_bytes"``.

    Args:
        seconds: the time cap, counted from ``started``; ``None`` for none.
        max_bytes: the memory cap; ``None`` for none.
        started: a :func:`time.perf_counter` value (default: now), e.g. when a compile began.
        tally: a one-item list to which :attr:`bytes` is added when the ``with`` block ends
            (what a grammar's later builds come to), or ``None``.
    """

    def __init__(
        self, *, seconds: float | None = None, max_bytes: int | None = None, started: float | None = None, tally: list[int] | None = None
    ) -> None:
        self.tally = tally
        self.seconds = seconds
        self.max_bytes = max_bytes
        self.started = time.perf_counter() if started is None else started
        self.deadline = None if seconds is None else self.started + seconds
        self._put_off_before = PAUSE_GC.put_off()  # another build's, if one is under way
        self.nodes = 0
        self._max_nodes = None if max_bytes is None else max_bytes // NODE_BYTES
        self._outer: list[BuildBudget | None] = []
        self._work = 0
        self._next_clock = _WORK_PER_CLOCK

    @property
    def bytes(self) -> int:
        """The memory counted so far."""
        return self.nodes * NODE_BYTES

    def spend(self) -> None:
        """Count one new node; raise when a cap is passed."""
        self.nodes += 1
        if self._max_nodes is not None and self.nodes > self._max_nodes:  # bytes past max_bytes
            raise CompileLimitError("expression_bytes", self.bytes, self.max_bytes, f"{self.nodes:,} expression nodes of about {NODE_BYTES} bytes built")
        if self.deadline is not None and self.nodes % _CLOCK_EVERY == 0:
            self._check_clock("while building expressions")

    def work(self, units: int) -> None:
        """Count ``units`` of work that may build no node (the parts of a large union derived: all
        of a 50,000-value enum's literals, one new node a byte); raise past the deadline. The clock
        is read every :data:`_WORK_PER_CLOCK` units."""
        self._work += units
        if self.deadline is not None and self._work >= self._next_clock:
            self._next_clock = self._work + _WORK_PER_CLOCK
            self._check_clock("while deriving large unions")

    def elapsed(self) -> float:
        """Seconds since :attr:`started`, counting the garbage collection this build has put off
        so far (:func:`~grammask.grammars.fsm.collector.pending_collection_seconds`): it runs
        when the build's pause ends, before the compile or fill returns."""
        return time.perf_counter() - self.started + pending_collection_seconds(self._put_off_before)

    def check_clock(self, stage: str) -> None:
        """Raise when :meth:`elapsed` is past ``seconds`` (if any), naming ``stage``: for a step
        that may build no node."""
        if self.deadline is not None:
            self._check_clock(stage)

    def _check_clock(self, stage: str) -> None:
        """Raise when :meth:`elapsed` is past ``seconds``."""
        later = pending_collection_seconds(self._put_off_before)
        elapsed = time.perf_counter() - self.started + later
        if elapsed > self.seconds:
            if later >= 0.01:
                stage += f", with about {later:.2f} s of garbage collection left to run"
            raise CompileLimitError("compile_seconds", round(elapsed, 3), self.seconds, stage)

    def __enter__(self) -> "BuildBudget":
        self._outer.append(_ACTIVE.budget)
        _ACTIVE.budget = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        _ACTIVE.budget = self._outer.pop()
        if self.tally is not None:
            self.tally[0] += self.bytes


def current_budget() -> BuildBudget | None:
    """The :class:`BuildBudget` this thread is building under, if any."""
    return _ACTIVE.budget


def nested_too_deeply() -> CompileLimitError:
    """The error of a build that reached Python's recursion limit (see
    :func:`~grammask.schemas.validate.stack_exhausted`): the expression is nested too deeply."""
    return CompileLimitError("max_nesting", "Python's recursion limit", sys.getrecursionlimit(), "the expression is nested too deeply")


# Constants are kept alive by these module references.
EMPTY = _make(EMPTY_KIND, ())
"""∅: matches nothing."""
EPS = _make(EPS_KIND, ())
"""ε: matches the empty string only."""
ANY = _make(NOT_KIND, (EMPTY,))
"""¬∅: matches every byte string."""


# ---------------------------------------------------------------------------------- constructors


def byte_set(mask: int) -> Expr:
    """One byte from a set given as a 256-bit mask (bit ``b`` = byte ``b``)."""
    mask &= ALL_BYTES
    return EMPTY if mask == 0 else _make(BYTES_KIND, (mask,))


_BYTE_NODES = [byte_set(1 << b) for b in range(256)]
"""The node of each single byte (kept: literals are made of them)."""


def byte_range(lo: int, hi: int) -> Expr:
    """One byte in ``[lo, hi]``."""
    return byte_set(((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)) if lo <= hi else EMPTY


def literal(data: bytes | str) -> Expr:
    """Exactly ``data`` (a ``str`` is matched as its UTF-8 bytes)."""
    return literal_then(data.encode("utf-8") if isinstance(data, str) else data, EPS)


def literal_then(data: bytes, rest: Expr) -> Expr:
    """``cat(literal(data), rest)``, built onto ``rest`` from its last byte back: no node of the
    literal alone is made (``cat`` would make them, then copy the spine onto ``rest``)."""
    if rest is EMPTY:
        return EMPTY
    nodes = _BYTE_NODES
    for byte in reversed(data):
        rest = nodes[byte] if rest is EPS else _make(CAT_KIND, (nodes[byte], rest))
    return rest


def cat(*parts: Expr) -> Expr:
    """Concatenation. ``cat()`` is ε."""
    result = EPS
    for part in reversed(parts):
        result = _cat2(part, result)
    return result


def _cat2(a: Expr, b: Expr) -> Expr:
    if a is EMPTY or b is EMPTY:
        return EMPTY
    if a is EPS:
        return b
    if b is EPS:
        return a
    if a.kind != CAT_KIND:
        return _make(CAT_KIND, (a, b))
    # Keep concatenations right-nested; walk a's spine without recursion (it may be long).
    heads = []
    while a.kind == CAT_KIND:
        heads.append(a.args[0])
        a = a.args[1]
    result = _make(CAT_KIND, (a, b))
    for head in reversed(heads):
        result = _make(CAT_KIND, (head, result))
    return result


def _flatten(kind: int, parts: Iterable[Expr]) -> set[Expr]:
    flat: set[Expr] = set()
    for part in parts:
        if part.kind == kind:
            flat.update(part.args)
        else:
            flat.add(part)
    return flat


def _sorted(parts: Iterable[Expr]) -> tuple[Expr, ...]:
    # A canonical order so that equal sets give the same tuple (and the same interned node).
    return tuple(sorted(parts, key=lambda e: (e.kind, e._hash, id(e))))


def alt(*parts: Expr) -> Expr:
    """Union. ``alt()`` is ∅."""
    flat = _flatten(ALT_KIND, parts)
    flat.discard(EMPTY)
    if ANY in flat:
        return ANY
    byte_union = 0
    for part in [p for p in flat if p.kind == BYTES_KIND]:
        byte_union |= part.args[0]
        flat.discard(part)
    if byte_union:
        flat.add(byte_set(byte_union))
    if not flat:
        return EMPTY
    if len(flat) == 1:
        return next(iter(flat))
    return _make(ALT_KIND, _sorted(flat))


python_cat, python_alt = cat, alt
"""The pure-Python constructors: the references of the C ones (``_expr.cat``, ``_expr.alt``)."""
if _native is not None:
    _native.set_constants(EMPTY, EPS, ANY)
    cat, alt = _native.cat, _native.alt  # noqa: F811


def inter(*parts: Expr) -> Expr:
    """Intersection. ``inter()`` is ¬∅ (everything).

    Raises:
        CallsUnderAlgebraError: two or more parts have :func:`call` leaves, or one has and another
            is not ``Σ*`` (intersecting a single part with ``Σ*`` is only a :func:`group`),
            unless every call is of a free-value rule (:func:`_inter_reading_free_values`).
    """
    flat = _flatten(AND_KIND, parts)
    if EMPTY in flat:
        return EMPTY
    if any(p._has_calls for p in flat):
        flat.discard(ANY)
        rest = [p for p in flat if not _is_all_strings(p)]
        if len(rest) == 1:
            return rest[0]
        # Within a derivative, the parts are derivatives of an intersection's parts: checked when it was made.
        if not _ACTIVE.deriving and not all(only_free_calls(p) for p in rest):
            raise CallsUnderAlgebraError("intersection of an expression with calls")
        return _inter_reading_free_values(rest)
    if EMPTY in flat:
        return EMPTY
    flat.discard(ANY)
    byte_parts = [p for p in flat if p.kind == BYTES_KIND]
    if byte_parts:
        common = ALL_BYTES
        for part in byte_parts:
            common &= part.args[0]
            flat.discard(part)
        flat.add(byte_set(common))
        if EMPTY in flat:
            return EMPTY
    if EPS in flat:
        return EPS if all(nullable(p) for p in flat) else EMPTY
    if any(_excludes(p, flat) for p in flat if p.kind == NOT_KIND):
        return EMPTY
    if not flat:
        return ANY
    if len(flat) == 1:
        return next(iter(flat))
    return _make(AND_KIND, _sorted(flat))


def _excludes(negation: Expr, parts: set[Expr]) -> bool:
    """Whether ``negation`` (a ¬ node) rules out another of ``parts`` outright: ``x ∩ ¬x`` and
    ``x ∩ ¬(x ∪ y)`` are ∅."""
    negated = negation.args[0]
    if negated in parts:
        return True
    return negated.kind == ALT_KIND and any(option in parts for option in negated.args)


# ------------------------------------------------------------------ free values under & and ¬
#
# A free-value rule (``rule.free_value``) matches every canonical JSON value, and its calls stand
# at value positions, so a text splits into "value, then the rest" in one way only (a JSON value
# is followed by a structural byte or the end). Its calls may then sit under & and ¬. Where no
# part of an intersection can read a byte that starts a value except through such a call, the
# intersection reads a value as one call and intersects what each part allows after it (a
# complement: the complement of what it allows), and the other bytes (a closing bracket, a comma)
# as the parts do. Where a part reads the start of a value byte by byte, every part's leading call
# is read through, one level of its body (whose values are calls again), and the parts are
# intersected byte by byte. So values that every part leaves free stay calls at any depth, and only
# where a part looks inside a value is that value read.

_NEGATED: "weakref.WeakKeyDictionary[Expr, Expr]" = weakref.WeakKeyDictionary()
"""A complement with free-value calls → the expression it complements, before :func:`_read_through`."""
_CALLED: "weakref.WeakKeyDictionary[Expr, tuple]" = weakref.WeakKeyDictionary()
"""Per node, weak references to the rules it calls: a rule holds its body, and a strong reference
here would keep a recursive rule's body (the key) alive for good. The node's call leaves keep the
rules alive as long as the node is."""


def called_rules(e: Expr) -> tuple:
    """Every rule ``e`` calls anywhere, in a fixed order (memoised per node)."""
    if not e._has_calls:
        return ()
    known = _CALLED.get(e)
    if known is None:
        found: dict = {}
        stack, seen = [e], set()
        while stack:
            node = stack.pop()
            if id(node) in seen or not node._has_calls:
                continue
            seen.add(id(node))
            cached = _CALLED.get(node) if node is not e else None
            if cached is not None:
                found.update(dict.fromkeys(ref() for ref in cached))
            elif node.kind == CALL_KIND:
                found[node.args[0]] = None
            else:
                stack.extend(node.args)
        _CALLED[e] = tuple(weakref.ref(rule) for rule in found)
        return tuple(found)
    return tuple(ref() for ref in known)


def only_free_calls(e: Expr) -> bool:
    """Whether every :func:`call` leaf of ``e`` is of a free-value rule."""
    if e.kind in (AND_KIND, NOT_KIND):  # made with free-value calls only
        return True
    return all(getattr(rule, "free_value", False) for rule in called_rules(e))


def free_rules_called(e: Expr) -> tuple:
    """The free-value rules ``e`` calls anywhere."""
    return tuple(rule for rule in called_rules(e) if getattr(rule, "free_value", False))


def _read_through(e: Expr) -> Expr:
    """``e`` with each free value it can start with also readable byte by byte: ``e`` ∪ (the
    rule's body, then what ``e`` allows after the call). Derivatives by bytes skip the calls,
    so this reads the same texts as ``e`` does with its calls standing for their rules."""
    calls = first_calls(e)
    if not calls:
        return e
    return alt(e, *(cat(rule.body, call_derivative(e, rule)) for rule in calls))


def _inter_reading_free_values(parts: list[Expr]) -> Expr:
    """The intersection of ``parts`` (at least two, each with calls of free-value rules only)."""
    positive = [p for p in parts if p.kind != NOT_KIND]
    negated = [_NEGATED.get(p, p.args[0]) for p in parts if p.kind == NOT_KIND]
    callers = {rule for p in positive + negated for rule in first_calls(p)}
    together = _make(AND_KIND, _sorted(set(parts)))  # where no part calls here, or for the bytes no value starts with
    if not callers:
        return together
    if positive and len(callers) == 1:
        rule = next(iter(callers))
        if not any(first_bytes(p) & first_bytes(rule.body) for p in positive + negated):
            # Where a value starts, every part reads it whole: one call, then what each allows
            # after it. The other bytes (a closing bracket, a comma) are read by the parts as they are.
            after = inter(*(call_derivative(p, rule) for p in positive), *(neg(call_derivative(x, rule)) for x in negated))
            return alt(cat(call(rule), after), together)
    kept = [_read_through(p) for p in positive] + [p for p in parts if p.kind == NOT_KIND]
    return _make(AND_KIND, _sorted(set(kept)))


def group(part: Expr) -> Expr:
    """``part``'s language as one node (``part ∩ Σ*``), still :func:`is_plain` when ``part`` is: a
    concatenation used in several places is otherwise re-nested into each (see :func:`cat`). A
    part with :func:`call` leaves is returned as it is (``Σ*`` has no call symbols)."""
    if part._has_calls:
        return part
    return inter(part, star(byte_set(ALL_BYTES)))


def neg(part: Expr) -> Expr:
    """Complement with respect to all byte strings.

    Raises:
        CallsUnderAlgebraError: ``part`` has :func:`call` leaves other than of free-value rules.
    """
    if part.kind == NOT_KIND:
        return part.args[0]
    if part._has_calls:
        if not _ACTIVE.deriving and not only_free_calls(part):  # (a derivative's: see inter)
            raise CallsUnderAlgebraError("complement of an expression with calls")
        node = _make(NOT_KIND, (_read_through(part),))
        _NEGATED[node] = part
        return node
    return _make(NOT_KIND, (part,))


def diff(a: Expr, b: Expr) -> Expr:
    """``a`` minus ``b``."""
    return inter(a, neg(b))


def star(part: Expr) -> Expr:
    """Zero or more repetitions."""
    if part is EMPTY or part is EPS:
        return EPS
    if part.kind == STAR_KIND:
        return part
    return _make(STAR_KIND, (part,))


def counted(part: Expr, lo: int, hi: int | None) -> Expr:
    """Between ``lo`` and ``hi`` copies of ``part`` (``hi=None``: unbounded), as one node that
    keeps the count: after one copy it is ``counted(part, lo - 1, hi - 1)``. So a long counted run
    (a string's ``maxLength``) is one small node per count, and a state inside it says how many
    copies are left (its rule row reads the count instead of walking every token). ``part`` must
    be plain, call-free and non-empty-only (a character class); otherwise this is :func:`repeat`.
    """
    if lo < 0 or (hi is not None and hi < lo):
        return EMPTY
    if part is EMPTY or part is EPS:
        return EPS if lo == 0 or part is EPS else EMPTY
    if part._nullable or part._has_calls or not part._plain:
        return repeat(part, lo, hi)
    if hi == 0:
        return EPS
    if hi is None and lo == 0:
        return star(part)
    if hi == 1 and lo == 1:
        return part
    return _make(COUNT_KIND, (part,), (lo, hi))


def opt(part: Expr) -> Expr:
    """Zero or one."""
    return alt(EPS, part)


def plus(part: Expr) -> Expr:
    """One or more."""
    return cat(part, star(part))


_SHORT_RUN = 64
"""Runs up to this many copies are written out; longer ones are built from blocks (see :func:`repeat`)."""


def repeat(part: Expr, lo: int, hi: int | None) -> Expr:
    """Between ``lo`` and ``hi`` repetitions (``hi=None``: unbounded).

    Short bounded tails are nested, ``x(x(x)?)?``, so the number of states grows linearly with
    ``hi``. Past :data:`_SHORT_RUN` copies the expression is built from blocks of ``k ≈ √n``
    copies, each one :func:`group` node: ``x{n} = (x^k)^a x^b`` and ``x{0,n} = (x^k){0,a-1}
    x{0,k-1} | (x^k)^a x{0,b}`` for ``n = a·k + b``. Its size is then O(√lo + √hi) nodes rather
    than O(lo + hi), and nested counts (``((a{100}){100}){100}``) no longer multiply: each copy of
    a block is one reference. The language, and so every derivative, is the same.
    """
    if lo < 0 or (hi is not None and hi < lo):
        return EMPTY
    head = _exactly(part, lo)
    if hi is None:
        return cat(head, star(part))
    return cat(head, _up_to(part, hi - lo))


def _exactly(part: Expr, n: int) -> Expr:
    if n <= _SHORT_RUN:
        return cat(*([part] * n))
    k = math.isqrt(n)
    a, b = divmod(n, k)
    block = _block(part, k)
    return _block_of(cat(*([block] * a), *([part] * b)))


def _block(part: Expr, k: int) -> Expr:
    """``k`` copies of ``part`` as one node."""
    return _block_of(cat(*([part] * k)))


def _block_of(run: Expr) -> Expr:
    """``run`` as one node: a :func:`group`, or with calls (which a group cannot hold) a call of a
    rule of its own."""
    if not run._has_calls:
        return group(run)
    from grammask.grammars.fsm.rules import Rule  # rules build on this module

    return call(Rule("repeated block", run))


def _up_to(part: Expr, n: int) -> Expr:
    if n <= _SHORT_RUN:
        tail = EPS
        for _ in range(n):
            tail = opt(cat(part, tail))
        return tail
    k = math.isqrt(n)
    a, b = divmod(n, k)
    block = _block(part, k)
    short = cat(_up_to(block, a - 1), _up_to(part, k - 1))
    return alt(short, cat(_exactly(block, a), _up_to(part, b)))


def call(rule: object) -> Expr:
    """A nonterminal: any text of ``rule``'s language here (``rule`` is an object of the pushdown
    runtime, compared by identity). A call consumes no byte by itself: :func:`derivative` by a byte
    is ∅, :func:`call_derivative` by its rule is ε. Calls may be concatenated, alternated and
    starred; intersected or complemented only where every call is of a free-value rule (see
    :func:`_inter_reading_free_values`), else :class:`CallsUnderAlgebraError`."""
    return _make(CALL_KIND, (rule,))


def has_calls(e: Expr) -> bool:
    """Whether ``e`` has :func:`call` leaves."""
    return e._has_calls


def first_calls(e: Expr) -> tuple:
    """The rules of the calls ``e`` can start with (before any byte), in a fixed order."""
    if e._first_calls is None:
        found: dict = {}
        if e._has_calls:
            kind = e.kind
            if kind == CALL_KIND:
                found[e.args[0]] = None
            elif kind == CAT_KIND:
                head, tail = e.args
                found.update(dict.fromkeys(first_calls(head)))
                if head._nullable:
                    found.update(dict.fromkeys(first_calls(tail)))
            elif kind in (ALT_KIND, STAR_KIND):
                for part in e.args:
                    found.update(dict.fromkeys(first_calls(part)))
        e._first_calls = tuple(found)
    return e._first_calls


def call_derivative(e: Expr, rule: object) -> Expr:
    """What ``e`` matches after a whole match of ``rule`` (the derivative by the call symbol)."""
    known = e._call_derivatives
    if known is None:
        known = e._call_derivatives = {}
    cached = known.get(rule)
    if cached is not None:
        return cached
    kind = e.kind
    if not e._has_calls:
        result = EMPTY
    elif kind == CALL_KIND:
        result = EPS if e.args[0] is rule else EMPTY
    elif kind == CAT_KIND:
        head, tail = e.args
        result = cat(call_derivative(head, rule), tail)
        if head._nullable:
            result = alt(result, call_derivative(tail, rule))
    elif kind == ALT_KIND:  # only the parts that can start with the call (an object's members: one each)
        result = alt(*(call_derivative(p, rule) for p in _parts_by_call(e, known).get(rule, ())))
    elif kind in (AND_KIND, NOT_KIND):  # they read their free values through (_read_through)
        result = EMPTY
    else:  # STAR
        result = cat(call_derivative(e.args[0], rule), e)
    known[rule] = result
    return result


_PARTS_BY_CALL = object()
"""The key under which an alternation's call-derivative cache keeps :func:`_parts_by_call`."""


def _parts_by_call(e: Expr, known: dict) -> dict:
    """By called rule, the parts of the alternation ``e`` that can start with a call of it (kept in
    ``known``, ``e``'s call-derivative cache). Made in one pass over the parts: an object of many
    members is an alternation of as many parts, and asking each part for every rule it calls
    cost a pass over all of them per call derivative."""
    found = known.get(_PARTS_BY_CALL)
    if found is None:
        found = known[_PARTS_BY_CALL] = {}
        for part in e.args:
            for rule in first_calls(part):
                found.setdefault(rule, []).append(part)
    return found


# ---------------------------------------------------------------------------------- UTF-8 text

_UTF8_LIMITS = (0x7F, 0x7FF, 0xFFFF, 0x10FFFF)
MAX_CODE_POINT = 0x10FFFF


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def _utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Split code points ``[lo, hi]`` into sequences of byte ranges (the classic UTF-8 range split)."""
    out: list[list[tuple[int, int]]] = []
    stack = [(lo, hi)]
    while stack:
        lo, hi = stack.pop()
        split = False
        for limit in _UTF8_LIMITS[:-1]:  # split where the encoded length changes
            if lo <= limit < hi:
                stack.append((limit + 1, hi))
                stack.append((lo, limit))
                split = True
                break
        if split:
            continue
        if hi <= 0x7F:
            out.append([(lo, hi)])
            continue
        length = len(_encode(lo))
        for i in range(1, length):
            mask = (1 << (6 * i)) - 1
            if lo & ~mask != hi & ~mask:
                if lo & mask:
                    stack.append(((lo | mask) + 1, hi))
                    stack.append((lo, lo | mask))
                    split = True
                    break
                if hi & mask != mask:
                    stack.append((hi & ~mask, hi))
                    stack.append((lo, (hi & ~mask) - 1))
                    split = True
                    break
        if split:
            continue
        out.append(list(zip(_encode(lo), _encode(hi))))
    return out


def char_ranges(ranges: Iterable[tuple[int, int]], *, negate: bool = False) -> Expr:
    """One Unicode scalar value (as UTF-8) from inclusive code point ranges; surrogates never match.

    Args:
        ranges: ``(lo, hi)`` code point pairs, inclusive, in any order, possibly overlapping.
        negate: match one scalar value *not* in the ranges.
    """
    return _char_class(tuple(_normalise_ranges(ranges)), negate)


@functools.lru_cache(maxsize=4096)
def _char_class(merged: tuple[tuple[int, int], ...], negate: bool) -> Expr:
    """:func:`char_ranges` of normalised ranges: cached, as patterns repeat their classes (``.``,
    ``\\w``, a letter) and every pattern's search starts with any character."""
    if negate:
        merged = _complement_ranges(merged)
    pieces = []
    for lo, hi in _remove_surrogates(merged):
        for seq in _utf8_sequences(lo, hi):
            pieces.append(cat(*(byte_range(a, b) for a, b in seq)))
    return alt(*pieces)


def any_char() -> Expr:
    """Any one Unicode scalar value as UTF-8."""
    return char_ranges([(0, MAX_CODE_POINT)])


def _normalise_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _complement_ranges(merged: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out, start = [], 0
    for lo, hi in merged:
        if lo > start:
            out.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CODE_POINT:
        out.append((start, MAX_CODE_POINT))
    return out


def _remove_surrogates(merged: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    return _normalise_ranges(
        piece
        for lo, hi in merged
        for piece in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi))
        if piece[0] <= piece[1]
    )


# ---------------------------------------------------------------------------------- semantics


def nullable(e: Expr) -> bool:
    """Whether ``e`` matches the empty string (an automaton state is accepting)."""
    return e._nullable


def is_plain(e: Expr) -> bool:
    """Whether ``e`` uses no ``&`` and no ``¬`` other than :func:`group` (then :func:`min_length`
    is exact and every expression other than ∅ matches something)."""
    return e._plain


def min_length(e: Expr) -> int:
    """The length of the shortest byte string ``e`` matches: exact when :func:`is_plain`, otherwise a
    lower bound (``max`` over the parts of ``&``; 0 or 1 for ``¬``). :data:`INFINITE_LENGTH` for ∅."""
    return e._min_length


_PARTITIONS: dict[tuple[int, ...], tuple[int, ...]] = {}
MAX_SHARED_PARTITIONS = 1 << 14


def _shared_partition(classes: tuple[int, ...]) -> tuple[int, ...]:
    """The one tuple kept for a partition equal to ``classes``: the states of a large automaton
    have few distinct partitions, each a tuple of 256-bit masks worth sharing."""
    return _kept(_PARTITIONS, classes)


def _kept(table: dict, value):
    """The object ``table`` keeps for values equal to ``value`` (``value`` itself when new). Past
    :data:`MAX_SHARED_PARTITIONS` entries the table starts afresh (objects already handed out stay
    valid; equal ones made later are simply not the same object)."""
    held = table.get(value)
    if held is None:
        if len(table) >= MAX_SHARED_PARTITIONS:
            table.clear()
        held = table.setdefault(value, value)
    return held


_REFINED: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}


def _refine(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The common refinement of two shared partitions, itself shared. Few distinct pairs meet
    (an alternation's parts mostly split the bytes alike), so each is refined once: the memo is
    keyed by identity and holds its operands, whose ids therefore stay theirs."""
    if a is b or len(b) == 1:
        return a
    if len(a) == 1:
        return b
    key = (id(a), id(b))
    known = _REFINED.get(key)
    if known is not None and known[0] is a and known[1] is b:
        return known[2]
    refined = _shared_partition(tuple(x & y for x in a for y in b if x & y))
    if len(_REFINED) >= MAX_SHARED_PARTITIONS:
        _REFINED.clear()
    _REFINED[key] = (a, b, refined)
    return refined


_ONE_CLASS = _shared_partition((ALL_BYTES,))


def byte_atoms(e: Expr) -> tuple[int, ...]:
    """The partition of the 256 bytes (as masks) generated by every byte set in ``e``: the coarsest
    one whose classes each set is a union of. Derivatives and the simplifications only rebuild
    ``e``'s byte sets with unions and intersections, so every state's :func:`byte_classes` is a
    union of these atoms, and an automaton of ``e`` needs one transition column per atom. Where
    ``e`` calls a free-value rule, ``&`` and ``¬`` may read its body (:func:`_read_through`): the
    body's sets count too.

    Each node holds its single bytes (a mask: each is an atom of its own) and its other byte sets,
    joined from its children's when it is built (a derivative's nodes on first use here, see
    :func:`_carry_byte_sets`), so the automata of a grammar's rules do not walk their parts."""
    atoms = _own_atoms(e)
    if not e._plain:  # (only & and ¬ read a free value through, and a plain node has none)
        for rule in free_rules_called(e):
            atoms = _refine(atoms, _own_atoms(rule.body))
    return atoms


def _own_atoms(e: Expr) -> tuple[int, ...]:
    """:func:`byte_atoms` of ``e``'s own byte sets."""
    if e._byte_sets is None:
        _carry_byte_sets(e)
    single = e._single_bytes
    atoms = [ALL_BYTES & ~single] if single != ALL_BYTES else []
    for mask in _byte_sets_below(e):  # split every atom the set cuts
        split = []
        for atom in atoms:
            inside = atom & mask
            if inside and inside != atom:
                split += (inside, atom ^ inside)
            else:
                split.append(atom)
        atoms = split
    while single:
        low = single & -single
        atoms.append(low)
        single ^= low
    return _shared_partition(tuple(sorted(atoms)))


def _byte_sets_below(e: Expr) -> frozenset[int] | set[int]:
    """Every byte set of two bytes or more in ``e`` (whose nodes carry theirs): the node's own,
    else gathered from the nodes below that carry theirs (a walk of the rest)."""
    if e._byte_sets is not _UNCARRIED:
        return e._byte_sets
    masks: set[int] = set()
    seen: set[int] = set()
    pending = [e]
    while pending:  # iterative: concatenation spines may be long
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node._byte_sets is not _UNCARRIED:
            masks |= node._byte_sets
        else:
            pending.extend(node.args)
    return masks


def byte_classes(e: Expr) -> tuple[int, ...]:
    """A partition of the 256 bytes (as masks) such that bytes of one class give the same
    derivative. Equal partitions are one shared tuple."""
    if e._classes is None:
        kind = e.kind
        if kind in (EMPTY_KIND, EPS_KIND, CALL_KIND):
            classes = _ONE_CLASS
        elif kind == BYTES_KIND:
            mask = e.args[0]
            classes = _shared_partition(tuple(m for m in (mask, ALL_BYTES ^ mask) if m))
        elif kind == CAT_KIND:
            classes = byte_classes(e.args[0])
            if nullable(e.args[0]):
                classes = _refine(classes, byte_classes(e.args[1]))
        elif kind in (ALT_KIND, AND_KIND):
            _charge_parts(e)
            classes = _ONE_CLASS
            for part in e.args:
                classes = _refine(classes, byte_classes(part))
        else:  # NOT, STAR, COUNT
            classes = byte_classes(e.args[0])
        e._classes = classes
    return e._classes


def first_bytes(e: Expr) -> int:
    """A byte mask holding every byte whose :func:`derivative` of ``e`` is not ∅ (a superset: an
    intersection gets its parts' common bytes, a complement every byte). Made on first use, for the
    parts of the unions and intersections a DFA state derives."""
    if e._first is None:
        kind = e.kind
        if kind == BYTES_KIND:
            first = e.args[0]
        elif kind == CAT_KIND:
            head, tail = e.args
            first = first_bytes(head) | first_bytes(tail) if head._nullable else first_bytes(head)
        elif kind == ALT_KIND:
            first = 0
            for part in e.args:
                first |= first_bytes(part)
        elif kind == AND_KIND:
            first = ALL_BYTES
            for part in e.args:
                first &= first_bytes(part)
        elif kind in (STAR_KIND, COUNT_KIND):
            first = first_bytes(e.args[0])
        elif kind == NOT_KIND:
            first = ALL_BYTES
        else:  # EMPTY, EPS, CALL
            first = 0
        e._first = first
    return e._first


def completion_bound(e: Expr) -> int | None:
    """How many bytes at most finish a text begun anywhere in ``e``: an upper bound on the
    :func:`min_length` of ``e`` and of every derivative of it other than ∅. ``None`` when ``e``
    is not plain or calls rules (no bound is known). Made on first use."""
    if e._bound is None:
        e._bound = _completion_bound(e)
    return None if e._bound < 0 else e._bound


def _completion_bound(e: Expr) -> int:
    """:func:`completion_bound`, ``-1`` for none, from the children's (a derivative of ``h·t`` is
    ``h'·t`` or a derivative of ``t``; of ``x*`` it is ``x'·x*``)."""
    if not e._plain or e._has_calls:
        return -1
    kind = e.kind
    if kind in (EMPTY_KIND, EPS_KIND):
        return 0
    if kind == BYTES_KIND:
        return 1
    if kind == CAT_KIND:
        return _cat_completion_bound(e)
    if kind == ALT_KIND:
        return max(completion_bound(part) for part in e.args)
    if kind == STAR_KIND:
        return completion_bound(e.args[0])
    if kind == COUNT_KIND:
        part, step, lo = e.args[0], e.args[0]._min_length, e.bounds[0]
        return max(lo * step, completion_bound(part) + max(lo - 1, 0) * step)
    # A plain intersection is a group, x ∩ Σ* (see group()).
    grouped = [part for part in e.args if not _is_all_strings(part)]
    return completion_bound(grouped[0]) if grouped else 0


def _cat_completion_bound(e: Expr) -> int:
    """A concatenation's bound, ``max(bound(head) + min_length(tail), bound(tail))``, folded along
    its chain of tails without recursing down it (a long literal is a chain thousands deep)."""
    spine = []
    while e.kind == CAT_KIND and e._bound is None:
        spine.append(e)
        e = e.args[1]
    bound = completion_bound(e)
    for node in reversed(spine):
        head, tail = node.args
        node._bound = bound = max(completion_bound(head) + tail._min_length, bound)
    return bound


def derivative(e: Expr, byte: int) -> Expr:
    """The expression that matches ``s`` exactly when ``e`` matches ``bytes([byte]) + s``."""
    # Every byte of a class has the same derivative: the cache is keyed by the class's index.
    classes = byte_classes(e)
    index = 0
    if len(classes) > 1:
        for index, mask in enumerate(classes):
            if (mask >> byte) & 1:
                break
    known = e._derivatives
    if known is None:
        known = e._derivatives = [None] * len(classes)
    cached = known[index]
    if cached is not None:
        return cached
    active = _ACTIVE
    if active.deriving:  # within an outer derivative, which set the mode
        result = _derived(e, byte)
    else:
        active.deriving = True
        try:
            result = _derived(e, byte)
        finally:
            active.deriving = False
    known[index] = result
    return result


def _derived(e: Expr, byte: int) -> Expr:
    """:func:`derivative` of ``e`` by ``byte``, computed (its caller caches it)."""
    kind = e.kind
    if kind in (EMPTY_KIND, EPS_KIND):
        result = EMPTY
    elif kind == BYTES_KIND:
        result = EPS if (e.args[0] >> byte) & 1 else EMPTY
    elif kind == CAT_KIND:
        head, tail = e.args
        result = cat(derivative(head, byte), tail)
        if nullable(head):
            result = alt(result, derivative(tail, byte))
    elif kind == ALT_KIND:  # most parts of a large union cannot start with the byte: skip them
        _charge_parts(e)
        result = alt(*(derivative(p, byte) for p in e.args if (first_bytes(p) >> byte) & 1))
    elif kind == AND_KIND:
        _charge_parts(e)
        result = inter(*(derivative(p, byte) for p in e.args)) if (first_bytes(e) >> byte) & 1 else EMPTY
    elif kind == NOT_KIND:
        result = neg(derivative(e.args[0], byte))
    elif kind == CALL_KIND:
        result = EMPTY
    elif kind == COUNT_KIND:  # the part is not nullable: this byte starts a copy
        lo, hi = e.bounds
        result = cat(derivative(e.args[0], byte), counted(e.args[0], max(lo - 1, 0), None if hi is None else hi - 1))
    else:  # STAR
        result = cat(derivative(e.args[0], byte), e)
    return result


def _charge_parts(e: Expr) -> None:
    """Charge the parts of a large union or intersection (:data:`LARGE_UNION`) to this thread's
    build budget, if any: deriving them mostly finds nodes that exist, so node counts alone would
    not read the clock."""
    if len(e.args) >= LARGE_UNION:
        budget = _ACTIVE.budget
        if budget is not None:
            budget.work(len(e.args))


python_derivative = derivative
"""The pure-Python derivative: the reference of the C one (``_expr.derivative``), which builds
intersections, complements and counts with this module's constructors."""
if _native is not None:
    _native.setup(
        byte_classes=byte_classes, first_bytes=first_bytes, inter=inter, neg=neg, counted=counted, charge_parts=_charge_parts,
        large_union=LARGE_UNION,
    )
    derivative = _native.derivative  # noqa: F811


def length_bound(body: Expr, rule_bound: Callable[[Any], int]) -> int:
    """A lower bound of the length of ``body``'s shortest text, a call counting ``rule_bound(rule)``
    (what :func:`~grammask.grammars.fsm.rules.length_lower_bound` knows of the rule); the parts
    without calls count their own ``min_length``, and a star nothing. The pure-Python reference of
    ``_expr.length_bound``."""
    memo: dict[int, int] = {}
    stack = [body]
    while stack:
        node = stack[-1]
        if id(node) in memo:
            stack.pop()
            continue
        if node.kind == CALL_KIND:
            memo[id(node)] = rule_bound(node.args[0])
        elif not node._has_calls:
            memo[id(node)] = node._min_length
        elif node.kind in (STAR_KIND, NOT_KIND):  # a complement with free values may match ε
            memo[id(node)] = 0
        elif node.kind == CAT_KIND and not node.args[0]._has_calls:
            # Along a literal (a key, a run of fixed parts): its call-free heads are summed in one
            # run down the spine, and only the node where the run ends is visited.
            length, rest = 0, node
            while rest.kind == CAT_KIND and not rest.args[0]._has_calls:
                length += rest.args[0]._min_length
                rest = rest.args[1]
            tail = memo.get(id(rest))
            if tail is None:
                stack.append(rest)
                continue
            memo[id(node)] = min(INFINITE_LENGTH, length + tail)
        else:
            pending = [part for part in node.args if id(part) not in memo]
            if pending:
                stack.extend(pending)
                continue
            parts = [memo[id(part)] for part in node.args]
            memo[id(node)] = min(INFINITE_LENGTH, sum(parts)) if node.kind == CAT_KIND else min(parts)
        stack.pop()
    return memo[id(body)]


python_length_bound = length_bound
"""The pure-Python length bound: the reference of the C one."""
if _native is not None:
    length_bound = _native.length_bound  # noqa: F811


def matches(e: Expr, data: bytes | str) -> bool:
    """Whether ``e`` matches all of ``data`` (``str`` as UTF-8)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    for byte in raw:
        e = derivative(e, byte)
        if e is EMPTY:
            return False
    return nullable(e)


def pairwise_disjoint(parts: Sequence[Expr], max_states: int = 4096) -> bool | None:
    """Whether no string matches two of ``parts``: ``True`` or ``False`` (a string matching two was
    found), or ``None`` when telling would visit more than ``max_states`` tuples.

    One walk over tuples of the parts' derivatives by the same prefix: two parts nullable at once
    show a common string. A part that dies leaves the tuple, and a tuple of fewer than two parts
    is not followed, so parts that differ early (distinct literal prefixes) cost a byte or two."""
    start = tuple(part for part in parts if part is not EMPTY)
    seen = {start}
    todo = [start]
    while todo:
        live = todo.pop()
        if len(live) < 2:
            continue
        if sum(part._nullable for part in live) > 1:
            return False
        classes = _ONE_CLASS
        for part in live:
            classes = _refine(classes, byte_classes(part))
        for mask in classes:
            low = (mask & -mask).bit_length() - 1
            following = tuple(d for d in (derivative(part, low) for part in live) if d is not EMPTY)
            if len(following) > 1 and following not in seen:
                if len(seen) >= max_states:
                    return None
                seen.add(following)
                todo.append(following)
    return True


def without_words(e: Expr, words: Iterable[bytes]) -> Expr:
    """``e`` minus the finite set ``words``, written without complement (plain when ``e`` is):
    along the trie of the words, each byte either follows a word (and the words go on) or leaves
    them all (and ``e``'s derivative goes on alone). Its size grows with the words' total length."""
    return _without(e, word_trie(words))


def word_trie(words: Iterable[Sequence]) -> dict:
    """The trie of ``words`` (sequences of bytes or characters): nested dicts by symbol, with the
    key ``None`` where a word ends."""
    trie: dict = {}
    for word in words:
        node = trie
        for symbol in word:
            node = node.setdefault(symbol, {})
        node[None] = {}
    return trie


def _without(e: Expr, node: dict) -> Expr:
    if e is EMPTY:
        return EMPTY
    parts = [EPS] if e._nullable and None not in node else []
    inside = 0
    for byte, child in node.items():
        if byte is not None:
            inside |= 1 << byte
            parts.append(cat(byte_set(1 << byte), _without(derivative(e, byte), child)))
    for mask in byte_classes(e):
        leaving = mask & ~inside
        if leaving:
            parts.append(cat(byte_set(leaving), derivative(e, (leaving & -leaving).bit_length() - 1)))
    return alt(*parts)


def to_string(e: Expr, _depth: int = 0) -> str:
    """A readable, regex-like rendering (for debugging and error messages)."""
    if _depth > 12:
        return "…"
    kind = e.kind
    if kind == EMPTY_KIND:
        return "∅"
    if kind == EPS_KIND:
        return "ε"
    if kind == BYTES_KIND:
        mask = e.args[0]
        members = [b for b in range(256) if (mask >> b) & 1]
        if len(members) == 1:
            return repr(bytes(members))[2:-1]
        return f"[{len(members)} bytes]"
    if kind == CALL_KIND:
        return f"<{getattr(e.args[0], 'name', 'rule')}>"
    sub = [to_string(p, _depth + 1) for p in e.args]
    if kind == CAT_KIND:
        return "".join(sub)
    if kind == ALT_KIND:
        return "(" + "|".join(sub) + ")"
    if kind == AND_KIND:
        return "(" + "&".join(sub) + ")"
    if kind == COUNT_KIND:
        lo, hi = e.bounds
        return "(" + sub[0] + ")" + "{%d,%s}" % (lo, "" if hi is None else hi)
    if kind == NOT_KIND:
        return "¬(" + sub[0] + ")"
    return "(" + sub[0] + ")*"
