"""How the idle rule's history reads (gpu_admission/gpus/idle_series.py): the controller gives
back only a workload idle all along since its announcement."""

from __future__ import annotations

from gpu_admission.gpus.idle_series import (
    IDLE_SERIES,
    idle_throughout,
    range_step,
    workload_selector,
)

START = 1_800_000_000.0


def _points(*offsets: range) -> list[tuple[float, float]]:
    return [(START + t, 1.0) for r in offsets for t in r]


def test_an_unbroken_stretch_covers_the_range() -> None:
    assert idle_throughout(_points(range(0, 1801)), START, START + 1800, 1)


def test_a_gap_a_late_start_or_an_early_end_is_not_idle_all_along() -> None:
    gap = _points(range(0, 600), range(700, 1801))
    assert not idle_throughout(gap, START, START + 1800, 1)
    assert not idle_throughout(_points(range(30, 1801)), START, START + 1800, 1)
    assert not idle_throughout(_points(range(0, 1700)), START, START + 1800, 1)
    assert not idle_throughout([], START, START + 1800, 1)


def test_the_finest_step_a_range_allows() -> None:
    assert range_step(1800, finest=1) == 1
    assert range_step(7 * 86400, finest=1) == 61  # 10,000 points at most
    assert range_step(7 * 86400) == 120  # usage --idle: whole minutes


def test_one_workloads_series_quoted_as_promql_wants() -> None:
    assert workload_selector("ml", "Deployment", 'a"b\\c') == (
        IDLE_SERIES + '{namespace="ml",workload_kind="Deployment",workload="a\\"b\\\\c"}'
    )
