"""How busy each process kept a GPU, and the GPU itself, over a sweep's window: NVML's own figures
as nvml.h documents them, kept apart per process and per GPU.

Per process, `nvmlDeviceGetProcessUtilization(device, lastSeenTimeStamp)`: nvml.h says "One
utilization sample structure is returned per process running, that had some non-zero utilization
during the last sample period", with "the CPU timestamp at which the samples were recorded", and
"Set lastSeenTimeStamp to a timeStamp retrieved from a previous query to read utilization since
the previous query". So a process gets one sample, its `smUtil` the figure for the window, taken
as it comes (dcgm-exporter takes `smUtil` as it comes; go-nvml#51, nvtop#110 and nvitop#85 see one
sample per process on real GPUs). Summing samples per period, as an earlier model did, under-reads
by the number of periods in the window where NVML behaves as documented.

The window is tracked per process, from its own `timeStamp`: the call asks from the GPU's mark, or
from the older stamp of a process still running whose last sample lagged it (not cut out), and a
sample no newer than what that process already gave says nothing new. A process without a new
sample computed nothing (idle, 0). The first call on a GPU (from timestamp 0: "all the samples
maintained by the driver's internal sample buffer", a window of unknown length) only sets the
marks: the first sweep says nothing rather than something of no window. Values above 100 are
garbage the driver has been seen to give (2147483632: DCGM#83): dropped and counted, not clamped.

Per GPU, `nvmlDeviceGetSamples(GPU_UTILIZATION_SAMPLES, lastSeen)`: one sample per period, idle
ones included, averaged over the window; where it is not supported, `nvmlDeviceGetUtilizationRates`
(the last period's). This is the GPU's own busy figure: a container's duty (its processes' sum)
never exceeds it, and it is what the kubelet's `container_accelerator_duty_cycle` meant (cAdvisor
read `nvmlDeviceGetSamples` over 10 s for the whole GPU, for each container holding it).
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

from gpu_usage.nvml_codes import INSUFFICIENT_SIZE, NOT_FOUND, NOT_SUPPORTED, code_of

GPU_UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES
PERCENT_MAX = 100  # anything above is not a percentage: garbage


@dataclass
class Utilization:
    """One GPU's figures for one window."""

    by_pid: dict[int, float] = field(default_factory=dict)  # processes with a new sample
    dropped: set[int] = field(default_factory=set)  # processes whose sample was garbage
    busy: float | None = None  # the GPU's own percent busy, None where it is not known
    garbage: int = 0  # samples dropped for a value that is no percentage
    opening: bool = False  # the first window: marks set, nothing to say yet


class UtilizationWindows:
    """The marks between sweeps, per GPU and per process; `read` is one GPU's window."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._process_seen: dict[str, dict[int, int]] = {}  # GPU -> pid -> newest stamp, µs
        self._gpu_seen: dict[str, int] = {}  # GPU -> newest process stamp: new processes' start
        self._device_seen: dict[str, int] = {}  # GPU -> newest device sample, µs
        self._window_start: dict[str, int] = {}  # GPU -> where the last call asked from
        self.unsupported: set[str] = set()  # GPUs without per-process figures, for good

    def read(self, device: Any, gpu_uuid: str, running: Set[int]) -> Utilization | None:
        """The window since the last call for `gpu_uuid`; None where the GPU gives no
        per-process figures (older GPUs, MIG instances: asked once). `running`: the PIDs NVML
        lists on it now, whose marks are kept (the others' are forgotten). NVMLError escapes
        but for NOT_SUPPORTED and a race with a starting process."""
        if gpu_uuid in self.unsupported:
            return None
        opening = gpu_uuid not in self._gpu_seen
        try:
            samples = self._process_samples(device, gpu_uuid, running)
        except self.nvml.NVMLError as error:
            if code_of(error) == NOT_SUPPORTED:
                self.unsupported.add(gpu_uuid)
                return None
            if code_of(error) == INSUFFICIENT_SIZE:
                return Utilization(opening=True)  # still racing a starting process: next sweep
            raise
        figures = Utilization(opening=opening)
        seen = self._process_seen.setdefault(gpu_uuid, {})
        newest = self._gpu_seen.get(gpu_uuid, 0)
        for sample in samples:
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            newest = max(newest, stamp)
            if stamp <= seen.get(pid, -1):
                continue  # what this process already said
            seen[pid] = stamp
            if sample.smUtil > PERCENT_MAX:
                figures.garbage += 1
                figures.dropped.add(pid)  # unknown for this window, not idle
                continue
            figures.by_pid[pid] = float(sample.smUtil)
        for pid in set(seen) - set(running):
            del seen[pid]
        figures.busy = self._busy(device, gpu_uuid)
        # The GPU's mark: where a process that starts now is asked from. The device's samples
        # give one even while no process computes; until some stamp is known the GPU's window
        # stays opening (asked from the driver's whole buffer, said as nothing).
        newest = max(newest, self._device_seen.get(gpu_uuid, 0))
        if newest:
            self._gpu_seen[gpu_uuid] = newest
        if opening:
            figures.by_pid, figures.dropped, figures.busy = {}, set(), None
        return figures

    def _since(self, gpu_uuid: str, running: Set[int]) -> int:
        """Where the window starts: the GPU's mark, or earlier where a process still running
        gave its last sample before it (its samples lag the others': not cut out). Only marks
        from the last window count: an idle process's old mark would stretch everyone's window
        back to when it last computed. A GPU not asked before starts from 0."""
        floor = self._window_start.get(gpu_uuid, -1)
        seen = self._process_seen.get(gpu_uuid, {})
        marks = [mark for pid, mark in seen.items() if pid in running and mark > floor]
        since = min([*marks, self._gpu_seen.get(gpu_uuid, 0)])
        self._window_start[gpu_uuid] = since
        return since

    def _process_samples(self, device: Any, gpu_uuid: str, running: Set[int]) -> list[Any]:
        since = self._since(gpu_uuid, running)
        for attempt in (1, 2):
            try:
                return list(self.nvml.nvmlDeviceGetProcessUtilization(device, since))
            except self.nvml.NVMLError as error:
                if code_of(error) == NOT_FOUND:
                    return []  # no process was busy since `since`
                if code_of(error) == INSUFFICIENT_SIZE and attempt == 1:
                    continue  # a process started between the binding's two calls
                raise
        return []

    def _busy(self, device: Any, gpu_uuid: str) -> float | None:
        """The GPU's percent busy over the window: its samples' mean, idle periods included;
        None before a period has passed or where the GPU says nothing."""
        nvml = self.nvml
        try:
            _, samples = nvml.nvmlDeviceGetSamples(
                device, GPU_UTILIZATION_SAMPLES, self._device_seen.get(gpu_uuid, 0)
            )
        except nvml.NVMLError as error:
            if code_of(error) == NOT_FOUND:
                return None  # no period ended since the last sweep
            if code_of(error) != NOT_SUPPORTED:
                raise
            try:
                return float(nvml.nvmlDeviceGetUtilizationRates(device).gpu)
            except nvml.NVMLError as again:
                if code_of(again) == NOT_SUPPORTED:
                    return None
                raise
        values = [int(s.sampleValue.uiVal) for s in samples]
        if samples:
            self._device_seen[gpu_uuid] = max(int(s.timeStamp) for s in samples)
        kept = [v for v in values if v <= PERCENT_MAX]
        return sum(kept) / len(kept) if kept else None
