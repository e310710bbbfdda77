"""Kubernetes resource quantities ("2", 2, "2000m", "1e3", "1Ki") as exact fractions.

GPU counts arrive as whatever the client sent: the API server keeps strings, offline review files
may hold numbers. Exact arithmetic means "2000m" is exactly 2 and "1500m" is not a whole number.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

# <sign><digits>[.<digits>] then a binary/decimal SI suffix or a decimal exponent (e3, E-2), as
# apimachinery's parseQuantityString reads it: every digit run may be empty ("." and "-" are 0,
# "k" is 0k), only the empty string itself is refused.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_INT64 = (-(2**63), 2**63 - 1)
_MAX_EXPONENT = 40  # beyond anything a resource count means


def parse_quantity(value: Any) -> Fraction | None:
    """The quantity's exact value, or None when it is not a Kubernetes quantity."""
    if isinstance(value, bool):  # JSON true/false is an int to Python, not a quantity
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if value == value and abs(value) != float("inf") else None
    if not isinstance(value, str):
        return None
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction | None:
    # Cached: the same few strings ("1", "4", node allocatable) come with every pod, and exact
    # Fraction arithmetic costs microseconds each on the admission hot path.
    match = _QUANTITY.fullmatch(value)
    if match is None or not value:
        return None
    fraction = match["fraction"] or ""
    number = Fraction(int(match["whole"] or 0)) + Fraction(int(fraction or 0), 10 ** len(fraction))
    if match["sign"] == "-":
        number = -number
    if match["exponent"] is not None:
        # apimachinery takes any exponent; clamping it keeps a hostile "1e999999" cheap and
        # keeps what the policies ask (sign, above 1, whole) exactly as the full value has it.
        exponent = int(match["exponent"])
        whole_digits, fraction_digits = len(match["whole"] or ""), len(fraction)
        exponent = max(
            -(_MAX_EXPONENT + whole_digits), min(exponent, _MAX_EXPONENT + fraction_digits)
        )
        return number * Fraction(10) ** exponent
    return number * _SUFFIXES[match["suffix"] or ""]


def is_int64(quantity: Fraction) -> bool:
    """A whole number within int64: CEL's `isInteger()` (Go's `Quantity.AsInt64`) for every
    value at or below 1 as the API server hands it on (its canonical form: `1000m` arrives as
    `1`). Above 1 they part (Go keeps `1Ei` as a big decimal, not an int64), which is why the
    policies ask it only of values at or below 1 (tests/real_api/test_cel_agreement.py)."""
    return quantity.denominator == 1 and _INT64[0] <= quantity <= _INT64[1]


def whole_count(value: Any) -> int | None:
    """The quantity as a whole count, or None when it is not a quantity or not a whole number."""
    quantity = parse_quantity(value)
    if quantity is None or quantity.denominator != 1:
        return None
    return quantity.numerator


def is_positive(value: Any) -> bool:
    quantity = parse_quantity(value)
    return quantity is not None and quantity > 0
