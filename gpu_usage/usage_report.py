"""What `gpu-admission usage` prints, from the recording rules' series (pure).

By workload: the most one of its containers used of a GPU model's memory over the period (its
peak), the share it is given now, the smallest share that holds the peak with headroom, and the
`nvidia.com/gpu.replicas` that share allows on each GPU model the agents have seen. A JAX pool
(preallocated) shows the pool, not the need: its row says so and sizes nothing.

By namespace: GPU-hours held (a whole GPU an hour is 1, a replica of four 0.25) and GPU
memory-hours used (GiB x hours), over the period.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from gpu_usage.table import aligned
from gpu_usage.units import GIB, MIB

HEADROOM = 0.10  # above the peak: allocator growth the window did not catch
GRANULARITY = 256 * MIB  # shares are given in whole MiB; sized in steps a person can read

# The recording rules (manifests/overlays/monitoring/prometheusrule.yaml), over `{since}`.
PEAK_QUERY = "max_over_time(gpu_admission:workload_gpu_memory_used_bytes:max5m[{since}])"
SHARE_QUERY = "max_over_time(gpu_admission:workload_gpu_memory_share_bytes:max[{since}])"
MODELS_QUERY = "max_over_time(gpu_admission:gpu_model_memory_total_bytes:max[{since}])"
GPUS_HELD = "gpu_admission:namespace_gpus_held:sum"
MEMORY_USED = "gpu_admission:namespace_gpu_memory_used_bytes:sum"

_DURATION = re.compile(r"^(?:\d+[smhdwy])+$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def checked_duration(text: str) -> str:
    """A Prometheus duration (`7d`, `1h30m`), or ValueError saying what one looks like."""
    if not _DURATION.match(text) or duration_seconds(text) == 0:
        raise ValueError(
            f"{text!r} is not a duration: write it as Prometheus does, e.g. 7d, 12h, 1h30m"
        )
    return text


def duration_seconds(text: str) -> int:
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in re.findall(r"(\d+)([smhdwy])", text))


def hours_query(series: str, since: str) -> str:
    """`series` integrated over the period, in hours: its value at each step summed, times the
    step. Steps of a minute (a sixtieth of the period when shorter than an hour), so a namespace
    holding GPUs for part of the period counts that part only (an average would count the whole
    period at the value it had while present)."""
    step = max(1, min(60, duration_seconds(since) // 60))
    return f"sum_over_time({series}[{since}:{step}s]) * {step} / 3600"


def needed_share(peak: float, headroom: float = HEADROOM) -> int:
    """The smallest share, in whole GRANULARITY steps, that holds `peak` with headroom."""
    return max(GRANULARITY, math.ceil(peak * (1 + headroom) / GRANULARITY) * GRANULARITY)


@dataclass(frozen=True)
class WorkloadRow:
    namespace: str
    workload_kind: str
    workload: str
    gpu_model: str
    peak_bytes: float
    share_bytes: float | None
    needed_bytes: int | None  # None for a JAX pool
    replicas: dict[str, int]  # GPU model -> replicas a GPU of it can hold at the needed share
    preallocated: bool


@dataclass(frozen=True)
class NamespaceRow:
    namespace: str
    gpu_hours: float
    gpu_memory_gib_hours: float


Vector = Sequence[tuple[Mapping[str, str], float]]


def workload_rows(peaks: Vector, shares: Vector, models: Vector) -> list[WorkloadRow]:
    totals = {labels.get("gpu_model", ""): value for labels, value in models}
    given = {
        (m["namespace"], m["workload_kind"], m["workload"], m.get("gpu_model", "")): value
        for m, value in shares
    }
    rows = []
    for labels, peak in peaks:
        key = (labels["namespace"], labels["workload_kind"], labels["workload"])
        model = labels.get("gpu_model", "")
        pool = labels.get("preallocated") == "true"
        needed = None if pool else needed_share(peak)
        replicas = {} if needed is None else {m: int(t // needed) for m, t in totals.items()}
        rows.append(
            WorkloadRow(*key, model, peak, given.get((*key, model)), needed, replicas, pool)
        )
    return sorted(rows, key=lambda r: (r.namespace, r.workload, r.gpu_model))


def namespace_rows(gpu_hours: Vector, memory_hours: Vector) -> list[NamespaceRow]:
    memory = {labels["namespace"]: value for labels, value in memory_hours}
    held = {labels["namespace"]: value for labels, value in gpu_hours}
    return [
        NamespaceRow(ns, held.get(ns, 0.0), memory.get(ns, 0.0) / GIB)
        for ns in sorted(set(held) | set(memory))
    ]


def _size(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / MIB:,.0f} MiB"


def _replicas(row: WorkloadRow) -> str:
    if row.preallocated:
        return "JAX pool: set XLA_PYTHON_CLIENT_PREALLOCATE=false to measure the need"
    fits = [f"{m}: {n}" for m, n in sorted(row.replicas.items())]
    return ", ".join(fits) or "no GPU model seen"


def csv_text(header: Sequence[str], lines: Sequence[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(lines)
    return out.getvalue().rstrip("\n")


def render_workloads(rows: Sequence[WorkloadRow], output: str) -> str:
    if output == "json":
        return json.dumps([asdict(r) for r in rows], indent=2)
    if output == "csv":
        header = ["namespace", "workload_kind", "workload", "gpu_model", "peak_bytes"]
        header += ["share_bytes", "needed_bytes", "replicas", "preallocated"]
        return csv_text(
            header,
            [
                (
                    r.namespace,
                    r.workload_kind,
                    r.workload,
                    r.gpu_model,
                    int(r.peak_bytes),
                    "" if r.share_bytes is None else int(r.share_bytes),
                    "" if r.needed_bytes is None else r.needed_bytes,
                    ";".join(f"{m}={n}" for m, n in sorted(r.replicas.items())),
                    str(r.preallocated).lower(),
                )
                for r in rows
            ],
        )
    header = ("NAMESPACE", "WORKLOAD", "GPU MODEL", "PEAK", "SHARE NOW", "NEEDS", "REPLICAS")
    return aligned(
        header,
        [
            (
                r.namespace,
                f"{r.workload_kind}/{r.workload}",
                r.gpu_model,
                _size(r.peak_bytes),
                _size(r.share_bytes),
                _size(r.needed_bytes),
                _replicas(r),
            )
            for r in rows
        ],
    )


def render_namespaces(rows: Sequence[NamespaceRow], output: str) -> str:
    if output == "json":
        return json.dumps([asdict(r) for r in rows], indent=2)
    if output == "csv":
        header = ["namespace", "gpu_hours", "gpu_memory_gib_hours"]
        return csv_text(
            header,
            [(r.namespace, f"{r.gpu_hours:.4f}", f"{r.gpu_memory_gib_hours:.4f}") for r in rows],
        )
    return aligned(
        ("NAMESPACE", "GPU-HOURS", "GPU-MEMORY GIB-HOURS"),
        [(r.namespace, f"{r.gpu_hours:.2f}", f"{r.gpu_memory_gib_hours:.2f}") for r in rows],
    )
