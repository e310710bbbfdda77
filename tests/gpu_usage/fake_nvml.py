"""A stand-in for nvidia-ml-py's `pynvml` module: the calls the agent makes, answering from a
table of GPUs and processes the test sets. Only the NVML boundary is played; its names and
signatures are checked against the real binding (test_fake_nvml_matches_the_binding), and its
errors are the binding's own classes: `NVMLError(code)` gives the subclass of that code
(`NVMLError_GpuIsLost`, ...) with the code in `.value`, and `NVMLLibraryMismatchError`, which is
not an NVMLError, where a driver is older than the binding's process calls.

Faults are played per GPU and per call: `FakeGpu.faults` maps a call's name to the code it
raises (or "mismatch"; or "hang", a call that returns only once `FakeNvml.unhang` is set), once
or for good.

Utilization is played as nvml.h documents it. Time passes a window at a time: each sweep's first
call (`nvmlDeviceGetCount`) ends a window of `window_periods` sample periods, and the driver keeps
what each GPU did in it: each process's SM percent (`FakeGpu.sm`) and the GPU's own
(`FakeGpu.busy`, else the processes' sum). `nvmlDeviceGetProcessUtilization(device,
lastSeenTimeStamp)` answers "One utilization sample structure ... per process running, that had
some non-zero utilization": one sample per process busy since the stamp, its `smUtil` the mean
over the windows since (idle ones as 0), its `timeStamp` when it was recorded (the window's end,
less `FakeGpu.lag_us` for a process whose samples lag), and 0 asks for the whole buffer.
`nvmlDeviceGetSamples` gives the GPU's own samples, one per period, idle ones too;
`nvmlDeviceGetUtilizationRates` the last period's. `FakeGpu.garbage` names processes whose
sample reads 2147483632, a value real drivers have given (DCGM#83).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any


def _binding() -> ModuleType:
    """nvidia-ml-py's module: as `pynvml` in a test, as `pynvml_real` where the agent's process
    imports this fake as `pynvml` (nvml_shim/)."""
    real = sys.modules.get("pynvml_real")
    if real is None:
        import pynvml as real  # nvidia-ml-py
    return real


_PYNVML = _binding()
NVMLError = _PYNVML.NVMLError
# From nvidia-ml-py 12.550 on; in 12.535 an older driver's missing call is an NVMLError
# (FUNCTION_NOT_FOUND), and the reader looks the class up the same way.
NVMLLibraryMismatchError = getattr(_PYNVML, "NVMLLibraryMismatchError", None)
SAMPLE_PERIOD_US = 166_667  # a sixth of a second: the shortest period nvml.h names


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * 1024**3
    reserved: int = 512 * 1024**2  # what the driver holds whatever runs
    # pid -> bytes (None: NVML says "not available"); pid -> its SM % over each window
    processes: dict[int, int | None] = field(default_factory=dict)
    sm: dict[int, int] = field(default_factory=dict)
    busy: int | None = None  # the GPU's own % in each period; None: the processes' sum
    lag_us: dict[int, int] = field(default_factory=dict)  # pid -> how far its stamp lags
    garbage: set[int] = field(default_factory=set)  # pids whose sample is no percentage
    graphics: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes
    mps_clients: dict[int, int | None] = field(default_factory=dict)  # pid -> bytes
    utilization_supported: bool = True
    # MIG instances in their slots, None for an empty slot (the list None: MIG off).
    mig: list[FakeGpu | None] | None = None
    # What an empty slot answers: NOT_FOUND or INVALID_ARGUMENT, both in nvml.h.
    empty_slot: int = 6
    # A call's name -> an NVML code to raise, or "mismatch"; `fault_once` clears it after.
    faults: dict[str, int | str] = field(default_factory=dict)
    fault_once: bool = False

    @property
    def used(self) -> int:
        tables = (self.processes, self.graphics, self.mps_clients)
        own = sum(v or 0 for table in tables for v in table.values())
        return self.reserved + own + sum(i.used for i in self.mig or [] if i is not None)

    @property
    def busy_now(self) -> int:
        return self.busy if self.busy is not None else min(100, sum(self.sm.values()))


@dataclass(frozen=True)
class Window:
    """What the driver kept of one GPU for one window."""

    end: int  # µs
    sm: dict[int, int]
    busy: int


class FakeNvml:
    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.initialised = False
        self.init_error: int | None = None  # raise this code from nvmlInit
        self.lose_driver = False  # calls after init answer GPU_IS_LOST
        self.inits = 0  # that succeeded
        self.init_attempts = 0
        self.shutdowns = 0
        self.clock = 1_700_000_000_000_000  # µs, as the driver stamps samples
        self.window_periods = 6  # a second at 1/6 s
        self.windows: dict[str, list[Window]] = {}  # GPU UUID -> the driver's buffer
        self.unhang = threading.Event()  # ends every "hang" fault's call
        self.hung_calls = 0

    def _live(self) -> None:
        if not self.initialised:
            raise NVMLError(1)
        if self.lose_driver:
            raise NVMLError(15)

    def _fault(self, handle: FakeGpu, call: str) -> None:
        code = handle.faults.get(call)
        if code is None:
            return
        if handle.fault_once:
            del handle.faults[call]
        if code == "hang":  # a GPU fallen off the bus: the call returns when the test says
            self.hung_calls += 1
            self.unhang.wait(60)
            return
        if code == "mismatch":
            assert NVMLLibraryMismatchError is not None, "this nvidia-ml-py has no such error"
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version "
                                           "does not match the NVML lib version.")  # fmt: skip
        raise NVMLError(code)

    def nvmlInit(self) -> None:
        self.init_attempts += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.initialised = False
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._live()
        self._end_window()
        return len(self.gpus)

    def _end_window(self) -> None:
        """A sweep's first call: the window since the last one ends now."""
        self.clock += self.window_periods * SAMPLE_PERIOD_US
        for gpu in self.gpus:
            kept = self.windows.setdefault(gpu.uuid, [])
            kept.append(Window(self.clock, dict(gpu.sm), gpu.busy_now))
            del kept[:-60]  # the driver's buffer is bounded too

    def _utilization_of(self, handle: FakeGpu) -> list[Window]:
        if not handle.utilization_supported or self._mig_related(handle):
            raise NVMLError(3)  # older GPUs, MIG: NOT_SUPPORTED
        return self.windows.get(handle.uuid, [])

    def _mig_related(self, handle: FakeGpu) -> bool:
        return handle.mig is not None or any(handle in (g.mig or []) for g in self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._live()
        handle = self.gpus[index]
        self._fault(handle, "nvmlDeviceGetHandleByIndex")
        return handle

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        if handle.mig is None:
            raise NVMLError(3)  # as on a GPU without MIG
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeGpu:
        self._live()
        self._fault(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        instances = handle.mig or []
        found = instances[index] if index < len(instances) else None
        if found is None:
            raise NVMLError(handle.empty_slot)
        return found

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: Any = None) -> SimpleNamespace:
        self._live()
        self._fault(handle, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(
            total=handle.total, used=handle.used, free=handle.total - handle.used
        )

    def _listed(self, handle: FakeGpu, call: str, table: dict[int, int | None]) -> list[Any]:
        self._live()
        self._fault(handle, call)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0, computeInstanceId=0)
            for pid, used in table.items()
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return self._listed(handle, "nvmlDeviceGetComputeRunningProcesses", handle.processes)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return self._listed(handle, "nvmlDeviceGetMPSComputeRunningProcesses", handle.mps_clients)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return self._listed(handle, "nvmlDeviceGetGraphicsRunningProcesses", handle.graphics)

    def nvmlDeviceGetProcessUtilization(self, handle: FakeGpu, timeStamp: int) -> list[Any]:
        """One sample per process busy since `timeStamp` (0: the whole buffer)."""
        self._live()
        self._fault(handle, "nvmlDeviceGetProcessUtilization")
        since = [w for w in self._utilization_of(handle) if w.end > timeStamp]
        samples = []
        for pid in sorted({pid for w in since for pid, sm in w.sm.items() if sm > 0}):
            last = max(w.end for w in since if w.sm.get(pid, 0) > 0)
            mean = sum(w.sm.get(pid, 0) for w in since) // len(since)
            stamp = last - handle.lag_us.get(pid, 0)
            if stamp <= timeStamp:
                continue
            value = 2147483632 if pid in handle.garbage else mean
            samples.append(
                SimpleNamespace(
                    pid=pid, timeStamp=stamp, smUtil=value, memUtil=0, encUtil=0, decUtil=0
                )
            )
        if not samples:
            raise NVMLError(6)  # NOT_FOUND: no process busy since timeStamp
        return samples

    def nvmlDeviceGetSamples(self, device: FakeGpu, sampling_type: int, timeStamp: int) -> Any:
        """The GPU's own samples since `timeStamp`, one per period, idle ones too."""
        self._live()
        self._fault(device, "nvmlDeviceGetSamples")
        samples = [
            SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=window.busy))
            for window in self._utilization_of(device)
            for stamp in range(
                window.end - (self.window_periods - 1) * SAMPLE_PERIOD_US,
                window.end + 1,
                SAMPLE_PERIOD_US,
            )
            if stamp > timeStamp
        ]
        if not samples:
            raise NVMLError(6)  # NOT_FOUND: no period ended since timeStamp
        return 1, samples  # NVML_VALUE_TYPE_UNSIGNED_INT

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        """The last period's: the GPU's and its memory's percent busy."""
        self._live()
        self._fault(handle, "nvmlDeviceGetUtilizationRates")
        kept = self._utilization_of(handle)
        return SimpleNamespace(gpu=kept[-1].busy if kept else 0, memory=0)
