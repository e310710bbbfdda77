"""What NVML says of the node's GPUs and the processes on them, through nvidia-ml-py (`pynvml`).

One sweep reads, per GPU (per MIG instance where MIG is on): its UUID, model and memory; each
compute process on it (including MPS clients) with its PID as the node sees it and the memory
NVML counts for it; and each process's SM utilization over the samples since the last sweep.
Older GPUs and MIG instances answer per-process utilization with NOT_SUPPORTED: memory is still
reported, utilization is None, and the question is not asked of that GPU again.

A driver reload (the library answers UNINITIALIZED, GPU_IS_LOST, DRIVER_NOT_LOADED or a
library/driver version mismatch) makes the reader shut NVML down; the next sweep initialises it
again. No library or no driver at all is `NvmlUnavailable`, with what to do.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

# NVML return codes (nvml.h), by number, so the fake binding in the tests needs only these.
NOT_SUPPORTED = 3
NOT_FOUND = 6
UNINITIALIZED = 1
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
_LOST = {UNINITIALIZED, DRIVER_NOT_LOADED, GPU_IS_LOST, LIB_RM_VERSION_MISMATCH}
MIG_ENABLED = 1


class NvmlUnavailable(Exception):
    """NVML cannot be read on this node; the message says why and what to do."""


@dataclass(frozen=True)
class Gpu:
    uuid: str  # a MIG instance's own `MIG-...` UUID where MIG is on
    model: str
    index: str  # "0", or "0/2" for MIG instance 2 of GPU 0
    memory_total: int  # bytes
    memory_used: int  # bytes, all of it: processes, contexts, the driver's reserve
    parent_uuid: str = ""  # the physical GPU of a MIG instance


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    gpu_uuid: str
    used_bytes: int | None  # None where NVML cannot tell (it says "not available")


@dataclass
class Sweep:
    gpus: list[Gpu]
    processes: list[GpuProcess]
    # (GPU UUID, PID) -> SM utilization, percent, over the samples since the last sweep.
    sm_percent: dict[tuple[str, int], float] = field(default_factory=dict)
    utilization_unsupported: frozenset[str] = frozenset()  # GPU UUIDs
    nvml_seconds: float = 0.0


def _code(error: Exception) -> int | None:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unavailable_message(error: Exception) -> str:
    code = _code(error)
    if code == LIBRARY_NOT_FOUND or isinstance(error, (OSError, ImportError)):
        return (
            "NVML (libnvidia-ml.so.1) was not found: this node has no NVIDIA driver, or the "
            "agent's container does not get it. Run the agent on GPU nodes only, with the "
            "NVIDIA container runtime (runtimeClassName: nvidia where it is not the default)"
        )
    if code == DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded on this node (nvidia-smi says the same): load it"
    return f"NVML could not be initialised: {error}"


class NvmlReader:
    def __init__(self, nvml: Any = None) -> None:
        """`nvml`: the binding (default: nvidia-ml-py's `pynvml`, imported on first use)."""
        self._nvml = nvml
        self._started = False
        self._last_seen: dict[str, int] = {}  # GPU UUID -> newest utilization sample, µs
        self._no_utilization: set[str] = set()

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as error:
                raise NvmlUnavailable(unavailable_message(error)) from error
            self._nvml = pynvml
        return self._nvml

    def start(self) -> None:
        if self._started:
            return
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as error:
            raise NvmlUnavailable(unavailable_message(error)) from error
        self._started = True
        self._last_seen.clear()

    def stop(self) -> None:
        if self._started:
            self._started = False
            # A lost driver cannot be shut down cleanly; nothing is left to free then.
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()

    def sweep(self) -> Sweep:
        """One reading of every GPU; NVML is initialised first when it is not (at start, or
        after a driver reload)."""
        self.start()
        started = time.perf_counter()
        try:
            sweep = self._read()
        except self.nvml.NVMLError as error:
            if _code(error) in _LOST:
                self.stop()
                raise NvmlUnavailable(
                    f"NVML lost the driver mid-sweep ({error}); initialising it again next time"
                ) from error
            raise NvmlUnavailable(
                f"NVML answered {error!r} while reading the GPUs; trying again next sweep"
            ) from error
        sweep.nvml_seconds = time.perf_counter() - started
        return sweep

    def _read(self) -> Sweep:
        nvml = self.nvml
        gpus: list[Gpu] = []
        processes: list[GpuProcess] = []
        sm: dict[tuple[str, int], float] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            for gpu, device in self._devices(handle, index):
                gpus.append(gpu)
                processes.extend(self._processes(device, gpu.uuid))
                sm.update(self._utilization(device, gpu.uuid))
        return Sweep(gpus, processes, sm, frozenset(self._no_utilization))

    def _devices(self, handle: Any, index: int) -> list[tuple[Gpu, Any]]:
        """The GPU itself, or its MIG instances when MIG is on."""
        nvml = self.nvml
        uuid, model = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
        try:
            mig_on = nvml.nvmlDeviceGetMigMode(handle)[0] == MIG_ENABLED
        except nvml.NVMLError as error:
            if _code(error) != NOT_SUPPORTED:
                raise
            mig_on = False
        if not mig_on:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            return [(Gpu(uuid, model, str(index), memory.total, memory.used), handle)]
        instances = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as error:
                if _code(error) == NOT_FOUND:
                    continue  # an empty slot
                raise
            memory = nvml.nvmlDeviceGetMemoryInfo(mig)
            gpu = Gpu(
                _text(nvml.nvmlDeviceGetUUID(mig)),
                _text(nvml.nvmlDeviceGetName(mig)),
                f"{index}/{slot}",
                memory.total,
                memory.used,
                parent_uuid=uuid,
            )
            instances.append((gpu, mig))
        return instances

    def _processes(self, device: Any, gpu_uuid: str) -> list[GpuProcess]:
        nvml = self.nvml
        found: dict[int, int | None] = {}
        calls = [nvml.nvmlDeviceGetComputeRunningProcesses]
        if hasattr(nvml, "nvmlDeviceGetMPSComputeRunningProcesses"):
            calls.append(nvml.nvmlDeviceGetMPSComputeRunningProcesses)
        for call in calls:
            try:
                listed = call(device)
            except nvml.NVMLError as error:
                if _code(error) == NOT_SUPPORTED:
                    continue
                raise
            for process in listed:
                used = process.usedGpuMemory
                found.setdefault(int(process.pid), None if used is None else int(used))
        return [GpuProcess(pid, gpu_uuid, used) for pid, used in found.items()]

    def _utilization(self, device: Any, gpu_uuid: str) -> dict[tuple[str, int], float]:
        if gpu_uuid in self._no_utilization:
            return {}
        nvml = self.nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(device, self._last_seen.get(gpu_uuid, 0))
        except nvml.NVMLError as error:
            if _code(error) == NOT_SUPPORTED:
                self._no_utilization.add(gpu_uuid)
                return {}
            if _code(error) == NOT_FOUND:
                return {}  # no sample since the last sweep: nothing ran
            raise
        by_pid: dict[int, list[int]] = defaultdict(list)
        for sample in samples:
            by_pid[int(sample.pid)].append(int(sample.smUtil))
            newest = max(self._last_seen.get(gpu_uuid, 0), int(sample.timeStamp))
            self._last_seen[gpu_uuid] = newest
        return {(gpu_uuid, pid): sum(v) / len(v) for pid, v in by_pid.items()}
