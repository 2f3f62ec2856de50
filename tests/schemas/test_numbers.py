"""Digit languages for numeric bounds, checked with the regex module over exhaustive ranges."""

from __future__ import annotations

from decimal import Decimal

import pytest
import regex

from grammask.schemas import numbers as N


@pytest.mark.parametrize("bound", [0, 1, 7, 9, 10, 19, 99, 100, 101, 909, 1000, 4099])
def test_integer_bounds_are_exact(bound):
    at_least = regex.compile(N.to_regex(N.nonneg_int_at_least(bound)))
    at_most = regex.compile(N.to_regex(N.nonneg_int_at_most(bound)))
    for value in range(0, 12000):
        assert bool(at_least.fullmatch(str(value))) == (value >= bound), value
        assert bool(at_most.fullmatch(str(value))) == (value <= bound), value
    assert not at_least.fullmatch("01") and not at_most.fullmatch("00")


@pytest.mark.parametrize("digits", ["", "5", "05", "25", "999", "1001"])
def test_fraction_bounds_compare_as_decimals(digits):
    at_least = regex.compile(N.to_regex(N.frac_at_least(digits)))
    at_most = regex.compile(N.to_regex(N.frac_at_most(digits)))
    bound = Decimal("0." + (digits or "0"))
    for n in range(0, 2000):
        for width in (1, 2, 3, 4):
            text = str(n).zfill(width)
            if len(text) != width:
                continue
            value = Decimal("0." + text)
            assert bool(at_least.fullmatch(text)) == (value >= bound), text
            assert bool(at_most.fullmatch(text)) == (value <= bound), text
    assert bool(at_most.fullmatch("")) and bool(at_least.fullmatch("")) == (bound == 0)


def test_split_decimal_and_number_regexes():
    assert N.split_decimal(Decimal("-12.500")) == (12, "5")
    assert N.split_decimal(Decimal("1E+3")) == (1000, "")
    plain = regex.compile(N.plain_decimal_regex())
    assert plain.fullmatch("-0.50") and not plain.fullmatch("1e5") and not plain.fullmatch("01")
    assert regex.fullmatch(N.json_number_regex(), "-1.5E+10")
