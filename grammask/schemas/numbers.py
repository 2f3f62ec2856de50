"""Numeric bounds as digit languages: exact integer ranges and decimal comparisons.

A digit language is a tuple of alternatives; an alternative is a tuple of :class:`Atom` (one
character from a range, optionally repeated any number of times). It says nothing about
automata: :func:`to_regex` renders one as a regex string (for tests and other backends) and the
fsm backend turns it into an expression.

Languages here are over the *digit strings* of JSON numbers in plain decimal form:
``nonneg_int_*`` describe integer parts (``0`` or no leading zero), ``frac_*`` describe fraction
digit strings (possibly empty, trailing zeros allowed), compared as ``0.F``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Atom:
    """One character in ``[lo, hi]``; ``star`` repeats it zero or more times."""

    lo: str
    hi: str
    star: bool = False


Alternative = tuple[Atom, ...]
DigitLanguage = tuple[Alternative, ...]

ANY_DIGIT = Atom("0", "9")
DIGITS = Atom("0", "9", star=True)


def _digit(d: str) -> Atom:
    return Atom(d, d)


def _word(text: str) -> Alternative:
    return tuple(_digit(c) for c in text)


def nonneg_int_at_least(n: int) -> DigitLanguage:
    """Integer parts (no leading zeros) whose value is ``>= n`` (``n >= 0``)."""
    if n <= 0:
        return ((Atom("0", "0"),), (Atom("1", "9"), DIGITS))
    text = str(n)
    alts: list[Alternative] = [(Atom("1", "9"),) + (ANY_DIGIT,) * len(text) + (DIGITS,)]  # longer
    alts.append(_word(text))
    for i, ch in enumerate(text):
        low = chr(ord(ch) + 1)
        if ch != "9":
            alts.append(_word(text[:i]) + (Atom(low, "9"),) + (ANY_DIGIT,) * (len(text) - i - 1))
    return tuple(alts)


def nonneg_int_at_most(n: int) -> DigitLanguage:
    """Integer parts (no leading zeros) whose value is ``<= n`` (``n >= 0``)."""
    if n < 0:
        return ()
    text = str(n)
    alts: list[Alternative] = [(Atom("0", "0"),)] if n >= 0 else []
    for length in range(1, len(text)):  # shorter numbers
        alts.append((Atom("1", "9"),) + (ANY_DIGIT,) * (length - 1))
    if n > 0:
        alts.append(_word(text))
        for i, ch in enumerate(text):
            first = "1" if i == 0 else "0"
            if ch > first:
                alts.append(_word(text[:i]) + (Atom(first, chr(ord(ch) - 1)),) + (ANY_DIGIT,) * (len(text) - i - 1))
    return tuple(alts)


def frac_at_least(digits: str) -> DigitLanguage:
    """Fraction digit strings ``F`` (possibly empty) with ``0.F >= 0.digits``."""
    digits = digits.rstrip("0")
    if not digits:
        return ((DIGITS,),)
    alts: list[Alternative] = [_word(digits) + (DIGITS,)]
    for i, ch in enumerate(digits):
        if ch != "9":
            alts.append(_word(digits[:i]) + (Atom(chr(ord(ch) + 1), "9"), DIGITS))
    return tuple(alts)


def frac_at_most(digits: str) -> DigitLanguage:
    """Fraction digit strings ``F`` (possibly empty) with ``0.F <= 0.digits``."""
    digits = digits.rstrip("0")
    alts: list[Alternative] = [_word(digits) + (Atom("0", "0", star=True),)]
    for i, ch in enumerate(digits):
        alts.append(_word(digits[:i]))  # a proper prefix: the rest reads as zeros
        if ch != "0":
            alts.append(_word(digits[:i]) + (Atom("0", chr(ord(ch) - 1)), DIGITS))
    return tuple(alts)


def split_decimal(value: Decimal) -> tuple[int, str]:
    """``|value|`` as (integer part, fraction digits without trailing zeros)."""
    text = format(abs(value), "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def to_regex(language: DigitLanguage) -> str:
    """An ECMA / Python regex for ``language`` (``(?!)`` when it is empty)."""
    if not language:
        return "(?!)"

    def atom(a: Atom) -> str:
        core = a.lo if a.lo == a.hi else f"[{a.lo}-{a.hi}]"
        return core + ("*" if a.star else "")

    return "|".join("".join(atom(a) for a in alt) or "" for alt in language)


def plain_decimal_regex() -> str:
    """JSON numbers in plain decimal form (no exponent): the number universe of the fsm backend."""
    return r"-?(0|[1-9][0-9]*)(\.[0-9]+)?"


def json_number_regex() -> str:
    """Every JSON number (RFC 8259)."""
    return r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"


__all__ = [
    "Atom",
    "DigitLanguage",
    "frac_at_least",
    "frac_at_most",
    "json_number_regex",
    "nonneg_int_at_least",
    "nonneg_int_at_most",
    "plain_decimal_regex",
    "split_decimal",
    "to_regex",
]
