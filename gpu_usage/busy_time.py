"""Seconds each container has kept each GPU busy, summed sweep after sweep (pure): the counter
`gpu_admission_container_gpu_busy_seconds_total`.

A gauge of the last sweep's duty cycle is seen only by a scrape that falls before the next
sweep: with sweeps more often than scrapes, a burst shorter than a scrape interval is missed
(found on the idle rules' journey: a workload busy every other sweep read as idle, every scrape
landing on a quiet sweep). A counter keeps every burst: Prometheus's rate() over any range sees
what was done in it, whenever it scrapes, and however many Prometheus replicas scrape the agent.

Each sweep adds, per container and GPU, its duty (percent of the window since the last sweep)
times that window's length. A container's total is kept under its runtime ID, so a restarted
container (a new ID) starts again from 0, as counters do, and is forgotten once it has ended.
"""

from __future__ import annotations

from collections.abc import Set

from gpu_usage.containers import ContainerUsage


class BusyTime:
    def __init__(self) -> None:
        self._seconds: dict[tuple[str, str], float] = {}
        self._last_sweep: float | None = None

    def update(
        self, usage: list[ContainerUsage], now: float, running: Set[str] | None
    ) -> list[ContainerUsage]:
        """`usage` of the sweep at `now` (monotonic seconds), with each total filled in.
        `running`: the node's running containers' IDs (None while pods cannot be listed)."""
        window = None if self._last_sweep is None else max(0.0, now - self._last_sweep)
        self._last_sweep = now
        current = {(u.container_id, u.gpu.uuid) for u in usage}
        for key in list(self._seconds):
            if key not in current and (running is None or key[0] not in running):
                del self._seconds[key]
        for u in usage:
            if u.sm_percent is None:
                continue  # NVML cannot tell its share here: no figure, not 0
            key = (u.container_id, u.gpu.uuid)
            added = u.sm_percent / 100 * window if window is not None else 0.0
            self._seconds[key] = self._seconds.get(key, 0.0) + added
            u.busy_seconds = self._seconds[key]
        return usage
