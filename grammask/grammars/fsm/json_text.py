"""JSON text as byte expressions: strings in canonical encoding, plain decimal numbers, bounds.

Canonical forms (what makes complement exact):

* **Strings** are written exactly as ``json.dumps(value, ensure_ascii=False)`` writes them: every
  character raw except ``"`` → ``\\"``, ``\\`` → ``\\\\``, the short escapes ``\\b \\f \\n \\r \\t``,
  and other control characters as ``\\u00xx`` (lower-case hex); a lone surrogate, which UTF-8
  cannot carry, as ``\\udxxx`` (:func:`~grammask.grammars.spec.json_string`). One value, one
  spelling, so a language of decoded values (length, ``pattern``, ``format``) maps to exactly one
  language of texts, and ``not`` of a string constraint stays sound. :func:`encode_chars` is that mapping, an
  injective morphism applied to an expression over the UTF-8 of the decoded value.
* **Numbers** are plain decimals ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (no exponent): bounds and
  ``multipleOf`` are exact on them; exponent notation is never accepted. :func:`number_forms`
  gives the spec's :class:`~grammask.grammars.spec.NumberForm`: canonical (one spelling per
  value, the default) or lenient (any plain decimal).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from decimal import Decimal

from grammask.errors import CompileLimitError, UnsupportedFeatureError
from grammask.grammars.fsm import expr as E
from grammask.grammars.spec import canonical_number_text, json_string
from grammask.schemas import formats as F
from grammask.schemas import numbers as N

_SHORT_ESCAPES = {0x22: b'\\"', 0x5C: b"\\\\", 0x08: b"\\b", 0x0C: b"\\f", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
_SPECIAL = [b for b in range(0x20)] + [0x22, 0x5C]
_SPECIAL_MASK = sum(1 << b for b in _SPECIAL)

MAX_MULTIPLE_STATES = 4000
MAX_MINIMAL_STATES = 18


def escape_byte(b: int) -> bytes:
    """The canonical escape of an ASCII byte that may not appear raw in a JSON string."""
    return _SHORT_ESCAPES.get(b, b"\\u%04x" % b)


class CharEncoder:
    """Maps an expression over the UTF-8 of decoded string characters to the canonical JSON
    encoding of those characters (without the surrounding quotes). Memoised per instance."""

    def __init__(self) -> None:
        self._memo: dict[E.Expr, E.Expr] = dict(_KNOWN_ENCODINGS)

    def __call__(self, e: E.Expr) -> E.Expr:
        if _needs_no_escapes(e):
            return e  # the morphism is the identity there (most formats and patterns)
        # Iterative post-order walk: expressions from patterns like (a{0,99}) nest deeply.
        memo = self._memo
        stack = [e]
        while stack:
            node = stack[-1]
            if node in memo:
                stack.pop()
                continue
            pending = [a for a in node.args if isinstance(a, E.Expr) and a not in memo]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            memo[node] = self._map(node)
        return memo[e]

    def _map(self, e: E.Expr) -> E.Expr:
        kind, memo = e.kind, self._memo
        if kind in (E.EMPTY_KIND, E.EPS_KIND):
            return e
        if kind == E.BYTES_KIND:
            return _encoded_bytes(e.args[0])
        if kind == E.CAT_KIND:
            return E.cat(memo[e.args[0]], memo[e.args[1]])
        if kind == E.ALT_KIND:
            return E.alt(*(memo[p] for p in e.args))
        if kind == E.AND_KIND:
            return E.inter(*(memo[p] for p in e.args))
        if kind == E.COUNT_KIND:
            return E.counted(memo[e.args[0]], *e.bounds)
        if kind == E.STAR_KIND:
            return E.star(memo[e.args[0]])
        # NOT: h(¬x) = h(Σ*) ∖ h(x), as h is injective
        return E.inter(_ENCODED_ALL, E.neg(memo[e.args[0]]))


@functools.lru_cache(maxsize=4096)
def _encoded_bytes(mask: int) -> E.Expr:
    """The encodings of a set of bytes: raw where JSON allows, escaped otherwise."""
    parts = [E.byte_set(mask & ~_SPECIAL_MASK)]
    parts += [E.literal(escape_byte(b)) for b in _SPECIAL if (mask >> b) & 1]
    return E.alt(*parts)


_ENCODED_ALL = E.star(_encoded_bytes(E.ALL_BYTES))


_NO_ESCAPES: "weakref.WeakKeyDictionary[E.Expr, bool]" = weakref.WeakKeyDictionary()
""":func:`_needs_no_escapes` of the expressions alive (weak keys: a cache by count kept every
pattern's expression alive after its grammar was gone, 12,400 nodes for a 3,000-word pattern)."""


def _needs_no_escapes(e: E.Expr) -> bool:
    """Whether ``e`` has no complement and no byte that JSON escapes (then it encodes to itself)."""
    known = _NO_ESCAPES.get(e)
    if known is None:
        known = _NO_ESCAPES[e] = _has_no_escapes(e)
    return known


def _has_no_escapes(e: E.Expr) -> bool:
    seen: set[E.Expr] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.kind == E.NOT_KIND or (node.kind == E.BYTES_KIND and node.args[0] & _SPECIAL_MASK):
            return False
        stack.extend(a for a in node.args if isinstance(a, E.Expr))
    return True


ANY_CHAR = E.any_char()
ANY_CHARS = E.star(ANY_CHAR)
QUOTE = E.literal('"')
_KNOWN_ENCODINGS: dict[E.Expr, E.Expr] = {}
_ENCODER = CharEncoder()
_ENCODED_BODY = _ENCODER(ANY_CHARS)
ENCODED_CHAR = _ENCODER(ANY_CHAR)
"""One character of a JSON string as written: raw, or its canonical escape. A string's length
bounds count these (:func:`~grammask.grammars.fsm.expr.counted`)."""
_KNOWN_ENCODINGS.update({ANY_CHARS: _ENCODED_BODY, ANY_CHAR: ENCODED_CHAR})  # every schema's; encoded once


CACHED_STRING_CHARS = 64
"""String values up to this long have their text and expression cached for every grammar of the
process (property names and enum values recur); longer ones are built each time. A cached
expression stays alive with its nodes (about 5 KB for a short literal), so the caches are bounded
by what an entry can hold, not only by count: a schema's 50,000-value enum had kept about 470,000
nodes alive after its compile failed."""


def _encoded_string(value: str) -> bytes:
    return json_string(value).encode("utf-8")


def _string_expr(value: str) -> E.Expr:
    return E.literal(string_text(value))


_cached_string_text = functools.lru_cache(maxsize=8192)(_encoded_string)
_cached_string_expr = functools.lru_cache(maxsize=2048)(_string_expr)


def string_text(value: str) -> bytes:
    """The canonical JSON text of one string value, quotes included (:func:`~grammask.grammars.spec.json_string`)."""
    return _cached_string_text(value) if len(value) <= CACHED_STRING_CHARS else _encoded_string(value)


def string_literal(value: str) -> E.Expr:
    """The canonical JSON text of one string value (:func:`string_text`) as an expression."""
    return _cached_string_expr(value) if len(value) <= CACHED_STRING_CHARS else _string_expr(value)


def string_then(value: str, rest: E.Expr) -> E.Expr:
    """:func:`string_literal` of ``value`` then ``rest`` (a member's key, then its colon and
    value), built onto ``rest`` (:func:`~grammask.grammars.fsm.expr.literal_then`)."""
    return E.literal_then(string_text(value), rest)


_ENCODED_NOT_PLAIN = None  # set below, after the plain-ASCII mask


def string_not_in(values) -> E.Expr:
    """The canonical JSON text of every string except ``values`` (an iterable of ``str``), written
    without complement: a trie of the values' characters where, at each node, the text may end
    (unless a value ends there), continue with a child's character, or leave the trie with any
    other character and go on freely. Equal to ``any string ∖ values`` as a language, but plain,
    so its automaton needs no searches to tell live states from dead ones."""
    return E.cat(QUOTE, string_rest_not_in(values))


def string_rest_not_in(values) -> E.Expr:
    """:func:`string_not_in` after its opening quote: the rest of the text of every string but
    ``values``, through the closing quote."""
    return _trie_complement(E.word_trie(values))


TEXT_OPEN: "weakref.WeakKeyDictionary[E.Expr, dict]" = weakref.WeakKeyDictionary()
"""Expressions (the nodes of :func:`string_not_in`'s trie) from which every run of string text —
whole characters other than the quote, the backslash and control characters — still has a completion: the
key is not closed yet, and some longer key is not excluded. Their rows take all such tokens at once.
Each maps to its trie (:func:`~grammask.grammars.fsm.expr.word_trie` of characters): the values it
still excludes (:func:`excluded_closings`)."""


def _trie_complement(node: dict) -> E.Expr:
    children = [c for c in node if c is not None]
    parts = [] if None in node else [QUOTE]
    for char in children:
        parts.append(E.cat(_encoded_char(char), _trie_complement(node[char])))
    parts.append(_leave_trie(frozenset(children)))
    result = E.alt(*parts)
    TEXT_OPEN[result] = node
    return result


def excluded_closings(node: E.Expr, limit: int) -> list[bytes] | None:
    """The texts that close a string at a value the trie node ``node`` (of :data:`TEXT_OPEN`)
    excludes: each the encoded rest of such a value, then the closing quote. ``node`` reads every
    text as :data:`BODY_AND_QUOTE` does but those (the language of the one less these), since a
    string's text ends at its first closing quote. ``None`` when ``node`` is no such node or
    excludes more than ``limit`` values."""
    trie = TEXT_OPEN.get(node)
    if trie is None:
        return None
    found: list[bytes] = []
    pending = [(trie, b"")]
    while pending:
        branch, text = pending.pop()
        for char, child in branch.items():
            if char is None:
                if len(found) == limit:
                    return None
                found.append(text + b'"')
            else:
                pending.append((child, text + string_text(char)[1:-1]))
    return found


_PLAIN_ASCII = sum(1 << b for b in range(0x20, 0x80)) & ~_SPECIAL_MASK
"""The bytes that stand for themselves in a JSON string (one character each)."""


@functools.lru_cache(maxsize=4096)
def _leave_trie(children: frozenset[str]) -> E.Expr:
    """Any character but ``children``, then any string body and the closing quote."""
    if all(ord(c) < 0x80 and (_PLAIN_ASCII >> ord(c)) & 1 for c in children):  # (a lone surrogate is a child too)
        # The usual case (ASCII names): the plain-ASCII byte set minus those bytes, or any other
        # encoded character (an escape, a multi-byte character), each then the rest. The second
        # branch is one shared node: those encodings are a union of dozens of parts, and building
        # a new union of them with each trie node's byte set cost ~80 µs a node.
        mask = _PLAIN_ASCII & ~sum(1 << ord(c) for c in children)
        return E.alt(E.cat(E.byte_set(mask), BODY_AND_QUOTE), _NOT_PLAIN_AND_REST)
    others = _ENCODER(E.char_ranges([(ord(c), ord(c)) for c in children], negate=True))
    return E.cat(others, BODY_AND_QUOTE)


_ENCODED_NOT_PLAIN = _ENCODER(E.char_ranges([(b, b) for b in range(0x80) if (_PLAIN_ASCII >> b) & 1], negate=True))
"""Every encoded character other than a plain ASCII byte: escapes and multi-byte characters."""
BODY_AND_QUOTE = E.cat(_ENCODED_BODY, QUOTE)
"""The rest of any string after its opening quote: its encoded text, then the closing quote."""
_NOT_PLAIN_AND_REST = E.cat(_ENCODED_NOT_PLAIN, BODY_AND_QUOTE)


@functools.lru_cache(maxsize=65536)
def _encoded_char(char: str) -> E.Expr:
    """The canonical encoding of one character (a literal)."""
    return E.literal(string_text(char)[1:-1])


# ---------------------------------------------------------------------------------- numbers

DIGIT = E.byte_range(0x30, 0x39)
MINUS = E.literal("-")
DOT = E.literal(".")
INT_PART = E.alt(E.literal("0"), E.cat(E.byte_range(0x31, 0x39), E.star(DIGIT)))
FRACTION = E.opt(E.cat(DOT, E.plus(DIGIT)))
NUMBER = E.cat(E.opt(MINUS), INT_PART, FRACTION)
INTEGER = E.cat(E.opt(MINUS), INT_PART, E.opt(E.cat(DOT, E.plus(E.literal("0")))))
INTEGER_DRAFT4 = E.cat(E.opt(MINUS), INT_PART)
"""Draft 4 counts ``1.0`` as a number, not an integer."""
MAGNITUDE = E.cat(INT_PART, FRACTION)

_NONZERO = E.byte_range(0x31, 0x39)
CANONICAL_INTEGER = E.alt(E.literal("0"), E.cat(E.opt(MINUS), _NONZERO, E.star(DIGIT)))
"""Integral values written once: no ``-0``, no fraction."""
CANONICAL_NUMBER = E.alt(CANONICAL_INTEGER, E.cat(E.opt(MINUS), INT_PART, DOT, E.star(DIGIT), _NONZERO))
"""Every value written once: an integral one as :data:`CANONICAL_INTEGER`, any other without
trailing fraction zeros."""


@dataclass(frozen=True)
class NumberForms:
    """The number texts of one :class:`~grammask.grammars.spec.NumberForm` (and draft).

    Attributes:
        number: every number.
        integer: every integral number (what ``"type": "integer"`` accepts).
        canonical: whether each value has one spelling (else any plain decimal).
        draft4: draft 4 tells an integral float (``1.0``) from an integer (``1``).
    """

    number: E.Expr
    integer: E.Expr
    canonical: bool
    draft4: bool

    def equal(self, value: Decimal, *, is_float: bool = False) -> E.Expr:
        """Every text of this form whose value equals ``value`` (JSON equality: ``1`` equals ``1.0``)."""
        if not self.canonical:
            return number_equal(value)
        text = E.literal(canonical_number_text(value))
        if self.draft4 and value == value.to_integral_value():
            return E.alt(text, E.literal(canonical_number_text(value) + ".0"))
        return text


def number_forms(canonical: bool, draft4: bool) -> NumberForms:
    """The number texts of the canonical or the lenient form, for draft 4 or a later draft."""
    if canonical:
        float_whole = E.cat(E.alt(E.literal("0"), E.cat(E.opt(MINUS), _NONZERO, E.star(DIGIT))), E.literal(".0"))
        number = E.alt(CANONICAL_NUMBER, float_whole) if draft4 else CANONICAL_NUMBER
        return NumberForms(number, CANONICAL_INTEGER, True, draft4)
    return NumberForms(NUMBER, INTEGER_DRAFT4 if draft4 else INTEGER, False, draft4)


def digit_language(language: N.DigitLanguage) -> E.Expr:
    """The expression of a :mod:`grammask.schemas.numbers` digit language."""
    alts = []
    for alternative in language:
        parts = []
        for atom in alternative:
            piece = E.byte_range(ord(atom.lo), ord(atom.hi))
            parts.append(E.star(piece) if atom.star else piece)
        alts.append(E.cat(*parts))
    return E.alt(*alts)


def _with_fraction(int_lang: E.Expr, frac_digits: E.Expr) -> E.Expr:
    frac = E.diff(frac_digits, E.EPS)
    dotted = E.cat(DOT, frac)
    return E.cat(int_lang, E.alt(dotted, E.EPS) if E.nullable(frac_digits) else dotted)


def _magnitude_at_least(bound: Decimal) -> E.Expr:
    whole, frac = N.split_decimal(bound)
    bigger = E.cat(digit_language(N.nonneg_int_at_least(whole + 1)), FRACTION)
    equal = _with_fraction(E.literal(str(whole)), digit_language(N.frac_at_least(frac)))
    return E.alt(bigger, equal)


def _magnitude_at_most(bound: Decimal) -> E.Expr:
    whole, frac = N.split_decimal(bound)
    smaller = E.cat(digit_language(N.nonneg_int_at_most(whole - 1)), FRACTION) if whole > 0 else E.EMPTY
    equal = _with_fraction(E.literal(str(whole)), digit_language(N.frac_at_most(frac)))
    return E.alt(smaller, equal)


def number_equal(value: Decimal) -> E.Expr:
    """Every plain decimal text whose value equals ``value`` (``1`` is also ``1.0``, ``1.00``…)."""
    whole, frac = N.split_decimal(value)
    zeros = E.star(E.literal("0"))
    tail = E.opt(E.cat(DOT, E.plus(E.literal("0")))) if not frac else E.cat(DOT, E.literal(frac), zeros)
    magnitude = E.cat(E.literal(str(whole)), tail)
    if value == 0:
        return E.cat(E.opt(MINUS), magnitude)
    return E.cat(MINUS, magnitude) if value < 0 else magnitude


def number_at_least(bound: Decimal, *, exclusive: bool = False) -> E.Expr:
    """Plain decimal texts with value ``>= bound`` (``> bound`` when exclusive)."""
    if bound > 0:
        lang = _magnitude_at_least(bound)
    else:
        lang = E.alt(MAGNITUDE, E.cat(MINUS, _magnitude_at_most(-bound)))
    return E.diff(lang, number_equal(bound)) if exclusive else lang


def number_at_most(bound: Decimal, *, exclusive: bool = False) -> E.Expr:
    """Plain decimal texts with value ``<= bound`` (``< bound`` when exclusive)."""
    if bound >= 0:
        lang = E.alt(E.cat(MINUS, MAGNITUDE), _magnitude_at_most(bound))
    else:
        lang = E.cat(MINUS, _magnitude_at_least(-bound))
    return E.diff(lang, number_equal(bound)) if exclusive else lang


def multiple_of(step: Decimal, path: str) -> E.Expr:
    """Plain decimal texts whose value is an integer multiple of ``step`` (``step > 0``).

    Built as a DFA over the magnitude's characters (remainder of the scaled value modulo the
    step's integer numerator, and how many fraction digits have been read), minimised, then turned
    into an expression by state elimination. Raises :class:`UnsupportedFeatureError` when the DFA
    would exceed :data:`MAX_MULTIPLE_STATES` states, or its minimal form
    :data:`MAX_MINIMAL_STATES` (elimination grows fast with states).
    """
    sign, digits, exponent = step.normalize().as_tuple()
    numerator = int("".join(map(str, digits)))
    if exponent >= 0:
        numerator, scale = numerator * 10**exponent, 0
    else:
        scale = -exponent
    if numerator * (scale + 2) > MAX_MULTIPLE_STATES:
        raise UnsupportedFeatureError(
            "multipleOf", path, "fsm", f"{step} needs {numerator * (scale + 2)} states (cap {MAX_MULTIPLE_STATES})"
        )
    start, edges, accept = _minimize(*_multiple_dfa(numerator, scale))
    if len(edges) > MAX_MINIMAL_STATES:
        raise UnsupportedFeatureError(
            "multipleOf", path, "fsm", f"{step} needs {len(edges)} states (cap {MAX_MINIMAL_STATES})"
        )
    return E.cat(E.opt(MINUS), _eliminate(start, edges, accept))


def _multiple_dfa(a: int, s: int):
    """States: ('i0',) after a leading 0; ('i', r) in the integer part; ('f', r, p) after p
    fraction digits; ('z', r) past s fraction digits (only zeros may follow)."""
    start = ("start",)
    edges: dict[tuple, dict[tuple, int]] = {}
    accept: set[tuple] = set()
    todo, seen = [start], {start}

    def add(src, dst, mask):
        edges.setdefault(src, {})
        edges[src][dst] = edges[src].get(dst, 0) | mask
        if dst not in seen:
            seen.add(dst)
            todo.append(dst)

    while todo:
        q = todo.pop()
        if q[0] == "start":
            add(q, ("i0",), 1 << 0x30)
            for d in range(1, 10):
                add(q, ("i", d % a), 1 << (0x30 + d))
            continue
        if q[0] in ("i0", "i"):
            r = 0 if q[0] == "i0" else q[1]
            if r * 10**s % a == 0:
                accept.add(q)
            if q[0] == "i":
                for d in range(10):
                    add(q, ("i", (r * 10 + d) % a), 1 << (0x30 + d))
            add(q, ("f", r, 0), 1 << 0x2E)
        elif q[0] == "f":
            _, r, p = q
            if p >= 1 and r * 10 ** (s - p) % a == 0:
                accept.add(q)
            for d in range(10):
                nxt = ("f", (r * 10 + d) % a, p + 1) if p < s else None
                if nxt is None:
                    if d == 0:
                        add(q, ("z", r), 1 << 0x30)
                else:
                    add(q, nxt, 1 << (0x30 + d))
        else:  # 'z'
            if q[1] == 0:
                accept.add(q)
            add(q, q, 1 << 0x30)
    return start, edges, accept


def _minimize(start, edges, accept):
    """Moore partition refinement (divisibility by 25 needs 2 digits of memory, not 25 states)."""
    states = sorted({start, *edges, *(d for m in edges.values() for d in m)}, key=repr)
    symbols = [1 << b for b in range(0x2E, 0x3A)]

    def step(q, symbol):
        for dst, mask in edges.get(q, {}).items():
            if mask & symbol:
                return dst
        return None

    block = {q: int(q in accept) for q in states}
    while True:
        signatures = {q: (block[q], *(block.get(step(q, a), -1) for a in symbols)) for q in states}
        numbering: dict[tuple, int] = {}
        new_block = {q: numbering.setdefault(signatures[q], len(numbering)) for q in states}
        if len(numbering) == len(set(block.values())):
            break
        block = new_block
    block = new_block
    quotient: dict[tuple, dict[tuple, int]] = {}
    for q in states:
        src = ("b", block[q])
        for dst, mask in edges.get(q, {}).items():
            row = quotient.setdefault(src, {})
            row[("b", block[dst])] = row.get(("b", block[dst]), 0) | mask
    return ("b", block[start]), quotient, {("b", block[q]) for q in accept}


def _eliminate(start, edges, accept) -> E.Expr:
    """Regular expression of a DFA by state elimination (Brzozowski–McCluskey)."""
    final = ("final",)
    states = list({start, *edges, *(d for m in edges.values() for d in m)})
    table: dict[tuple, dict[tuple, E.Expr]] = {q: {} for q in states + [final]}
    for src, targets in edges.items():
        for dst, mask in targets.items():
            table[src][dst] = E.alt(table[src].get(dst, E.EMPTY), E.byte_set(mask))
    for q in accept:
        table[q][final] = E.EPS
    for k in [q for q in states if q != start]:
        loop = E.star(table[k].pop(k, E.EMPTY))
        outgoing = table.pop(k)
        for src, row in table.items():
            into = row.pop(k, None)
            if into is None:
                continue
            for dst, label in outgoing.items():
                row[dst] = E.alt(row.get(dst, E.EMPTY), E.cat(into, loop, label))
    start_row = table[start]
    return E.cat(E.star(start_row.get(start, E.EMPTY)), start_row.get(final, E.EMPTY))


MAX_COMPLEMENT_STATES = 32
"""The most states (that can still reach acceptance) :func:`plain_complement` turns into an expression."""
MAX_COMPLEMENT_NODES = 20_000
"""The most expression nodes :func:`plain_complement` builds for one complement."""


_COMPLEMENTS: "weakref.WeakKeyDictionary[E.Expr, dict[int, E.Expr | None]]" = weakref.WeakKeyDictionary()
""":func:`plain_complement` of the character languages alive, by ``max_states`` (weak keys, as
:data:`_NO_ESCAPES`)."""


def plain_complement(chars: E.Expr, max_states: int = MAX_COMPLEMENT_STATES) -> E.Expr | None:
    """The strings of Unicode characters not in ``chars`` (a character language, as patterns and
    formats are), written without complement: the automaton of the difference is built whole (at
    most ``8 * max_states`` states) and turned back into an expression by :func:`_eliminate`.
    ``None`` when it has more states than that, more than ``max_states`` that can reach
    acceptance, or its expression passes :data:`MAX_COMPLEMENT_NODES`. Kept while ``chars`` lives."""
    known = _COMPLEMENTS.setdefault(chars, {})
    if max_states not in known:
        known[max_states] = _plain_complement(chars, max_states)
    return known[max_states]


def _plain_complement(chars: E.Expr, max_states: int) -> E.Expr | None:
    from grammask.grammars.fsm.automaton import DEAD, START, LazyDfa

    dfa = LazyDfa(E.diff(ANY_CHARS, chars), max_states=8 * max_states)
    edges: dict[int, dict[int, int]] = {}  # state → {target: byte mask}, dead targets left out
    pending = [START]
    try:
        while pending:
            state = pending.pop()
            row, moves = dfa.row(state), edges.setdefault(state, {})
            for mask in E.byte_classes(dfa.expr(state)):
                target = int(row[(mask & -mask).bit_length() - 1])
                if target != DEAD:
                    moves[target] = moves.get(target, 0) | mask
                    if target not in edges and target not in pending:
                        pending.append(target)
    except CompileLimitError as exc:
        if exc.limit != "max_states":  # the compile's own time or memory cap: not ours to absorb
            raise
        return None
    accept = {state for state in edges if dfa.accepting[state]}
    live = _reaching(edges, accept)
    if START not in live:
        return E.EMPTY
    if len(live) > max_states:
        return None
    kept = {state: {t: mask for t, mask in edges[state].items() if t in live} for state in live}
    try:
        with E.BuildBudget(seconds=1.0, max_bytes=MAX_COMPLEMENT_NODES * E.NODE_BYTES):
            return _eliminate(START, kept, accept)
    except CompileLimitError:  # elimination can grow fast with the loops between states
        return None


def _reaching(edges: dict[int, dict[int, int]], targets: set[int]) -> set[int]:
    """The states of ``edges`` from which some state of ``targets`` can be reached."""
    sources: dict[int, list[int]] = {}
    for state, moves in edges.items():
        for target in moves:
            sources.setdefault(target, []).append(state)
    found, pending = set(targets), list(targets)
    while pending:
        for source in sources.get(pending.pop(), ()):
            if source not in found:
                found.add(source)
                pending.append(source)
    return found


# ---------------------------------------------------------------------------------- formats

_FORMAT_CACHE: dict[str, E.Expr] = {}


def _leap_second_expr() -> E.Expr:
    """``HH:MM:60[.frac]`` with an offset that makes it 23:59:60 UTC (the table of
    :func:`~grammask.schemas.formats.leap_second_times`): a branch per local minute, grouped by
    hour. A time's state must remember its minute until the seconds are read, so the automaton
    has a state per minute either way; as a plain table each is read without a search (an
    intersection of digit relations is smaller to build, but each of its states is an
    intersection)."""
    middle = E.cat(E.literal(":60"), FRACTION)
    hours: dict[str, list[E.Expr]] = {}
    for local, offsets in F.leap_second_times():
        offset = E.alt(*(E.literal(text) for text in offsets))
        hours.setdefault(local[:3], []).append(E.cat(E.literal(local[3:]), middle, offset))
    return E.alt(*(E.cat(E.literal(hour), E.alt(*minutes)) for hour, minutes in hours.items()))


def format_expr(name: str) -> E.Expr | None:
    """The decoded-character language of a known ``format`` (``None`` when unknown).

    Regexes come from :mod:`grammask.schemas.formats`; the leap-second table of ``time`` and
    ``date-time`` is built directly (a 1,440-way alternation parses slowly as a regex).
    """
    if name not in _FORMAT_CACHE:
        from grammask.grammars.fsm.regex import regex_to_expr

        if name == "time":
            _FORMAT_CACHE[name] = E.alt(regex_to_expr(F.TIME_REGULAR), _leap_second_expr())
        elif name == "date-time":
            _FORMAT_CACHE[name] = E.cat(regex_to_expr(F.DATE), E.byte_set((1 << 0x54) | (1 << 0x74)), format_expr("time"))
        else:
            regexes = F.FORMAT_REGEXES.get(name)
            if regexes is None:
                return None
            _FORMAT_CACHE[name] = E.inter(*(regex_to_expr(r) for r in regexes))
    return _FORMAT_CACHE[name]


@functools.lru_cache(maxsize=None)
def encoded_format(name: str) -> E.Expr | None:
    """:func:`format_expr` in the canonical JSON string encoding (``None`` when unknown); built
    once per process, as the format is."""
    chars = format_expr(name)
    return None if chars is None else CharEncoder()(chars)


def build_format_languages() -> None:
    """Build every known format's encoded language now (once per process, ~50 ms), so that no
    compile pays for the first use of one."""
    for name in F.FORMAT_REGEXES:
        encoded_format(name)


# ---------------------------------------------------------------------------------- counting


bounded_repeat = E.repeat
"""``part{lo,hi}`` in O(√lo + √hi) nodes: :func:`~grammask.grammars.fsm.expr.repeat`."""
