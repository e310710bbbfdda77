"""What NVML says of the node's GPUs and the processes on them, through nvidia-ml-py (`pynvml`).

One sweep reads, per GPU (per MIG instance where MIG is on): its UUID, model and memory; each
process on it (compute, MPS clients and graphics, as `nvidia-smi` lists them) with its PID as the
node sees it and the memory NVML counts for it (None where NVML cannot tell); each process's SM
utilization samples since the last sweep, and the GPU's own utilization samples over the same
time (idle periods included: NVML returns a process sample only for a period in which that
process was busy). Older GPUs and MIG instances answer per-process utilization with
NOT_SUPPORTED: memory is still reported, utilization is None, and the question is not asked of
that GPU again.

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

`release_between_sweeps`: NVML is shut down after each sweep, so the agent holds no
`/dev/nvidia*` open between sweeps, which would keep the driver's module from unloading (the
GPU Operator's driver manager unloads it without asking who holds it).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# NVML return codes (nvml.h), by number, so the played binding in the tests needs only these.
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
# What concerns the library, not one GPU.
_WHOLE = {UNINITIALIZED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, LIB_RM_VERSION_MISMATCH}
MIG_ENABLED = 1
GPU_UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES
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
# What a Fault covers: the whole GPU (nothing of it read), or only its utilization.
ALL = "all"
UTILIZATION = "utilization"


class NvmlUnavailable(Exception):
    """NVML cannot be read on this node; the message says why and what to do."""


class DriverChanged(NvmlUnavailable):
    """The driver is not the one whose library this process loaded: only a new process reads it
    (the kubelet restarts the agent's container, with the library of the driver now loaded)."""


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


@dataclass(frozen=True)
class Fault:
    """Why one GPU was not read: `reason` short, for a metric's label; `message` for people."""

    reason: str  # gpu_lost, no_permission, old_driver, nvml_error
    message: str
    # ALL: the GPU was not read, its containers have no series; UTILIZATION: its processes and
    # memory were read, only the duty cycle of its containers is missing.
    figure: str = ALL


@dataclass
class Sweep:
    gpus: list[Gpu]
    processes: list[GpuProcess]
    # (GPU UUID, PID) -> its share of the window's sample periods the SMs ran its kernels,
    # percent: the sum of its samples over the GPU's samples in the window (idle included).
    sm_percent: dict[tuple[str, int], float] = field(default_factory=dict)
    utilization_unsupported: frozenset[str] = frozenset()  # GPU UUIDs, for good
    utilization_failed: set[str] = field(default_factory=set)  # GPU UUIDs, this sweep (faults)
    faults: dict[str, Fault] = field(default_factory=dict)  # "GPU 3" or a UUID -> why
    nvml_seconds: float = 0.0

    def utilization_read(self, gpu_uuid: str) -> bool:
        """Whether this sweep has the GPU's per-process utilization (a process without a
        sample was then idle, not unknown)."""
        return gpu_uuid not in self.utilization_unsupported and (
            gpu_uuid not in self.utilization_failed
        )


def _code(error: BaseException) -> int | None:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unavailable_message(error: BaseException) -> str:
    code = _code(error)
    if code == LIBRARY_NOT_FOUND or isinstance(error, (OSError, ImportError)):
        return (
            "NVML (libnvidia-ml.so.1) was not found: this node has no NVIDIA driver, or the "
            "agent's container does not get it. Run the agent on GPU nodes only, with the "
            "NVIDIA container runtime (runtimeClassName: nvidia where it is not the default)"
        )
    if code == DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded on this node (nvidia-smi says the same): load it"
    if code == LIB_RM_VERSION_MISMATCH:
        return (
            "the NVIDIA driver is not the one whose library this agent loaded (a driver "
            "upgrade): restarting to load the new one"
        )
    return f"NVML could not be initialised: {error}"


# The first init's LIB_RM_VERSION_MISMATCH: the same words at each try, so said once.
MISMATCH_AT_START = (
    "the NVIDIA driver's kernel module and its library (libnvidia-ml.so.1) are of different "
    'versions (LIB_RM_VERSION_MISMATCH; `nvidia-smi` on the node says "Driver/library version '
    'mismatch"): the driver was upgraded without its kernel module being reloaded. Reboot the '
    "node, or reload the NVIDIA kernel modules"
)


def _fault(error: BaseException, figure: str = ALL) -> Fault:
    code = _code(error)
    if code == GPU_IS_LOST:
        return Fault(
            "gpu_lost",
            "the GPU is lost (fallen off the bus, or being reset): `nvidia-smi` on the node "
            "says the same; drain the node and have the GPU checked",
            figure,
        )
    if code == NO_PERMISSION:
        return Fault(
            "no_permission",
            "NVML refuses the agent this device (no permission); on a MIG GPU, read as a "
            "non-root user, that may need the MIG monitor capability (docs/gpu-usage.md, MIG)",
            figure,
        )
    if code is None:  # NVMLLibraryMismatchError: the binding's process calls need R510+
        return Fault(
            "old_driver",
            f"the driver is older than this NVML binding's process calls need ({error}): "
            "upgrade the driver to R510 or later",
            figure,
        )
    return Fault("nvml_error", f"NVML answered {error}", figure)


class NvmlReader:
    def __init__(
        self,
        nvml: Any = None,
        release_between_sweeps: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`nvml`: the binding (default: nvidia-ml-py's `pynvml`, imported on first use)."""
        self._nvml = nvml
        self._clock = clock
        self._started = False
        self._worked = False  # NVML has answered once in this process
        # The first init's LIB_RM_VERSION_MISMATCH: when to try again, and the wait after that.
        self._mismatch_retry_at: float | None = None
        self._mismatch_wait = MISMATCH_RETRY_SECONDS
        self.release_between_sweeps = release_between_sweeps
        self._last_seen: dict[str, int] = {}  # GPU UUID -> newest process sample, µs
        self._device_seen: dict[str, int] = {}  # GPU UUID -> newest device sample, µs
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
            code = _code(error)
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
        self.start()
        started = time.perf_counter()
        try:
            sweep = self._read()
        except self.nvml.NVMLError as error:
            self.stop()
            if _code(error) == LIB_RM_VERSION_MISMATCH:
                raise DriverChanged(unavailable_message(error)) from error
            raise NvmlUnavailable(
                f"NVML lost the driver mid-sweep ({error}); initialising it again next time"
            ) from error
        finally:
            if self.release_between_sweeps:
                self.stop()
        self._worked = True
        sweep.nvml_seconds = time.perf_counter() - started
        return sweep

    def _read(self) -> Sweep:
        nvml = self.nvml
        sweep = Sweep([], [])
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                devices = self._devices(handle, index)
            except nvml.NVMLError as error:
                if _code(error) in _WHOLE:
                    raise
                sweep.faults[f"GPU {index}"] = _fault(error)
                continue
            for gpu, device in devices:
                try:
                    processes = self._processes(device, gpu.uuid)
                except nvml.NVMLError as error:
                    if _code(error) in _WHOLE:
                        raise
                    sweep.faults[gpu.uuid] = _fault(error)
                    continue
                except self._mismatch() as error:
                    sweep.faults[gpu.uuid] = _fault(error)
                    continue
                sweep.gpus.append(gpu)
                sweep.processes.extend(processes)
                # Apart: the processes' memory stands whatever the utilization calls answer.
                try:
                    sweep.sm_percent.update(self._utilization(device, gpu.uuid))
                except nvml.NVMLError as error:
                    if _code(error) in _WHOLE:
                        raise
                    sweep.faults[gpu.uuid] = _fault(error, UTILIZATION)
                    sweep.utilization_failed.add(gpu.uuid)
                except self._mismatch() as error:
                    sweep.faults[gpu.uuid] = _fault(error, UTILIZATION)
                    sweep.utilization_failed.add(gpu.uuid)
        sweep.utilization_unsupported = frozenset(self._no_utilization)
        return sweep

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
                if _code(error) in EMPTY_MIG_SLOT:
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
                if _code(error) == NOT_SUPPORTED:
                    continue
                raise
            for process in listed:
                used = process.usedGpuMemory
                found.setdefault(int(process.pid), None if used is None else int(used))
                if "MPS" in name:
                    mps.add(int(process.pid))
        return [GpuProcess(pid, gpu_uuid, used, pid in mps) for pid, used in found.items()]

    def _process_samples(self, device: Any, gpu_uuid: str) -> list[Any]:
        nvml = self.nvml
        for attempt in (1, 2):
            try:
                return list(
                    nvml.nvmlDeviceGetProcessUtilization(device, self._last_seen.get(gpu_uuid, 0))
                )
            except nvml.NVMLError as error:
                if _code(error) == NOT_FOUND:
                    return []  # no process was busy since the last sweep
                if _code(error) == INSUFFICIENT_SIZE and attempt == 1:
                    continue  # a process started between the binding's two calls
                raise
        return []

    def _device_periods(self, device: Any, gpu_uuid: str) -> int | None:
        """How many sample periods the GPU has had since the last sweep (idle ones too); None
        where it does not say (MIG instances)."""
        nvml = self.nvml
        try:
            _, samples = nvml.nvmlDeviceGetSamples(
                device, GPU_UTILIZATION_SAMPLES, self._device_seen.get(gpu_uuid, 0)
            )
        except nvml.NVMLError as error:
            if _code(error) == NOT_FOUND:
                return 0
            if _code(error) == NOT_SUPPORTED:
                return None
            raise
        stamps = [int(s.timeStamp) for s in samples]
        if stamps:
            self._device_seen[gpu_uuid] = max(stamps)
        return len(stamps)

    def _utilization(self, device: Any, gpu_uuid: str) -> dict[tuple[str, int], float]:
        if gpu_uuid in self._no_utilization:
            return {}
        try:
            samples = self._process_samples(device, gpu_uuid)
            periods = self._device_periods(device, gpu_uuid)
        except self.nvml.NVMLError as error:
            if _code(error) == NOT_SUPPORTED:
                self._no_utilization.add(gpu_uuid)
                return {}
            if _code(error) == INSUFFICIENT_SIZE:
                return {}  # still racing a starting process: next sweep
            raise
        if periods is None:
            self._no_utilization.add(gpu_uuid)
            return {}
        busy: dict[int, int] = defaultdict(int)
        newest = self._last_seen.get(gpu_uuid, 0)
        for sample in samples:  # a sample per busy process per period: hundreds a sweep
            busy[sample.pid] += sample.smUtil
            if sample.timeStamp > newest:
                newest = sample.timeStamp
        self._last_seen[gpu_uuid] = newest
        if not periods:
            return {}  # no period elapsed: nothing to say yet
        return {(gpu_uuid, pid): min(100.0, total / periods) for pid, total in busy.items()}
