"""A stand-in for nvidia-ml-py's `pynvml` module: the calls the agent makes, answering from a
table of GPUs and processes the test sets. Only the NVML boundary is played; its names and
signatures are checked against the real binding (test_fake_nvml_matches_the_binding), and its
errors are the binding's own classes: `NVMLError(code)` gives the subclass of that code
(`NVMLError_GpuIsLost`, ...) with the code in `.value`, and `NVMLLibraryMismatchError`, which is
not an NVMLError, where a driver is older than the binding's process calls.

Faults are played per GPU and per call: `FakeGpu.faults` maps a call's name to the code it
raises (or "mismatch"), once or for good.
"""

from __future__ import annotations

import sys
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
    # pid -> bytes (None: NVML says "not available"); pid -> SM % in each busy period
    processes: dict[int, int | None] = field(default_factory=dict)
    sm: dict[int, int] = field(default_factory=dict)
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
    periods: int = 6  # sample periods between two sweeps (a second at 1/6 s)
    busy_periods: dict[int, int] = field(default_factory=dict)  # pid -> periods it was busy

    @property
    def used(self) -> int:
        tables = (self.processes, self.graphics, self.mps_clients)
        own = sum(v or 0 for table in tables for v in table.values())
        return self.reserved + own + sum(i.used for i in self.mig or [] if i is not None)


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
        self.clock = 1_000_000  # µs

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
        return len(self.gpus)

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
        """One sample per process per period it was busy, since `timeStamp` (the driver keeps
        only samples of busy processes)."""
        self._live()
        self._fault(handle, "nvmlDeviceGetProcessUtilization")
        if not handle.utilization_supported or handle.mig is not None:
            raise NVMLError(3)
        samples = []
        for pid, sm in handle.sm.items():
            busy = handle.busy_periods.get(pid, handle.periods)
            for period in range(busy):
                stamp = timeStamp + (period + 1) * SAMPLE_PERIOD_US
                samples.append(
                    SimpleNamespace(
                        pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0, encUtil=0, decUtil=0
                    )
                )
        if not samples:
            raise NVMLError(6)  # no sample since timeStamp
        return samples

    def nvmlDeviceGetSamples(self, device: FakeGpu, sampling_type: int, timeStamp: int) -> Any:
        """The GPU's own samples since `timeStamp`, one per period, idle ones too."""
        self._live()
        self._fault(device, "nvmlDeviceGetSamples")
        if device.mig is not None or not device.utilization_supported:
            raise NVMLError(3)
        start = max(timeStamp, self.clock)
        self.clock = start + device.periods * SAMPLE_PERIOD_US
        samples = [
            SimpleNamespace(
                timeStamp=start + (i + 1) * SAMPLE_PERIOD_US, sampleValue=SimpleNamespace(uiVal=0)
            )
            for i in range(device.periods)
        ]
        return 1, samples  # NVML_VALUE_TYPE_UNSIGNED_INT
