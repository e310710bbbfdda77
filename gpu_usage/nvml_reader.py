"""What NVML says of the node's GPUs and the processes on them, through nvidia-ml-py (`pynvml`).

One sweep reads, per GPU (per MIG instance where MIG is on): its UUID, model and memory; each
process on it (compute, MPS clients and graphics, as `nvidia-smi` lists them) with its PID as the
node sees it and the memory NVML counts for it (None where NVML cannot tell); how busy each
process kept it since the last sweep, and how busy it was itself (gpu_usage/nvml_utilization.py).
Older GPUs and MIG instances answer per-process utilization with NOT_SUPPORTED: memory is still
reported, utilization is None, and the question is not asked of that GPU again.

One GPU's fault is that GPU's: a GPU fallen off the bus (GPU_IS_LOST), a MIG instance the agent
may not read (NO_PERMISSION), a process that started between the binding's two calls
(INSUFFICIENT_SIZE: asked once more), a driver too old for the binding's process calls
(`NVMLLibraryMismatchError`, not an NVMLError) are said in `Sweep.faults` and the other GPUs are
read. A GPU's utilization is read apart from its processes and memory: its failure takes only
the duty cycle of that GPU away (a fault of figure "utilization"). An empty MIG slot is no fault.
Only what concerns the library as a whole stops the sweep: NVML uninitialised, no driver, no
library, a driver whose library is not the one loaded (LIB_RM_VERSION_MISMATCH).

LIB_RM_VERSION_MISMATCH means two things. After NVML has answered in this process it is a driver
upgrade: the binding keeps the library it loaded for the life of the process, so only a new
process reads the new driver (`DriverChanged`). At the first init it is a node whose driver
packages were upgraded without its kernel module being reloaded: the library the runtime mounts
is the new one, the module the old, and a new process would meet the same; it is reported (not
ready) and init is tried again on a slow back-off, which a reboot or a module reload ends.

`release_between_sweeps`: NVML is shut down after each sweep (each init then opens every GPU
again: on a node without persistence mode, seconds per GPU). Off by default: NVML is held, as
dcgm-exporter and the device plugin hold it, and released while the GPU Operator's driver manager
takes the driver off the node (gpu_usage/driver_pause.py).

Each GPU is read on a worker of its own (gpu_usage/gpu_workers.py): a call that hangs on one GPU
(fallen off the bus, in a reset) makes that GPU's fault `hung` after `gpu_timeout`, and the other
GPUs are read; the hung GPU is not asked again until its call returns.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_usage.gpu_workers import GpuWorkers
from gpu_usage.nvml_codes import (
    DRIVER_NOT_LOADED,
    INVALID_ARGUMENT,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    NOT_FOUND,
    NOT_SUPPORTED,
    UNINITIALIZED,
    code_of,
)
from gpu_usage.nvml_faults import (
    MISMATCH_AT_START,
    UTILIZATION,
    DriverChanged,
    Fault,
    NvmlUnavailable,
    fault_of,
    hung_fault,
    unavailable_message,
)
from gpu_usage.nvml_utilization import Utilization, UtilizationWindows

# What concerns the library, not one GPU.
_WHOLE = {UNINITIALIZED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, LIB_RM_VERSION_MISMATCH}
MIG_ENABLED = 1
# nvmlDeviceGetMigDeviceHandleByIndex on a slot with no instance: nvml.h names "NOT_FOUND if no
# valid MIG device was found at index" and "INVALID_ARGUMENT if device, index or migDevice
# reference is invalid"; dcgm-exporter skips both (internal/pkg/nvmlprovider/provider.go:
# `if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT { continue }`).
EMPTY_MIG_SLOT = {NOT_FOUND, INVALID_ARGUMENT}
# The first init's LIB_RM_VERSION_MISMATCH is tried again after these, doubling: only a reboot
# or a module reload mends it, and each refused init is also a line in the host's kernel log
# ("NVRM: API mismatch: the client has the version ...").
MISMATCH_RETRY_SECONDS = 30.0
MISMATCH_RETRY_MAX_SECONDS = 300.0
# How long a sweep waits for one GPU's calls (a sweep takes milliseconds; the agent's interval
# is 5 s by default): longer, the GPU is named hung and the others are read.
GPU_TIMEOUT_SECONDS = 4.0


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
    # An MPS client: its kernels run in the MPS server's context, whose PID carries the SM
    # samples, so NVML cannot tell this process's share of the GPU's time.
    mps_client: bool = False


@dataclass
class Sweep:
    gpus: list[Gpu]
    processes: list[GpuProcess]
    # (GPU UUID, PID) -> the percent of the window the SMs ran its kernels, as NVML gives it
    # (its one sample's smUtil); processes without a new sample are absent.
    sm_percent: dict[tuple[str, int], float] = field(default_factory=dict)
    gpu_busy: dict[str, float] = field(default_factory=dict)  # GPU UUID -> its own percent busy
    sm_dropped: set[tuple[str, int]] = field(default_factory=set)  # garbage: unknown this time
    utilization_unsupported: frozenset[str] = frozenset()  # GPU UUIDs, for good
    utilization_failed: set[str] = field(default_factory=set)  # GPU UUIDs, this sweep (faults)
    utilization_opening: set[str] = field(default_factory=set)  # first window: no figure yet
    garbage_samples: int = 0  # utilization samples dropped: a value that is no percentage
    faults: dict[str, Fault] = field(default_factory=dict)  # "GPU 3" or a UUID -> why
    nvml_seconds: float = 0.0
    init_seconds: float = 0.0  # NVML's init in this sweep (0 while it is held)

    def add(self, gpu_uuid: str, figures: Utilization | None) -> None:
        """One GPU's utilization (None: it gives none)."""
        if figures is None:
            return
        self.sm_percent.update({(gpu_uuid, pid): v for pid, v in figures.by_pid.items()})
        self.sm_dropped.update((gpu_uuid, pid) for pid in figures.dropped)
        if figures.busy is not None:
            self.gpu_busy[gpu_uuid] = figures.busy
        if figures.opening:
            self.utilization_opening.add(gpu_uuid)
        self.garbage_samples += figures.garbage

    def merge(self, part: Sweep) -> None:
        """Another GPU's reading into this sweep."""
        self.gpus.extend(part.gpus)
        self.processes.extend(part.processes)
        self.sm_percent.update(part.sm_percent)
        self.gpu_busy.update(part.gpu_busy)
        self.sm_dropped |= part.sm_dropped
        self.utilization_failed |= part.utilization_failed
        self.utilization_opening |= part.utilization_opening
        self.garbage_samples += part.garbage_samples
        self.faults.update(part.faults)

    def utilization_read(self, gpu_uuid: str) -> bool:
        """Whether this sweep has the GPU's per-process utilization (a process without a
        sample was then idle, not unknown)."""
        return gpu_uuid not in (
            self.utilization_unsupported | self.utilization_failed | self.utilization_opening
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    def __init__(
        self,
        nvml: Any = None,
        release_between_sweeps: bool = False,
        clock: Callable[[], float] = time.monotonic,
        gpu_timeout: float = GPU_TIMEOUT_SECONDS,
    ) -> None:
        """`nvml`: the binding (default: nvidia-ml-py's `pynvml`, imported on first use);
        `gpu_timeout`: how long a sweep waits for one GPU before naming it hung."""
        self._nvml = nvml
        self._clock = clock
        self._started = False
        self._worked = False  # NVML has answered once in this process
        # The first init's LIB_RM_VERSION_MISMATCH: when to try again, and the wait after that.
        self._mismatch_retry_at: float | None = None
        self._mismatch_wait = MISMATCH_RETRY_SECONDS
        self.release_between_sweeps = release_between_sweeps
        self._windows: UtilizationWindows | None = None
        self.gpu_timeout = gpu_timeout
        self.workers: GpuWorkers[Sweep] = GpuWorkers(clock)

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as error:
                raise NvmlUnavailable(unavailable_message(error)) from error
            self._nvml = pynvml
        return self._nvml

    @property
    def windows(self) -> UtilizationWindows:
        if self._windows is None:
            self._windows = UtilizationWindows(self.nvml)
        return self._windows

    def _mismatch(self) -> tuple[type[BaseException], ...]:
        found = getattr(self.nvml, "NVMLLibraryMismatchError", None)
        return (found,) if isinstance(found, type) else ()

    def start(self) -> None:
        if self._started:
            return
        now = self._clock()
        if self._mismatch_retry_at is not None and now < self._mismatch_retry_at:
            raise NvmlUnavailable(MISMATCH_AT_START)  # not asked again before its time
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as error:
            code = code_of(error)
            if self._worked and code in (
                LIB_RM_VERSION_MISMATCH,
                DRIVER_NOT_LOADED,
                LIBRARY_NOT_FOUND,
            ):
                raise DriverChanged(unavailable_message(error)) from error
            if code == LIB_RM_VERSION_MISMATCH:
                # Never answered in this process: the library is the one the node has now, so
                # a restart would meet the same; the binding keeps its library loaded, which a
                # module reload to its version lets init answer in this process.
                self._mismatch_retry_at = now + self._mismatch_wait
                self._mismatch_wait = min(2 * self._mismatch_wait, MISMATCH_RETRY_MAX_SECONDS)
                raise NvmlUnavailable(MISMATCH_AT_START) from error
            raise NvmlUnavailable(unavailable_message(error)) from error
        self._started = True
        self._mismatch_retry_at, self._mismatch_wait = None, MISMATCH_RETRY_SECONDS

    def stop(self) -> None:
        if self._started:
            self._started = False
            # A lost driver cannot be shut down cleanly; nothing is left to free then.
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()

    def sweep(self) -> Sweep:
        """One reading of every GPU; NVML is initialised first when it is not (at start, after a
        driver reload, or every sweep with `release_between_sweeps`)."""
        started = time.perf_counter()
        self.start()
        init_seconds = time.perf_counter() - started
        try:
            sweep = self._read()
        except self.nvml.NVMLError as error:
            self.stop()
            if code_of(error) == LIB_RM_VERSION_MISMATCH:
                raise DriverChanged(unavailable_message(error)) from error
            raise NvmlUnavailable(
                f"NVML lost the driver mid-sweep ({error}); initialising it again next time"
            ) from error
        finally:
            if self.release_between_sweeps:
                self.stop()
        self._worked = True
        # The init's time is NVML's: on a node without persistence mode it is most of it.
        sweep.nvml_seconds = time.perf_counter() - started
        sweep.init_seconds = init_seconds
        return sweep

    def _read(self) -> Sweep:
        sweep = Sweep([], [])
        count = self.nvml.nvmlDeviceGetCount()
        parts, hung = self.workers.run(range(count), self._read_gpu, self.gpu_timeout)
        for index in range(count):
            if index in parts:
                sweep.merge(parts[index])
            elif index in hung:
                sweep.faults[f"GPU {index}"] = hung_fault(hung[index])
        sweep.utilization_unsupported = frozenset(self.windows.unsupported)
        return sweep

    def _read_gpu(self, index: int) -> Sweep:
        """One GPU (or its MIG instances), on its own worker (gpu_usage/gpu_workers.py)."""
        nvml = self.nvml
        sweep = Sweep([], [])
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            devices = self._devices(handle, index)
        except nvml.NVMLError as error:
            if code_of(error) in _WHOLE:
                raise
            sweep.faults[f"GPU {index}"] = fault_of(error)
            return sweep
        for gpu, device in devices:
            try:
                processes = self._processes(device, gpu.uuid)
            except nvml.NVMLError as error:
                if code_of(error) in _WHOLE:
                    raise
                sweep.faults[gpu.uuid] = fault_of(error)
                continue
            except self._mismatch() as error:
                sweep.faults[gpu.uuid] = fault_of(error)
                continue
            sweep.gpus.append(gpu)
            sweep.processes.extend(processes)
            # Apart: the processes' memory stands whatever the utilization calls answer.
            try:
                running = {p.pid for p in processes}
                sweep.add(gpu.uuid, self.windows.read(device, gpu.uuid, running))
            except nvml.NVMLError as error:
                if code_of(error) in _WHOLE:
                    raise
                sweep.faults[gpu.uuid] = fault_of(error, UTILIZATION)
                sweep.utilization_failed.add(gpu.uuid)
            except self._mismatch() as error:
                sweep.faults[gpu.uuid] = fault_of(error, UTILIZATION)
                sweep.utilization_failed.add(gpu.uuid)
        return sweep

    def _devices(self, handle: Any, index: int) -> list[tuple[Gpu, Any]]:
        """The GPU itself, or its MIG instances when MIG is on."""
        nvml = self.nvml
        uuid, model = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
        try:
            mig_on = nvml.nvmlDeviceGetMigMode(handle)[0] == MIG_ENABLED
        except nvml.NVMLError as error:
            if code_of(error) != NOT_SUPPORTED:
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
                if code_of(error) in EMPTY_MIG_SLOT:
                    continue  # a slot without an instance; other answers are the GPU's fault
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
        mps: set[int] = set()
        names = (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",  # a process using both lists in both
        )
        for name in names:
            call = getattr(nvml, name, None)
            if call is None:
                continue
            try:
                listed = call(device)
            except nvml.NVMLError as error:
                if code_of(error) == NOT_SUPPORTED:
                    continue
                raise
            for process in listed:
                used = process.usedGpuMemory
                found.setdefault(int(process.pid), None if used is None else int(used))
                if "MPS" in name:
                    mps.add(int(process.pid))
        return [GpuProcess(pid, gpu_uuid, used, pid in mps) for pid, used in found.items()]
