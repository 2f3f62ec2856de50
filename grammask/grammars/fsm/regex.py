"""Regex front end: ECMA-262 patterns (the JSON Schema ``pattern`` dialect) → byte expressions.

Two entry points:

* :func:`regex_to_expr` — the whole string must match (what a :class:`~grammask.grammars.spec.Regex`
  spec means);
* :func:`pattern_to_expr` — JSON Schema ``pattern`` semantics: an unanchored search, the string
  matches when the pattern is found anywhere in it; ``^`` / ``$`` anchor to the string's start / end.

Both return an :class:`~grammask.grammars.fsm.expr.Expr` over the UTF-8 bytes of the text (for a
JSON string value, of the *decoded* value; JSON escaping is the caller's business).

Semantics follow ECMA-262 without flags, except that ``.`` is any character but ``\\n``, as
Python's ``regex`` and ``re`` read it (``jsonschema`` validates ``pattern`` with ``re``, and the
two must agree on which names a ``patternProperties`` entry covers); ``\\d \\w \\s`` are the
ECMA sets (ASCII digits / word characters, ECMA white space); ``$`` matches only at the very end.
Lazy quantifiers match the same language as greedy ones. Lookarounds, backreferences, word
boundaries and inline flags cannot be expressed by a finite automaton here and raise
:class:`~grammask.errors.UnsupportedFeatureError` naming the construct and its offset (``path="@<offset>"``); syntax errors raise
:class:`~grammask.errors.InvalidRegexError` with the offset.
"""

from __future__ import annotations

import functools

from grammask.errors import CompileLimitError, InvalidRegexError, UnsupportedFeatureError
from grammask.grammars.fsm.expr import (
    EMPTY,
    EPS,
    MAX_CODE_POINT,
    Expr,
    alt,
    any_char,
    cat,
    char_ranges,
    inter,
    neg,
    repeat,
    star,
)

BACKEND = "fsm"
MAX_REPEAT = 10_000
"""The largest ``{n}`` / ``{n,m}`` count accepted (larger counts raise ``CompileLimitError('max_repeat')``)."""

Ranges = list[tuple[int, int]]

_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: Ranges = [
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
]  # fmt: skip
_CONTROL_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_SYNTAX_CHARS = set("^$\\.*+?()[]{}|/-")

# An anchored language: ``{(needs_start, needs_end): expr}``. ``needs_start`` means the match is
# valid only if it begins at the start of the string (it contains a ``^`` reached after only empty
# matches), likewise ``needs_end`` for ``$``. Entries equal to ∅ are dropped.
Anchored = dict[tuple[bool, bool], Expr]
_FREE = (False, False)


def regex_to_expr(pattern: str) -> Expr:
    """The language of ``pattern`` matched against the whole string.

    Raises:
        InvalidRegexError: the pattern does not parse (with the offset).
        UnsupportedFeatureError: a lookaround, backreference, word boundary or inline flag.
    """
    return alt(*_Parser(pattern).parse().values())


def pattern_to_expr(pattern: str) -> Expr:
    """The strings in which ``pattern`` is found (JSON Schema ``pattern``: unanchored search).

    Raises:
        InvalidRegexError, UnsupportedFeatureError: as :func:`regex_to_expr`.
    """
    anything = star(any_char())
    parts = []
    for (needs_start, needs_end), expr in _Parser(pattern).parse().items():
        parts.append(cat(EPS if needs_start else anything, expr, EPS if needs_end else anything))
    return alt(*parts)


# ------------------------------------------------------------------------------ anchored algebra


def _free(expr: Expr) -> Anchored:
    return {} if expr is EMPTY else {_FREE: expr}


def _union(*parts: Anchored) -> Anchored:
    # One alt per key over all parts: alt-ing them in one by one would rebuild (and re-flatten)
    # the growing union each time, quadratic in the number of branches.
    grouped: dict[tuple[bool, bool], list[Expr]] = {}
    for part in parts:
        for key, expr in part.items():
            grouped.setdefault(key, []).append(expr)
    out = {key: alt(*exprs) for key, exprs in grouped.items()}
    return {k: v for k, v in out.items() if v is not EMPTY}


def _concat(left: Anchored, right: Anchored) -> Anchored:
    out: Anchored = {}
    for (ls, le), lx in left.items():
        for (rs, re_), rx in right.items():
            # A ``^`` on the right needs the left match empty; a ``$`` on the left needs the right empty.
            a = inter(lx, EPS) if rs else lx
            b = inter(rx, EPS) if le else rx
            key = (ls or rs, le or re_)
            out[key] = alt(out.get(key, EMPTY), cat(a, b))
    return {k: v for k, v in out.items() if v is not EMPTY}


def _star(part: Anchored) -> Anchored:
    free = star(part.get(_FREE, EMPTY))
    starts = part.get((True, False), EMPTY)
    ends = part.get((False, True), EMPTY)
    both = part.get((True, True), EMPTY)
    # Iterations before an anchored-at-start one must be empty, likewise after an anchored-at-end one.
    return _union(
        {_FREE: free},
        {(True, False): cat(starts, free)},
        {(False, True): cat(free, ends)},
        {(True, True): alt(both, cat(starts, free, ends))},
    )


def _repeat(part: Anchored, lo: int, hi: int | None) -> Anchored:
    if set(part) <= {_FREE}:
        return _free(repeat(part.get(_FREE, EMPTY), lo, hi))
    result: Anchored = {_FREE: EPS}
    for _ in range(lo):
        result = _concat(result, part)
    if hi is None:
        return _concat(result, _star(part))
    tail: Anchored = {_FREE: EPS}
    for _ in range(hi - lo):
        tail = _union({_FREE: EPS}, _concat(part, tail))
    return _concat(result, tail)


# ------------------------------------------------------------------------------ Unicode properties


@functools.lru_cache(maxsize=256)
def unicode_property_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """Code point ranges of a Unicode property (``"L"``, ``"Letter"``, ``"Script=Greek"``), via the
    ``regex`` module. Raises ``ValueError`` for an unknown property."""
    import regex as regex_module  # lazy: costs nothing until a pattern uses \\p

    try:
        compiled = regex_module.compile(r"\p{" + name + "}+")
    except regex_module.error as err:
        raise ValueError(str(err)) from None
    text = _all_code_points()
    return tuple((m.start(), m.end() - 1) for m in compiled.finditer(text))


@functools.lru_cache(maxsize=1)
def _all_code_points() -> str:
    # Surrogates stand in as themselves (index = code point); char_ranges drops them later.
    return "".join(map(chr, range(MAX_CODE_POINT + 1)))


# ------------------------------------------------------------------------------ the parser


def _is_number(text: str) -> bool:
    return text.isdigit() and text.isascii()


class _Parser:
    """Recursive descent over ``pattern``; ``pos`` is the offset of the next unread character."""

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise InvalidRegexError(f"expected a str, got {type(pattern).__name__}", repr(pattern), None)
        self.pattern = pattern
        self.pos = 0

    # -- helpers

    def error(self, reason: str, position: int | None = None) -> InvalidRegexError:
        return InvalidRegexError(reason, self.pattern, self.pos if position is None else position)

    def unsupported(self, feature: str, position: int, detail: str = "") -> UnsupportedFeatureError:
        return UnsupportedFeatureError(feature, f"@{position}", BACKEND, detail)

    def peek(self, offset: int = 0) -> str | None:
        index = self.pos + offset
        return self.pattern[index] if index < len(self.pattern) else None

    def take(self) -> str:
        if self.pos >= len(self.pattern):
            raise self.error("unexpected end of pattern")
        char = self.pattern[self.pos]
        self.pos += 1
        return char

    def startswith(self, text: str) -> bool:
        return self.pattern.startswith(text, self.pos)

    # -- grammar

    def parse(self) -> Anchored:
        result = self.alternation()
        if self.pos < len(self.pattern):
            # Only an unbalanced ')' can stop the top-level alternation early.
            raise self.error("unbalanced ')'")
        return result

    def alternation(self) -> Anchored:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        return _union(*branches)

    def sequence(self) -> Anchored:
        parts = []
        while self.peek() is not None and self.peek() not in "|)":
            parts.append(self.quantified())
        # Folded from the right: concatenations are right-nested, so adding a part on the left
        # costs that part's length, where appending on the right rebuilt the whole sequence so
        # far (quadratic in a long literal).
        result: Anchored = {_FREE: EPS}
        for part in reversed(parts):
            result = _concat(part, result)
        return result

    def quantified(self) -> Anchored:
        start = self.pos
        atom, repeatable = self.atom()
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if not repeatable:
            raise self.error("nothing to repeat", start)
        lo, hi = bounds
        if self.peek() == "?":  # lazy: same language
            self.pos += 1
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._quantifier_ahead()):
            raise self.error("multiple repeat (a quantifier cannot follow a quantifier)")
        return _repeat(atom, lo, hi)

    def quantifier(self) -> tuple[int, int | None] | None:
        char = self.peek()
        if char == "*":
            self.pos += 1
            return 0, None
        if char == "+":
            self.pos += 1
            return 1, None
        if char == "?":
            self.pos += 1
            return 0, 1
        if char == "{" and self._quantifier_ahead():
            return self.braces()
        return None

    def _quantifier_ahead(self) -> bool:
        end = self.pattern.find("}", self.pos)
        if end < 0:
            return False
        body = self.pattern[self.pos + 1 : end]
        lo, comma, hi = body.partition(",")
        # ``{,n}`` means ``{0,n}`` as the ``regex`` and ``re`` modules read it (ECMA would read text).
        return (_is_number(lo) and (not hi or _is_number(hi))) or (not lo and bool(comma) and _is_number(hi))

    def braces(self) -> tuple[int, int | None]:
        start = self.pos
        end = self.pattern.index("}", self.pos)
        lo_text, comma, hi_text = self.pattern[self.pos + 1 : end].partition(",")
        self.pos = end + 1
        lo = int(lo_text) if lo_text else 0
        hi = (int(hi_text) if hi_text else None) if comma else lo
        if hi is not None and hi < lo:
            raise self.error(f"numbers out of order in {{{lo},{hi}}} quantifier", start)
        biggest = max(lo, hi or 0)
        if biggest > MAX_REPEAT:
            raise CompileLimitError("max_repeat", biggest, MAX_REPEAT, f"quantifier at offset {start}")
        return lo, hi

    def atom(self) -> tuple[Anchored, bool]:
        """One atom and whether a quantifier may follow it."""
        start = self.pos
        char = self.take()
        if char == "(":
            return self.group(start), True
        if char == "[":
            return _free(self.char_class(start)), True
        if char == ".":
            return _free(char_ranges([(0x0A, 0x0A)], negate=True)), True
        if char == "^":
            return {(True, False): EPS}, False
        if char == "$":
            return {(False, True): EPS}, False
        if char == "\\":
            return _free(self.escape(start)), True
        if char in "*+?":
            raise self.error("nothing to repeat", start)
        if char == "{" and self._quantifier_ahead_at(start):
            raise self.error("nothing to repeat", start)
        if char == ")":
            raise self.error("unbalanced ')'", start)
        # ']' '}' and a '{' that starts no quantifier are literals (ECMA-262 Annex B, as `regex` reads them).
        return _free(char_ranges([(ord(char), ord(char))])), True

    def _quantifier_ahead_at(self, position: int) -> bool:
        saved, self.pos = self.pos, position
        try:
            return self._quantifier_ahead()
        finally:
            self.pos = saved

    def group(self, start: int) -> Anchored:
        if self.peek() == "?":
            self.pos += 1
            kind = self.peek()
            if kind == ":":
                self.pos += 1
            elif kind in ("=", "!"):
                raise self.unsupported("lookahead", start, "a finite automaton cannot express lookarounds")
            elif self.startswith("<=") or self.startswith("<!"):
                raise self.unsupported("lookbehind", start, "a finite automaton cannot express lookarounds")
            elif kind in ("<", "P") and self._named_group():
                pass
            else:
                raise self.unsupported("inline flags or group extension", start, f"'(?{kind or ''}' is not ECMA-262")
        inner = self.alternation()
        if self.peek() != ")":
            raise self.error("missing ')': unterminated group", start)
        self.pos += 1
        return inner

    def _named_group(self) -> bool:
        """Consume ``<name>`` or ``P<name>`` of a named capture group; False if it is not one."""
        offset = 1 if self.peek() == "P" else 0
        if self.peek(offset) != "<":
            if offset and self.peek(1) in ("=", ">"):
                raise self.unsupported("backreference", self.pos - 2)
            return False
        end = self.pattern.find(">", self.pos)
        name = self.pattern[self.pos + offset + 1 : end] if end >= 0 else ""
        if not name.isidentifier():
            raise self.error("bad group name")
        self.pos = end + 1
        return True

    # -- escapes and classes

    def escape(self, start: int) -> Expr:
        """An escape outside a class (``self.pos`` is just past the backslash)."""
        char = self.peek()
        if char is None:
            raise self.error("bad escape (end of pattern)", start)
        if char in "bB":
            raise self.unsupported("word boundary", start, f"'\\{char}' is an assertion")
        if char.isdigit() and char != "0":
            raise self.unsupported("backreference", start)
        if char == "0" and self.peek(1) is not None and self.peek(1).isdigit():
            raise self.unsupported("backreference", start, "octal escapes are not ECMA-262")
        if char == "k" and self.peek(1) == "<":
            raise self.unsupported("backreference", start)
        if char in "AZzG":
            raise self.unsupported("anchor escape", start, f"'\\{char}' is not ECMA-262")
        ranges, negate = self.class_escape(start)
        return char_ranges(ranges, negate=negate)

    def class_escape(self, start: int) -> tuple[Ranges, bool]:
        """An escape standing for a set of code points: ``(ranges, negated)``."""
        char = self.take()
        sets = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
        if char.lower() in sets:
            return sets[char.lower()], char.isupper()
        if char in "pP":
            return self.property_escape(start), char == "P"
        code = self.escaped_code_point(char, start)
        return [(code, code)], False

    def property_escape(self, start: int) -> Ranges:
        if self.peek() != "{":
            raise self.error("expected '{' after \\p", start)
        end = self.pattern.find("}", self.pos)
        if end < 0:
            raise self.error("unterminated \\p{...}", start)
        name = self.pattern[self.pos + 1 : end]
        self.pos = end + 1
        try:
            return list(unicode_property_ranges(name))
        except ValueError:
            raise self.error(f"unknown Unicode property {name!r}", start) from None

    def escaped_code_point(self, char: str, start: int) -> int:
        """The code point of a single-character escape (``char`` is the letter after the backslash)."""
        if char in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[char]
        if char == "x":
            return self.hex_digits(2, start)
        if char == "u":
            if self.peek() == "{":
                end = self.pattern.find("}", self.pos)
                digits = self.pattern[self.pos + 1 : end] if end >= 0 else ""
                if not digits or not all(c in "0123456789abcdefABCDEF" for c in digits) or int(digits, 16) > MAX_CODE_POINT:
                    raise self.error("bad \\u{...} escape", start)
                self.pos = end + 1
                return int(digits, 16)
            code = self.hex_digits(4, start)
            if 0xD800 <= code <= 0xDBFF and self.startswith("\\u"):
                saved = self.pos
                self.pos += 2
                low = self.hex_digits(4, start)
                if 0xDC00 <= low <= 0xDFFF:  # a surrogate pair spelled as two escapes
                    return 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                self.pos = saved
            return code
        if char == "c":
            letter = self.peek()
            if letter is None or not ("a" <= letter.lower() <= "z"):
                raise self.error("bad \\c escape: expected a letter", start)
            self.pos += 1
            return ord(letter) % 32
        if char.isalnum() and char.isascii():
            raise self.error(f"bad escape \\{char}", start)
        return ord(char)  # identity escape: \. \/ \- \\ etc.

    def hex_digits(self, count: int, start: int) -> int:
        digits = self.pattern[self.pos : self.pos + count]
        if len(digits) != count or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise self.error(f"bad escape: expected {count} hex digits", start)
        self.pos += count
        return int(digits, 16)

    def char_class(self, start: int) -> Expr:
        """``[...]`` (``self.pos`` is just past ``[``)."""
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        ranges: Ranges = []
        excluded: list[Expr] = []  # negated escapes inside a class: [\D], [^\S]
        while True:
            if self.peek() is None:
                raise self.error("unterminated character set", start)
            if self.peek() == "]":
                self.pos += 1
                break
            item_start = self.pos
            low = self.class_atom(ranges, excluded)
            if low is None or self.peek() != "-" or self.peek(1) in (None, "]"):
                continue
            self.pos += 1  # the '-'
            high = self.class_atom(ranges, excluded)
            if high is None:
                raise self.error("bad character range: a class escape cannot be an endpoint", item_start)
            if high < low:
                raise self.error(f"bad character range {chr(low)!r}-{chr(high)!r}: out of order", item_start)
            ranges.append((low, high))
        positive = alt(char_ranges(ranges), *excluded) if ranges else alt(*excluded)
        if not negate:
            return positive
        if not excluded:
            return char_ranges(ranges, negate=True)
        return inter(any_char(), neg(positive))

    def class_atom(self, ranges: Ranges, excluded: list[Expr]) -> int | None:
        """One class member: returns its code point, or ``None`` when it was a set (added to ``ranges``
        or ``excluded``); a lone code point is *not* added, the caller adds it or a range."""
        start = self.pos
        char = self.take()
        if char != "\\":
            code = ord(char)
            if not (self.peek() == "-" and self.peek(1) not in (None, "]")):
                ranges.append((code, code))
            return code
        letter = self.peek()
        if letter is None:
            raise self.error("bad escape (end of pattern)", start)
        if letter == "b":  # backspace inside a class
            self.pos += 1
            code = 0x08
        elif letter.lower() in "dwsp":
            sets, negated = self.class_escape(start)
            if negated:
                excluded.append(char_ranges(sets, negate=True))
            else:
                ranges.extend(sets)
            return None
        elif letter.isdigit() and letter != "0":
            raise self.unsupported("backreference", start, "octal escapes are not ECMA-262")
        else:
            self.pos += 1
            code = self.escaped_code_point(letter, start)
        if not (self.peek() == "-" and self.peek(1) not in (None, "]")):
            ranges.append((code, code))
        return code


__all__ = ["MAX_REPEAT", "pattern_to_expr", "regex_to_expr", "unicode_property_ranges"]
