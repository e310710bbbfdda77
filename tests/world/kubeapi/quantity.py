"""``resource.ParseQuantity`` as apimachinery writes it, for the CEL library's quantity functions.

Written from ``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``parseQuantityString`` and
``suffixHandler.interpret``), step for step, so that it stays a second, independent reading of
the grammar next to the product's own parser (``webhooks/policies/quantity.py``). Values are exact
fractions. Known gaps: Go rounds values finer than a nano up to 1n and caps binary-SI values at
2^63-1; neither is modelled (the tests keep to values where they do not arise).
"""

from __future__ import annotations

from fractions import Fraction

_DIGITS = "0123456789"
_SUFFIX_CHARS = "eEinumkKMGTP"
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class QuantityError(ValueError):
    """ParseQuantity's errors, with its words."""


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: (positive, numerator, denominator, suffix)."""
    positive, pos, end = True, 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, num, denom, ""
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError("quantities must match the regular expression")
    return positive, num, denom, text[suffix_start:]


def _scale(suffix: str) -> Fraction:
    """``suffixHandler.interpret``: decimal SI, then binary SI, then a decimal exponent."""
    if suffix in _DECIMAL:
        return Fraction(10) ** _DECIMAL[suffix]
    if suffix in _BINARY:
        return Fraction(2) ** _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        exponent = suffix[1:]
        body = exponent[1:] if exponent[:1] in "+-" else exponent
        if body and all(c in _DIGITS for c in body) and abs(int(exponent)) < 2**63:
            return Fraction(10) ** int(exponent)
    raise QuantityError("unable to parse quantity's suffix")


def parse(text: str) -> Fraction:
    if not text:
        raise QuantityError("quantities must match the regular expression")
    positive, num, denom, suffix = _split(text)
    value = (Fraction(int(num)) + Fraction(int(denom or "0"), 10 ** len(denom))) * _scale(suffix)
    return value if positive else -value


def is_quantity(text: str) -> bool:
    try:
        parse(text)
    except QuantityError:
        return False
    return True


def as_int64(value: Fraction) -> int | None:
    """``Quantity.AsInt64``: the value when it is whole and fits int64."""
    if value.denominator == 1 and INT64_MIN <= value <= INT64_MAX:
        return value.numerator
    return None
