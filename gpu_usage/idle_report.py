"""What `gpu-admission usage --idle` prints, from the idle recording rule's history (pure).

`gpu_admission:workload_gpus_idle:1h` (manifests/components/monitoring/prometheusrule.yaml) has a
point each minute a workload is idle: every container of it holding a GPU has used none of its
GPUs for the rule's hour. Read as a range over the period, its points fall into stretches; a
stretch began IDLE_WINDOW_SECONDS before its first point (the hour that made it idle) and is
still on when its last point is the newest.

By workload: the workloads idle now, the GPUs they hold (a whole GPU 1, a replica its fraction, a
MIG slice its share), since when, and the GPU-hours held idle in the stretch so far. By
namespace: GPU-hours held idle over the period, every stretch of every workload summed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from gpu_usage.table import aligned
from gpu_usage.usage_report import csv_text

IDLE_SERIES = "gpu_admission:workload_gpus_idle:1h"
IDLE_WINDOW_SECONDS = 3600  # the rule's window: a stretch began this long before its first point
MAX_POINTS = 10_000  # Prometheus refuses a range of more than 11,000 points a series


Points = Sequence[tuple[float, float]]
Matrix = Sequence[tuple[Mapping[str, str], Points]]


def range_step(period_seconds: int) -> int:
    """Points a minute apart (the rule's own resolution), fewer for a period too long for that."""
    return max(60, -(-period_seconds // MAX_POINTS // 60) * 60)


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


@dataclass(frozen=True)
class IdleWorkload:
    namespace: str
    workload_kind: str
    workload: str
    gpus: float
    idle_since: str  # ISO 8601, UTC
    gpu_hours_idle: float


@dataclass(frozen=True)
class IdleNamespace:
    namespace: str
    workloads_idle_now: int
    gpu_hours_idle: float


def _now_on(stretch: Stretch, now: float, step: int) -> bool:
    return now - stretch.last <= step * 1.5


def idle_workloads(matrix: Matrix, now: float, step: int) -> list[IdleWorkload]:
    rows = []
    for labels, points in matrix:
        runs = stretches(points, step)
        if not runs or not _now_on(runs[-1], now, step):
            continue
        current = runs[-1]
        since = datetime.fromtimestamp(current.since, UTC).isoformat(timespec="seconds")
        rows.append(
            IdleWorkload(
                labels.get("namespace", ""),
                labels.get("workload_kind", ""),
                labels.get("workload", ""),
                current.gpus,
                since,
                current.gpu_hours,
            )
        )
    return sorted(rows, key=lambda r: (r.namespace, r.workload_kind, r.workload))


def idle_namespaces(matrix: Matrix, now: float, step: int) -> list[IdleNamespace]:
    hours: dict[str, float] = {}
    idle_now: dict[str, int] = {}
    for labels, points in matrix:
        namespace = labels.get("namespace", "")
        runs = stretches(points, step)
        hours[namespace] = hours.get(namespace, 0.0) + sum(r.gpu_hours for r in runs)
        now_on = bool(runs) and _now_on(runs[-1], now, step)
        idle_now[namespace] = idle_now.get(namespace, 0) + int(now_on)
    return [IdleNamespace(ns, idle_now[ns], hours[ns]) for ns in sorted(hours)]


def _gpus(value: float) -> str:
    return f"{value:g}"


def render_idle_workloads(rows: Sequence[IdleWorkload], output: str) -> str:
    if output == "json":
        return json.dumps([asdict(r) for r in rows], indent=2)
    if output == "csv":
        header = ["namespace", "workload_kind", "workload", "gpus", "idle_since", "gpu_hours_idle"]
        return csv_text(
            header,
            [
                (
                    r.namespace,
                    r.workload_kind,
                    r.workload,
                    _gpus(r.gpus),
                    r.idle_since,
                    f"{r.gpu_hours_idle:.4f}",
                )
                for r in rows
            ],
        )
    return aligned(
        ("NAMESPACE", "WORKLOAD", "GPUS", "IDLE SINCE", "GPU-HOURS IDLE"),
        [
            (
                r.namespace,
                f"{r.workload_kind}/{r.workload}",
                _gpus(r.gpus),
                r.idle_since,
                f"{r.gpu_hours_idle:.2f}",
            )
            for r in rows
        ],
    )


def render_idle_namespaces(rows: Sequence[IdleNamespace], output: str) -> str:
    if output == "json":
        return json.dumps([asdict(r) for r in rows], indent=2)
    if output == "csv":
        header = ["namespace", "workloads_idle_now", "gpu_hours_idle"]
        return csv_text(
            header,
            [(r.namespace, r.workloads_idle_now, f"{r.gpu_hours_idle:.4f}") for r in rows],
        )
    return aligned(
        ("NAMESPACE", "IDLE NOW", "GPU-HOURS IDLE"),
        [(r.namespace, str(r.workloads_idle_now), f"{r.gpu_hours_idle:.2f}") for r in rows],
    )
