"""The idle recording rule's series and how its history reads (pure): one derivation for
`gpu-admission usage --idle` and for the controller that announces and gives back idle GPUs.

`gpu_admission:workload_gpus_idle:1h` (manifests/components/monitoring/prometheusrule.yaml) has a
point each time the rule group runs while a workload is idle: every container of it holding a GPU
has used none of its GPUs for the rule's hour. A workload stops being idle for at least most of
that hour (a kernel's minute stays in the hour's maximum; a new pod or an agent back from an
outage needs 55 reported minutes), so the gaps between stretches are long, and a range read at a
step of a minute or less sees every one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

IDLE_RULE_GROUP = "gpu-admission.gpu-idle"  # the PrometheusRule's group that records it
IDLE_SERIES = "gpu_admission:workload_gpus_idle:1h"
IDLE_WINDOW_SECONDS = 3600  # the rule's window: a stretch began this long before its first point
MAX_POINTS = 10_000  # Prometheus refuses a range of more than 11,000 points a series
# A figure older than this is not "now": three of the rule group's minutes. The rule's series
# vanish at once when a workload stops being idle (Prometheus writes staleness markers for a
# rule's output that is gone); an old one means the rules are not being evaluated.
FRESH_SECONDS = 180

Points = Sequence[tuple[float, float]]


def range_step(period_seconds: float, finest: int = 60) -> int:
    """Points `finest` seconds apart, fewer for a period too long for that."""
    return max(finest, -(-int(period_seconds) // MAX_POINTS // finest) * finest)


@dataclass(frozen=True)
class Stretch:
    first: float  # the first point's time: named idle from then
    last: float
    gpus: float  # held at the last point
    gpu_hours: float  # held idle, the hour before the first point included

    @property
    def since(self) -> float:
        return self.first - IDLE_WINDOW_SECONDS


def stretches(points: Points, step: int) -> list[Stretch]:
    """The runs of points no more than a step and a half apart, each with its GPU-hours."""
    runs: list[list[tuple[float, float]]] = []
    for t, v in sorted(points):
        if runs and t - runs[-1][-1][0] <= step * 1.5:
            runs[-1].append((t, v))
        else:
            runs.append([(t, v)])
    return [
        Stretch(
            run[0][0],
            run[-1][0],
            run[-1][1],
            (run[0][1] * IDLE_WINDOW_SECONDS + sum(v for _, v in run[1:]) * step) / 3600,
        )
        for run in runs
    ]


def idle_throughout(points: Points, start: float, end: float, step: int) -> bool:
    """Whether a range read from `start` to `end` at `step` is one unbroken stretch covering
    both ends: the workload was idle all along."""
    runs = stretches(points, step)
    return (
        len(runs) == 1 and runs[0].first - start <= step * 1.5 and end - runs[0].last <= step * 1.5
    )


def workload_selector(namespace: str, kind: str, name: str) -> str:
    """The idle series of one workload, as PromQL selects it."""

    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return (
        f"{IDLE_SERIES}{{namespace={quoted(namespace)},workload_kind={quoted(kind)},"
        f"workload={quoted(name)}}}"
    )
