"""A stand-in for nvidia-ml-py's `pynvml` module: the calls the agent makes, answering from a
table of GPUs and processes the test sets. Only the NVML boundary is played; its names and
signatures are checked against the real binding (test_fake_nvml_matches_the_binding).

Errors are raised as the binding raises them: `NVMLError(code)` with the code in `.value`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * 1024**3
    reserved: int = 512 * 1024**2  # what the driver holds whatever runs
    # pid -> bytes; pid -> SM %, one sample each per call
    processes: dict[int, int] = field(default_factory=dict)
    sm: dict[int, int] = field(default_factory=dict)
    utilization_supported: bool = True
    mig: list[FakeGpu] | None = None  # MIG instances, in their slots (None: MIG off)

    @property
    def used(self) -> int:
        own = sum(self.processes.values())
        return self.reserved + own + sum(i.used for i in self.mig or [])


class FakeNvml:
    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.initialised = False
        self.init_error: int | None = None  # raise this code from nvmlInit
        self.lose_driver = False  # the next call after init answers UNINITIALIZED
        self.inits = 0
        self.clock = 1000

    def _live(self) -> None:
        if not self.initialised:
            raise NVMLError(1)
        if self.lose_driver:
            raise NVMLError(15)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._live()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._live()
        return self.gpus[index]

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
        instances = handle.mig or []
        if index >= len(instances):
            raise NVMLError(6)  # an empty slot
        return instances[index]

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: Any = None) -> SimpleNamespace:
        self._live()
        return SimpleNamespace(
            total=handle.total, used=handle.used, free=handle.total - handle.used
        )

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        self._live()
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0, computeInstanceId=0)
            for pid, used in handle.processes.items()
        ]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        self._live()
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: FakeGpu, timeStamp: int) -> list[Any]:
        self._live()
        if not handle.utilization_supported or handle.mig is not None:
            raise NVMLError(3)
        if not handle.sm:
            raise NVMLError(6)  # no sample since timeStamp
        self.clock += 1
        return [
            SimpleNamespace(
                pid=pid, timeStamp=self.clock, smUtil=sm, memUtil=0, encUtil=0, decUtil=0
            )
            for pid, sm in handle.sm.items()
        ]
