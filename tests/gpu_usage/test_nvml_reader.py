"""Reading NVML: processes and memory per GPU and per MIG instance, per-process utilization
where the GPU gives it, and the faults a node has: no driver, a driver reload, an older GPU."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from gpu_usage.nvml_reader import NvmlReader, NvmlUnavailable
from tests.gpu_usage.fake_nvml import FakeGpu, FakeNvml

GIB = 1024**3


def test_fake_nvml_matches_the_binding() -> None:
    """Every call the fake answers exists in nvidia-ml-py with as many parameters, the same
    ones optional, so code that runs against the fake calls the real binding the same way (the
    reader passes them by position)."""
    for name, member in vars(FakeNvml).items():
        if not name.startswith("nvml"):
            continue
        real = list(inspect.signature(getattr(pynvml, name)).parameters.values())
        fake = list(inspect.signature(member).parameters.values())[1:]  # less self

        def optional(parameters: list[inspect.Parameter]) -> list[bool]:
            return [p.default is not inspect.Parameter.empty for p in parameters]

        assert optional(fake) == optional(real), name
    assert issubclass(pynvml.NVMLError_NotSupported, pynvml.NVMLError)
    assert pynvml.NVMLError(3).value == 3  # the code the reader reads


def test_a_sweep_lists_each_process_with_its_memory_and_utilization() -> None:
    gpu = FakeGpu("GPU-a", processes={101: 4 * GIB, 102: 2 * GIB}, sm={101: 33, 102: 25})
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    assert [(g.uuid, g.index, g.memory_used) for g in sweep.gpus] == [
        ("GPU-a", "0", 6 * GIB + 512 * 1024**2)
    ]
    assert {(p.pid, p.used_bytes) for p in sweep.processes} == {(101, 4 * GIB), (102, 2 * GIB)}
    assert sweep.sm_percent == {("GPU-a", 101): 33.0, ("GPU-a", 102): 25.0}


def test_utilization_not_supported_keeps_memory_and_is_not_asked_again() -> None:
    older = FakeGpu("GPU-old", processes={7: GIB}, sm={7: 50}, utilization_supported=False)
    nvml = FakeNvml([older])
    reader = NvmlReader(nvml)
    first = reader.sweep()
    assert first.utilization_unsupported == {"GPU-old"}
    assert [p.used_bytes for p in first.processes] == [GIB]
    older.utilization_supported = True  # were it asked again, it would now answer
    assert reader.sweep().sm_percent == {}


def test_mig_instances_are_read_one_by_one() -> None:
    instances = [
        FakeGpu("MIG-1", name="NVIDIA H100 MIG 1g.10gb", total=10 * GIB, processes={5: GIB}),
        FakeGpu("MIG-2", name="NVIDIA H100 MIG 3g.40gb", total=40 * GIB, processes={6: 3 * GIB}),
    ]
    sweep = NvmlReader(FakeNvml([FakeGpu("GPU-p", mig=instances)])).sweep()
    assert [(g.uuid, g.index, g.parent_uuid, g.memory_total) for g in sweep.gpus] == [
        ("MIG-1", "0/0", "GPU-p", 10 * GIB),
        ("MIG-2", "0/1", "GPU-p", 40 * GIB),
    ]
    assert {(p.pid, p.gpu_uuid) for p in sweep.processes} == {(5, "MIG-1"), (6, "MIG-2")}


def test_no_driver_is_one_clear_message() -> None:
    nvml = FakeNvml([])
    nvml.init_error = 12  # LIBRARY_NOT_FOUND: no libnvidia-ml.so.1
    with pytest.raises(NvmlUnavailable, match=r"no NVIDIA driver.*GPU nodes only"):
        NvmlReader(nvml).sweep()
    nvml.init_error = 9
    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        NvmlReader(nvml).sweep()


def test_a_driver_reload_initialises_nvml_again() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB})
    nvml = FakeNvml([gpu])
    reader = NvmlReader(nvml)
    reader.sweep()
    nvml.lose_driver = True
    with pytest.raises(NvmlUnavailable, match="initialising it again"):
        reader.sweep()
    nvml.lose_driver = False
    assert [p.pid for p in reader.sweep().processes] == [1]
    assert nvml.inits == 2


def test_idle_processes_have_no_sample() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB})  # no SM samples: NVML answers NOT_FOUND
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    assert sweep.sm_percent == {}
    assert sweep.utilization_unsupported == frozenset()
