"""Kubernetes quantity parsing for GPU counts."""

from fractions import Fraction

import pytest

from webhooks.policies.quantity import is_positive, parse_quantity, whole_count


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2", Fraction(2)),
        (2, Fraction(2)),
        ("2000m", Fraction(2)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("+1", Fraction(1)),
        ("1e3", Fraction(1000)),
        ("1E-2", Fraction(1, 100)),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1E", Fraction(10**18)),  # Exa, not an exponent
        ("0", Fraction(0)),
        (2.0, Fraction(2)),
    ],
)
def test_parses_kubernetes_quantities(raw: object, expected: Fraction) -> None:
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize(
    "raw", ["", "two", "1 ", "1.2.3", "1KiB", "1e", "--1", None, True, [1], {}]
)
def test_rejects_what_is_not_a_quantity(raw: object) -> None:
    assert parse_quantity(raw) is None


def test_a_huge_exponent_is_a_quantity_read_cheaply() -> None:
    # apimachinery accepts it; the value is clamped, still whole and far above any count.
    value = parse_quantity("1e99999999")
    assert value is not None and value.denominator == 1 and value > 10**30


@pytest.mark.parametrize(
    ("raw", "expected"), [("2", 2), ("2000m", 2), ("1500m", None), ("x", None), (3, 3)]
)
def test_whole_count(raw: object, expected: int | None) -> None:
    assert whole_count(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [("4", True), ("0", False), ("-1", False), (None, False)]
)
def test_is_positive(raw: object, expected: bool) -> None:
    assert is_positive(raw) is expected
