"""What `gpu-admission usage --idle` prints, from the idle recording rule's history (pure).

`gpu_admission:workload_gpus_idle:1h` has a point each minute a workload is idle
(gpu_admission/gpus/idle_series.py). Read as a range over the period, its points fall into
stretches; a stretch began IDLE_WINDOW_SECONDS before its first point (the hour that made it
idle) and is still on when its last point is the newest.

By workload: the workloads idle now, the GPUs they hold (a whole GPU 1, a replica its fraction, a
MIG slice its share), since when, and the GPU-hours held idle in the stretch so far. By
namespace: GPU-hours held idle over the period, every stretch of every workload summed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from gpu_admission.gpus.idle_series import (
    IDLE_SERIES,
    IDLE_WINDOW_SECONDS,
    Points,
    Stretch,
    range_step,
    stretches,
)
from gpu_usage.table import aligned
from gpu_usage.usage_report import csv_text

Matrix = Sequence[tuple[Mapping[str, str], Points]]

# What `usage --idle` reads, from the one place that derives it.
__all__ = ["IDLE_SERIES", "IDLE_WINDOW_SECONDS", "range_step", "stretches"]


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
