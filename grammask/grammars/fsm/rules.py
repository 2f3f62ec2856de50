"""Rules: the nonterminals of a pushdown grammar, and each rule's lazily explored automaton.

A :class:`Rule` is a byte expression whose :func:`~grammask.grammars.fsm.expr.call` leaves stand
for other rules (a JSON Schema's value positions, recursion through ``$ref``, free JSON values).
Within one compiled grammar, a :class:`RuleSet` numbers the rules reachable from the root and gives
each a :class:`RuleDfa`: the rule's derivative automaton over bytes, plus what the pushdown walks
read of each state (:mod:`grammask.grammars.fsm.walk`): whether it accepts (the rule may end
there), which rules it calls and where each call returns, and whether it is live.
"""

from __future__ import annotations

import threading

import numpy as np

from grammask.errors import CompileLimitError
from grammask.grammars.fsm import walk
from grammask.grammars.fsm import automaton as A
from grammask.grammars.fsm import expr as E
from grammask.grammars.fsm.automaton import DEAD, LazyDfa
from grammask.grammars.fsm.expr import EMPTY, EPS, Expr, call_derivative, first_calls, is_plain, nullable
from grammask.grammars.fsm.json_text import ENCODED_CHAR



class Rule:
    """A nonterminal: a name (for messages) and a body expression, which may call rules (itself too).

    Attributes:
        name: where it comes from (e.g. the JSON pointer of a subschema).
        body: its language. Set after construction when the rule is recursive, or built on first
            use by a ``builder`` (a callable returning it): a large schema's subschemas are lowered
            when a request first reaches them.
        min_length: the length of its shortest text, once :func:`settle_rule_lengths` found it.
        productive: whether it matches anything, once :func:`rule_productive` decided it.
        shared: one rule for every grammar that calls it (the rule of any JSON value of a text
            policy), so the rows of states calling it serve every grammar
            (:class:`~grammask.grammars.fsm.pushdown.SharedRuleRows`).
        free_value: it matches every canonical JSON value and is called at value positions only,
            so its calls may stand under ``&`` and ``¬`` (:func:`~grammask.grammars.fsm.expr.inter`).
    """

    __slots__ = ("name", "_body", "builder", "min_length", "productive", "shared", "free_value", "__weakref__")

    def __init__(self, name: str, body: Expr | None = None, builder=None) -> None:
        self.name = name
        self._body = body
        self.builder = builder
        self.min_length: int | None = None
        self.productive: bool | None = None
        self.shared = False
        self.free_value = False

    @property
    def body(self) -> Expr | None:
        if self._body is None and self.builder is not None:
            self._body = self.builder()  # the builder serialises builds and clears itself
        return self._body

    @body.setter
    def body(self, value: Expr) -> None:
        self._body = value

    def __repr__(self) -> str:
        return f"Rule({self.name!r})"


class RuleDfa(LazyDfa):
    """The automaton of one rule of one grammar: byte transitions (derivatives, computed lazily) and,
    per state, the flags and calls the walks read.

    Attributes:
        index: the rule's number in its :class:`RuleSet`.
        flags: ``[capacity]`` uint8 :mod:`~grammask.grammars.fsm.walk` state flags.
        call_offsets, call_data: the calls of each state, as :class:`~grammask.grammars.fsm.walk.RuleTables`
            lays them out; :meth:`calls` gives them as pairs.
    """

    built = False
    """Whether the automaton exists yet. A rule's is made when something first reads it (a walk
    entering the rule, a row of one of its states), not when a state that calls the rule is added:
    a rule no request enters (an object's other keys at a first mask, a value never reached)
    builds nothing, a deferred subschema included."""
    _builder: int | None = None  # the thread building it, while it does

    def __init__(self, rule: Rule, index: int, rules: "RuleSet") -> None:
        self.rule = rule
        self.index = index
        self._rules = rules

    def __getattr__(self, name: str):
        # Reached only for what the automaton's construction sets, and only before it ran (or
        # while it runs, in the thread running it: there, a missing attribute is missing).
        if name.startswith("__") or self._builder == threading.get_ident():
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._build()
        return object.__getattribute__(self, name)

    def _build(self) -> None:
        with self._rules._lock:
            if self.built:
                return
            if self.rule.body is None:
                raise ValueError(f"{self.rule!r} has no body")
            shell = set(self.__dict__)
            self._builder = threading.get_ident()
            try:
                self._construct()
            except BaseException:
                for name in set(self.__dict__) - shell:  # a shell again: a later read builds anew (and fails alike)
                    del self.__dict__[name]
                raise
            finally:
                self._builder = None
            self.built = True
            self._rules.tables_changed(self.index)

    def _construct(self) -> None:
        rule, rules = self.rule, self._rules
        self.flags = np.zeros(A.INITIAL_CAPACITY, dtype=np.uint8)
        self.call_offsets = np.full(A.INITIAL_CAPACITY, -1, dtype=np.int32)
        self.call_data = np.zeros(64, dtype=np.int32)
        self._call_used = 0
        self._calls: dict[int, tuple[tuple[int, int], ...]] = {}
        self.text_targets: dict[int, int | None] = {}
        """Per state, the state every multi-byte UTF-8 character leads to (kept by the row builder)."""
        self.forced_runs: dict[Expr, tuple[bytes, int] | None] = {}
        """Per state's expression, the run of bytes that alone can follow it and the state where it
        ends (kept by the row builder: by expression, since a run makes no state for its bytes)."""
        self._twins: dict[int, tuple[int, int] | None] = {}
        self._counted_bytes = 0  # what RuleSet.memory_bytes holds for these arrays
        super().__init__(rule.body, max_states=rules.max_states)
        self._count_arrays()
        self.exit_mask = rules.exit_mask(self.index)
        """The flags that make a state a place where text may leave this rule (see :meth:`RuleSet.exit_mask`)."""

    def _add(self, expr: Expr) -> int:
        known = self._ids.get(expr)
        if known is not None:
            return known
        state = super()._add(expr)
        self._rules.count_state()
        flag = walk.ACCEPTING if nullable(expr) else 0
        if expr is EMPTY:
            flag |= walk.LIVE_KNOWN
        elif expr._has_calls:
            # Live when the rules it calls match something (a rule that only recurses does not).
            flag |= walk.LIVE_KNOWN | (walk.LIVE if expr_productive(expr) else 0)
        elif is_plain(expr):
            flag |= walk.LIVE_KNOWN | walk.LIVE  # without & and ¬, every non-∅ expression matches something
        self.flags[state] = flag
        callees = [rule for rule in first_calls(expr) if rule_productive(rule)]
        if callees:
            pairs = tuple((self._rules.index_of(rule), self._add(call_derivative(expr, rule))) for rule in callees)
            self._store_calls(state, pairs)
        return state

    def _grow(self) -> None:
        self._rules.tables_changed(self.index)
        super()._grow()
        capacity = len(self.accepting)
        self.flags, self.call_offsets = A.grown(self.flags, capacity, 0), A.grown(self.call_offsets, capacity, -1)
        self._count_arrays()

    def _count_arrays(self) -> None:
        """Tell the rule set how much the arrays the walks read have grown since last told."""
        held = self.table.nbytes + self.flags.nbytes + self.call_offsets.nbytes + self.call_data.nbytes
        self._rules.arrays_grew(held - self._counted_bytes)
        self._counted_bytes = held

    def _store_calls(self, state: int, pairs: tuple[tuple[int, int], ...]) -> None:
        needed = self._call_used + 1 + 2 * len(pairs)
        if needed > len(self.call_data):
            data = np.zeros(max(needed, 2 * len(self.call_data)), dtype=np.int32)
            data[: self._call_used] = self.call_data[: self._call_used]
            self.call_data = data
            self._rules.tables_changed(self.index)
            self._count_arrays()
        offset = self._call_used
        self.call_data[offset] = len(pairs)
        self.call_data[offset + 1 : needed] = [x for pair in pairs for x in pair]
        self._call_used = needed
        self._calls[state] = pairs
        self.call_offsets[state] = offset
        self.flags[state] |= walk.HAS_CALLS

    def calls(self, state: int) -> tuple[tuple[int, int], ...]:
        """``(callee rule index, return state)`` of every call ``state`` can make first."""
        return self._calls.get(state, ())

    def is_final(self, state: int) -> bool:
        """Whether nothing can follow in this rule (the state is ε): its frame may be popped at once."""
        return self._exprs[state] is EPS

    def is_live(self, state: int) -> bool:
        flag = int(self.flags[state])
        if flag & walk.LIVE_KNOWN:
            return bool(flag & walk.LIVE)
        twin = self.length_free_twin(state)
        live = self.is_live(twin[0]) if twin is not None else super().is_live(state)
        self.flags[state] |= walk.LIVE_KNOWN | (walk.LIVE if live else 0)
        return live

    def length_free_twin(self, state: int) -> tuple[int, int] | None:
        """``(twin, room)`` for a state inside a string whose length bound cannot matter to a short
        token (:func:`length_free_twin`): the state without the bound, and how many bytes a token
        may have and still be read alike from both. ``None`` for other states. Cached per state."""
        if state not in self._twins:
            found = length_free_twin(self._exprs[state])
            self._twins[state] = None if found is None else (self.state_of(found[0]), found[1])
        return self._twins[state]

    def successors(self, state: int) -> list[tuple[int, int]]:
        """Byte moves, and each call's return at the cost of the callee's shortest text."""
        moves = super().successors(state)
        rules = self._rules.rules
        moves += [(back, rules[callee].min_length or E.CALL_MIN_LENGTH) for callee, back in self.calls(state)]
        return moves

    def tables(self) -> walk.RuleTables:
        """The arrays as the walks read them (views of the current ones; taken anew after growth).
        Before the automaton is built, a start state whose every fact is unknown: a walk that
        enters the rule asks for one, and computing it builds the automaton."""
        if not self.built:
            return _UNBUILT_TABLES
        return walk.RuleTables(
            self.table.reshape(-1), self.flags, self.call_offsets, self.call_data, self.column_of_byte, self.width
        )


_UNBUILT_TABLES = walk.RuleTables(
    A.read_only(np.full(2, A.UNKNOWN, dtype=np.int32)), A.read_only(np.zeros(2, dtype=np.uint8)),
    A.read_only(np.full(2, -1, dtype=np.int32)), A.read_only(np.zeros(1, dtype=np.int32)),
    A.read_only(np.zeros(256, dtype=np.uint8)), 1,
)
"""What the walks read of a rule not built yet: the dead and start states, every fact unknown."""


class RuleSet:
    """The rules of one grammar, numbered from 0 (the root) as they are discovered, each with its
    :class:`RuleDfa`. Thread-safe.

    Args:
        root: the start rule.
        max_states: cap on the states of all rules together (``CompileLimitError('max_states')``).

    Attributes:
        lengths_exact: whether every rule's shortest text is known exactly (:func:`settle_rule_lengths`,
            run on first use: budgets need it; it builds every rule).
    """

    def __init__(self, root: Rule, *, max_states: int) -> None:
        self.max_states = max_states
        self.root = root
        self._lengths_exact: bool | None = None
        self.root_called = root.body._has_calls
        """Whether the root may be called (else it never returns: its frame is the bottom). Taken
        as "the grammar has calls at all": a lazily built rule may call the root later."""
        self.rules: list[Rule] = []
        self.dfas: list[RuleDfa] = []
        self._index: dict[Rule, int] = {}
        self._states = 0
        self._array_bytes = 0
        self._tables: tuple | None = None
        self._rule_tables: list[walk.RuleTables | None] = []
        self._stale: set[int] = set()
        self._lock = threading.RLock()
        self.index_of(root)

    def index_of(self, rule: Rule) -> int:
        """The number of ``rule`` (its automaton is built on first sight)."""
        index = self._index.get(rule)
        if index is not None:
            return index
        with self._lock:
            index = self._index.get(rule)
            if index is None:
                index = len(self.rules)
                self._index[rule] = index
                self.rules.append(rule)
                self.dfas.append(RuleDfa(rule, index, self))  # built when first read
                self.tables_changed(index)
        return index

    @property
    def lengths_exact(self) -> bool:
        if self._lengths_exact is None:
            with self._lock:
                if self._lengths_exact is None:
                    self._lengths_exact = settle_rule_lengths(self.root)
        return self._lengths_exact

    def exit_mask(self, index: int) -> int:
        """The flags that make a state of rule ``index`` a place to leave the rule from."""
        return walk.EXIT if index or self.root_called else walk.HAS_CALLS

    def count_state(self) -> None:
        self._states += 1
        if self._states > self.max_states:
            raise CompileLimitError("max_states", self._states, self.max_states, "the rules' automata grew too large")

    @property
    def num_states(self) -> int:
        """States of all rules' automata together."""
        return self._states

    @property
    def memory_bytes(self) -> int:
        """The rules' automata: their arrays, and per state the derivative expression behind it
        (:data:`~grammask.grammars.fsm.expr.NODE_BYTES`, an estimate: expressions are shared)."""
        return self._array_bytes + E.NODE_BYTES * self._states

    def arrays_grew(self, delta: int) -> None:
        """Count ``delta`` more bytes of automaton arrays (kept as a running total, so that reading
        :attr:`memory_bytes` costs the same for a rule set of thousands of rules: a compiler reads it
        for every cached grammar on each compile)."""
        with self._lock:
            self._array_bytes += delta

    def tables(self) -> tuple[walk.RuleTables, ...]:
        """Every rule's :meth:`RuleDfa.tables`, by rule number (each kept until one of its arrays
        is replaced: a grammar of a hundred rules grows one automaton at a time)."""
        found = self._tables
        if found is None:
            entries = self._rule_tables
            for index in self._stale:
                entries[index] = self.dfas[index].tables()
            self._stale.clear()
            found = self._tables = tuple(entries)
        return found

    def tables_changed(self, index: int) -> None:
        """Forget rule ``index``'s :meth:`tables` (an array of its automaton was replaced by a
        larger one, or the rule is new)."""
        entries = self._rule_tables
        if index >= len(entries):
            entries.extend([None] * (index + 1 - len(entries)))
        entries[index] = None
        self._stale.add(index)
        self._tables = None


_CHAR_STARTS = E.first_bytes(ENCODED_CHAR)


def length_free_twin(expr: Expr) -> tuple[Expr, int] | None:
    """``(twin, room)`` when ``expr`` is ``(C{0,hi} ∩ X)·rest`` or ``C{0,hi}·rest``: a string body
    of at most ``hi`` characters ``C`` (:data:`~grammask.grammars.fsm.json_text.ENCODED_CHAR`) that
    must also match ``X`` (``C*`` when there is no ``∩``), a plain pattern whose texts are whole
    characters (as the JSON lowering's encoded patterns are), then a ``rest`` that starts with no
    character's first byte, calls nothing first and is not empty. ``twin`` is ``X·rest``;
    ``None`` for any other shape, or when ``X`` has no
    :func:`~grammask.grammars.fsm.expr.completion_bound` ``B`` below ``hi``.

    A token of at most ``room = hi − B`` bytes is read alike from both: a text of ``twin`` that
    goes on from it either closes the string within the token (at most ``room`` characters) or
    can close it within ``B`` more bytes. Both are live or dead together, and past the string's
    end they are the same state (``rest``'s first byte ends ``X``), so rows and exits of the twin
    serve ``expr`` for short tokens, whatever ``hi``: one twin per pattern state, not per count.
    """
    if expr.kind != E.CAT_KIND:
        return None
    head, rest = expr.args
    if head.kind == E.COUNT_KIND:  # no pattern: X is every text
        count, pattern = head, E.star(ENCODED_CHAR)
    elif head.kind == E.AND_KIND and len(head.args) == 2:
        count, pattern = head.args if head.args[0].kind == E.COUNT_KIND else head.args[::-1]
    else:
        return None
    if count.kind != E.COUNT_KIND or count.args[0] is not ENCODED_CHAR or count.bounds[0] or count.bounds[1] is None:
        return None
    bound = E.completion_bound(pattern)
    if bound is None or bound >= count.bounds[1]:
        return None
    if nullable(rest) or first_calls(rest) or E.first_bytes(rest) & _CHAR_STARTS:
        return None
    return E.cat(pattern, rest), count.bounds[1] - bound


def reachable_rules(root: Rule, *, include_root: bool = True) -> list[Rule]:
    """Every rule ``root``'s body calls, directly or not (``root`` first, unless not asked for and
    not called)."""
    graph = call_graph(root)
    found = [rule for rule in graph if include_root or rule is not root or any(root in callees for callees in graph.values())]
    return found


def call_graph(root: Rule) -> dict[Rule, list[Rule]]:
    """``rule → the rules its body calls`` for every rule reachable from ``root`` (``root`` first)."""
    graph: dict[Rule, list[Rule]] = {}
    pending = [root]
    while pending:
        rule = pending.pop()
        if rule in graph:
            continue
        callees: dict[Rule, None] = {}
        seen: set[int] = set()
        nodes = [rule.body]
        while nodes:
            node = nodes.pop()
            if id(node) in seen or not node._has_calls:
                continue
            seen.add(id(node))
            if node.kind == E.CALL_KIND:
                callees[node.args[0]] = None
            else:
                nodes.extend(node.args)
        graph[rule] = list(callees)
        pending.extend(c for c in callees if c not in graph)
    return graph


def settle_rule_lengths(root: Rule) -> bool:
    """Set :attr:`Rule.min_length` of every rule reachable from ``root``: rules are taken callees
    first (strongly connected components of the call graph in reverse topological order); within
    a recursive component, rounds of the rules' structural lengths, where a call counts its rule's
    length from the round before, starting from "no text"
    (:data:`~grammask.grammars.fsm.expr.INFINITE_LENGTH`). Round ``k`` gives the shortest text of
    derivations at most ``k`` calls deep; a shortest derivation never repeats a rule on a path, so
    the rounds settle within the component's size, and a rule that only recurses keeps no text.
    ``&`` / ``¬`` parts count their exact lengths (:func:`automaton.settle`).

    Returns:
        whether every length is exact (not when an ``&`` / ``¬`` part's search gave up; its rule
        then keeps a lower bound).
    """
    graph = call_graph(root)
    lengths = {rule: E.INFINITE_LENGTH for rule in graph}
    for rule in graph:
        if rule.min_length is not None:  # shared rules (any JSON value) keep what they found
            lengths[rule] = rule.min_length
    exact = True
    for component in _components(graph):
        fresh = [rule for rule in component if rule.min_length is None]
        recursive = len(component) > 1 or component[0] in graph[component[0]]
        for _ in range(len(fresh) + 1 if recursive else 1):
            changed = False
            for rule in fresh:
                length, rule_exact = _body_length(rule.body, lengths)
                exact &= rule_exact
                if length != lengths[rule]:
                    lengths[rule] = length
                    changed = True
            if not changed:
                break
        for rule in fresh:
            rule.min_length = lengths[rule]
    A.invalidate_length_memos()
    return exact


def _components(graph: dict[Rule, list[Rule]]) -> list[list[Rule]]:
    """Strongly connected components, callees before callers (Tarjan, iterative)."""
    index: dict[Rule, int] = {}
    low: dict[Rule, int] = {}
    on_stack: set[Rule] = set()
    stack: list[Rule] = []
    out: list[list[Rule]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            rule, i = work.pop()
            if i == 0:
                index[rule] = low[rule] = len(index)
                stack.append(rule)
                on_stack.add(rule)
            callees = graph[rule]
            if i < len(callees):
                work.append((rule, i + 1))
                callee = callees[i]
                if callee not in index:
                    work.append((callee, 0))
                elif callee in on_stack:
                    low[rule] = min(low[rule], index[callee])
                continue
            if low[rule] == index[rule]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member is rule:
                        break
                out.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[rule])
    return out


def rule_productive(rule: Rule) -> bool:
    """Whether ``rule`` matches some text (decided once, building what it needs to)."""
    if rule.productive is None:
        _rule_productive(rule, frozenset())
    return bool(rule.productive)


def expr_productive(expr: Expr) -> bool:
    """Whether ``expr`` matches some text, its calls standing for their rules' languages."""
    return _productive(expr, frozenset())[0]


def known_productive(expr: Expr) -> bool:
    """Whether ``expr`` is known to match some text without building a rule or searching: a call
    of a rule decided productive, or of a built rule whose body (or ``expr`` itself) has no calls,
    ``&`` or ``¬`` and is not ∅ (every such expression matches something)."""
    if expr.kind == E.CALL_KIND:
        rule = expr.args[0]
        if rule.productive is not None:
            return rule.productive
        if rule._body is None:
            return False
        expr = rule._body
    return expr is not EMPTY and not expr._has_calls and is_plain(expr)


def _rule_productive(rule: Rule, visiting: frozenset) -> tuple[bool, bool]:
    """``(productive, tentative)``: ``tentative`` when a "no" came from cutting a cycle (a rule
    being decided further up), so it is not final for this rule (and not recorded)."""
    if rule.productive is not None:
        return rule.productive, False
    if rule in visiting:
        return False, True
    found, tentative = _productive(rule.body, visiting | {rule})
    if found or not tentative:
        rule.productive = found
    return found, tentative


def _productive(expr: Expr, visiting: frozenset) -> tuple[bool, bool]:
    """Some text of ``expr`` exists: a derivation using only productive rules. A shortest such
    derivation never repeats a rule on a path, so cutting cycles loses none; alternatives without
    calls are tried first, so most rules decide without building what they call."""
    known = expr._productive  # definitive answers only (not those a cut cycle made)
    if known is not None:
        return known, False
    found, tentative = _decide_productive(expr, visiting)
    if not tentative:
        expr._productive = found
    return found, tentative


def _decide_productive(expr: Expr, visiting: frozenset) -> tuple[bool, bool]:
    kind = expr.kind
    if kind in (E.AND_KIND, E.NOT_KIND) and expr._has_calls:  # free values read through
        found = A.has_text(expr, A.SETTLE_MAX_STATES)
        return found is not False, False  # undecided: live, as an unsettled & or ¬ without calls
    if not expr._has_calls:
        if expr is EMPTY:
            return False, False
        if is_plain(expr):
            return True, False
        for part in A.unsettled_parts(expr):
            A.settle(part, A.SETTLE_MAX_STATES)
        return A.structural_length(expr)[0] < E.INFINITE_LENGTH, False
    if kind == E.CALL_KIND:
        return _rule_productive(expr.args[0], visiting)
    if kind == E.STAR_KIND:
        return True, False
    if kind == E.CAT_KIND:
        # The right spine, iteratively, up to a suffix already known productive: the states
        # inside a long literal are its suffixes, and each would otherwise walk all of it again.
        node = expr
        parts, spine = [], []
        while node.kind == E.CAT_KIND and (node is expr or not node._productive):
            spine.append(node)
            parts.append(node.args[0])
            node = node.args[1]
        parts.append(node)
        for part in sorted(parts, key=lambda p: p._has_calls):
            found, cut = _productive(part, visiting)
            if not found:
                return False, cut
        for suffix in spine[1:]:  # every part productive: so is every suffix of the spine
            suffix._productive = True
        return True, False
    # ALT
    tentative = False
    for part in sorted(expr.args, key=lambda p: p._has_calls):
        found, cut = _productive(part, visiting)
        if found:
            return True, False
        tentative |= cut
    return False, tentative


def _body_length(body: Expr, lengths: dict[Rule, int]) -> tuple[int, bool]:
    """The structural length of ``body`` with calls at ``lengths`` (post-order, no recursion)."""
    memo: dict[int, tuple[int, bool]] = {}
    stack = [body]
    while stack:
        node = stack[-1]
        if id(node) in memo:
            stack.pop()
            continue
        kind = node.kind
        if kind == E.CALL_KIND:
            memo[id(node)] = (lengths[node.args[0]], True)
        elif not node._has_calls or kind in (E.AND_KIND, E.NOT_KIND):  # & and ¬ call free values only
            memo[id(node)] = A.structural_length(node) if not node._plain else (node._min_length, True)
            if not memo[id(node)][1]:
                for part in A.unsettled_parts(node):
                    A.settle(part, A.SETTLE_MAX_STATES)
                memo[id(node)] = A.structural_length(node)
        elif kind == E.STAR_KIND:
            memo[id(node)] = (0, True)
        else:
            pending = [part for part in node.args if id(part) not in memo]
            if pending:
                stack.extend(pending)
                continue
            parts = [memo[id(part)] for part in node.args]
            if kind == E.CAT_KIND:
                total = min(E.INFINITE_LENGTH, sum(length for length, _ in parts))
                memo[id(node)] = (total, all(ok for _, ok in parts))
            else:  # ALT
                least = min(length for length, _ in parts)
                memo[id(node)] = (least, any(ok and length == least for length, ok in parts))
        stack.pop()
    return memo[id(body)]


def length_lower_bound(expr: Expr) -> int:
    """A lower bound of the length of ``expr``'s shortest text that builds nothing: a call counts
    its rule's settled length, else its built body's bound (1 for a rule not built yet, met again
    on a cycle, or nested past :data:`_BOUND_DEPTH`)."""
    return E.length_bound(expr, _RuleBounds().__getitem__)


_BOUND_DEPTH = 64


class _RuleBounds(dict):
    def __init__(self) -> None:
        super().__init__()
        self.visiting: set[Rule] = set()

    def __missing__(self, rule: Rule) -> int:
        if rule.min_length is not None:
            return rule.min_length
        if rule._body is None or rule in self.visiting or len(self.visiting) >= _BOUND_DEPTH:
            return 1
        self.visiting.add(rule)
        bound = self[rule] = E.length_bound(rule._body, self.__getitem__)
        self.visiting.discard(rule)
        return bound


__all__ = [
    "DEAD", "Rule", "RuleDfa", "RuleSet", "call_graph", "expr_productive", "length_lower_bound", "reachable_rules",
    "known_productive", "rule_productive", "settle_rule_lengths",
]
