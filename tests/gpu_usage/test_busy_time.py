"""The busy-seconds counter (gpu_usage/busy_time.py): every sweep's duty times its window,
summed, so a burst that a scrape of the duty gauge would miss still counts."""

from __future__ import annotations

from dataclasses import replace

from gpu_usage.busy_time import BusyTime
from gpu_usage.containers import ContainerUsage
from gpu_usage.nvml_reader import Gpu

GPU = Gpu("GPU-a", "NVIDIA H200", "0", 140 * 1024**3, 0)
BASE = ContainerUsage("ml", "nb-0", "main", "c1", GPU, 1, None, None, False)


def _sweep(busy: BusyTime, now: float, sm: float | None, cid: str = "c1") -> float | None:
    (usage,) = busy.update([replace(BASE, container_id=cid, sm_percent=sm)], now, {cid})
    return usage.busy_seconds


def test_each_sweep_adds_its_duty_times_its_window() -> None:
    busy = BusyTime()
    assert _sweep(busy, 100.0, 0.0) == 0.0  # the first sweep has no window behind it
    assert _sweep(busy, 100.5, 60.0) == 0.3  # a burst between two scrapes
    assert _sweep(busy, 101.0, 0.0) == 0.3
    assert _sweep(busy, 103.0, 50.0) == 1.3  # a longer window (a slow sweep) counts longer


def test_no_figure_is_no_series_not_zero() -> None:
    busy = BusyTime()
    _sweep(busy, 1.0, None)
    assert _sweep(busy, 2.0, None) is None  # a MIG instance, an MPS client


def test_a_restarted_container_starts_from_zero_and_an_ended_one_is_forgotten() -> None:
    busy = BusyTime()
    _sweep(busy, 1.0, 100.0)
    assert _sweep(busy, 2.0, 100.0) == 1.0
    assert _sweep(busy, 3.0, 100.0, cid="c2") == 1.0  # a new runtime ID: its own count
    assert busy.update([], 4.0, set()) == []
    assert _sweep(busy, 5.0, 0.0) == 0.0  # c1 was forgotten once it had ended
