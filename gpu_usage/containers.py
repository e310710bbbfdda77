"""Per container and GPU: the sum of its processes' memory and utilization, its share, and its
peak since it started (pure). A container's duty is its processes' SM percents summed, never more
than the GPU's own busy figure for the same window (nor 100).

A container's processes come and go (a launcher, its workers); what the container uses of a GPU
is their sum. Its peak is kept under its runtime ID, so a restarted container (a new ID) starts
again from nothing, and is forgotten once the container has ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, replace

from gpu_usage.attribution import UsageRow
from gpu_usage.nvml_reader import Gpu


@dataclass(slots=True)
class ContainerUsage:
    """One sweep's; only `peak_bytes` is filled in after (Peaks.update)."""

    namespace: str
    pod: str
    container: str
    container_id: str
    gpu: Gpu
    used_bytes: int | None  # None where NVML could not tell a process's memory
    sm_percent: float | None  # None where NVML cannot tell its share (MIG, MPS, older GPUs)
    share_bytes: int | None
    preallocated: bool
    peak_bytes: int | None = None  # None while its memory has never been known
    pids: tuple[int, ...] = ()
    workload_kind: str = ""
    workload: str = ""
    gpu_busy: float | None = None  # the GPU's own percent busy over the window
    busy_seconds: float | None = None  # kept busy since it started (BusyTime fills it in)


def by_container(
    rows: Iterable[UsageRow], gpu_busy: Mapping[str, float] | None = None
) -> list[ContainerUsage]:
    """The rows of processes in pods, summed per container and GPU; `gpu_busy`: each GPU's own
    percent busy (gpu_usage/nvml_utilization.py), which caps its containers' duty."""
    gpu_busy = gpu_busy or {}
    sums: dict[tuple[str, str], ContainerUsage] = {}
    for row in rows:
        if not row.in_pod or not row.container_id:
            continue
        key = (row.container_id, row.gpu.uuid)
        seen = sums.get(key)
        used = row.used_bytes
        if seen is None:
            sums[key] = ContainerUsage(
                row.namespace,
                row.pod,
                row.container,
                row.container_id,
                row.gpu,
                used,
                row.sm_percent,
                row.share_bytes,
                row.preallocated,
                pids=(row.pid,),
                workload_kind=row.workload_kind,
                workload=row.workload,
                gpu_busy=gpu_busy.get(row.gpu.uuid),
            )
            continue
        sm = seen.sm_percent
        if row.sm_percent is not None:
            sm = (sm or 0.0) + row.sm_percent
        # One process's memory unknown: the container's is unknown, not a lower bound.
        total = None if used is None or seen.used_bytes is None else seen.used_bytes + used
        sums[key] = replace(seen, used_bytes=total, sm_percent=sm, pids=(*seen.pids, row.pid))
    for usage in sums.values():
        if usage.sm_percent is not None:
            # Processes' samples are taken at their own moments: their sum may pass what the
            # GPU itself was busy over the window, which bounds what any container kept it busy.
            cap = 100.0 if usage.gpu_busy is None else min(100.0, usage.gpu_busy)
            usage.sm_percent = min(cap, usage.sm_percent)
    return list(sums.values())


class Peaks:
    """The most each container has used of each GPU since it started."""

    def __init__(self) -> None:
        self._peak: dict[tuple[str, str], int] = {}

    def update(self, usage: list[ContainerUsage], running: Set[str] | None) -> list[ContainerUsage]:
        """`usage` with each peak filled in. `running`: the IDs of the node's running
        containers (None when the agent cannot list pods): a peak is forgotten once its
        container is neither using a GPU now nor running."""
        now = {(u.container_id, u.gpu.uuid) for u in usage}
        for key in list(self._peak):
            if key not in now and (running is None or key[0] not in running):
                del self._peak[key]
        filled = []
        for u in usage:
            key = (u.container_id, u.gpu.uuid)
            if u.used_bytes is not None:
                self._peak[key] = max(self._peak.get(key, 0), u.used_bytes)
            u.peak_bytes = self._peak.get(key)
            filled.append(u)
        return filled
