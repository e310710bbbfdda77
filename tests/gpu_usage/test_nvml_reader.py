"""Reading NVML: processes and memory per GPU and per MIG instance, per-process utilization
where the GPU gives it, time-weighted over the GPU's own sample periods, and the faults a node
has, played per GPU and per call with the binding's own error classes: no driver, a driver
reload or upgrade, an older GPU or driver, a lost GPU, a MIG instance refused, a process
starting mid-call."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from gpu_usage.nvml_reader import DriverChanged, NvmlReader, NvmlUnavailable
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


def test_a_lost_gpu_is_that_gpus_fault_and_the_others_are_read() -> None:
    gpus = [FakeGpu(f"GPU-{n}", processes={100 + n: GIB}) for n in range(8)]
    gpus[3].faults["nvmlDeviceGetHandleByIndex"] = 15  # GPU_IS_LOST
    nvml = FakeNvml(gpus)
    reader = NvmlReader(nvml)
    for _ in range(2):
        sweep = reader.sweep()
        assert len(sweep.gpus) == 7 and 103 not in {p.pid for p in sweep.processes}
        assert sweep.faults["GPU 3"].reason == "gpu_lost"
        assert "drain the node" in sweep.faults["GPU 3"].message
    assert nvml.inits == 1  # not initialised again for one GPU's fault


def test_a_mig_instance_refused_is_its_own_fault() -> None:
    refused = FakeGpu(
        "MIG-1", processes={5: GIB}, faults={"nvmlDeviceGetComputeRunningProcesses": 4}
    )
    instances = [refused, FakeGpu("MIG-2", processes={6: GIB})]
    sweep = NvmlReader(FakeNvml([FakeGpu("GPU-p", mig=instances)])).sweep()
    assert [g.uuid for g in sweep.gpus] == ["MIG-2"]
    assert sweep.faults["MIG-1"].reason == "no_permission"


def test_a_process_starting_between_the_bindings_two_calls_is_asked_again() -> None:
    """nvidia-ml-py sizes the sample buffer by a first call; a process starting before the
    second gets INSUFFICIENT_SIZE."""
    gpu = FakeGpu("GPU-a", processes={1: GIB}, sm={1: 40}, fault_once=True)
    gpu.faults["nvmlDeviceGetProcessUtilization"] = 7
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    assert sweep.sm_percent == {("GPU-a", 1): 40.0} and sweep.faults == {}


def test_a_driver_older_than_the_bindings_process_calls_is_said() -> None:
    """`NVMLLibraryMismatchError` is not an NVMLError: it must not escape the sweep."""
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    old = FakeGpu("GPU-a", faults={"nvmlDeviceGetComputeRunningProcesses": "mismatch"})
    sweep = NvmlReader(FakeNvml([old, FakeGpu("GPU-b", processes={2: GIB})])).sweep()
    assert [g.uuid for g in sweep.gpus] == ["GPU-b"]
    assert sweep.faults["GPU-a"].reason == "old_driver" and "R510" in sweep.faults["GPU-a"].message


def test_a_new_driver_is_a_driver_change_whatever_call_says_it() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB})
    nvml = FakeNvml([gpu])
    reader = NvmlReader(nvml, release_between_sweeps=True)
    reader.sweep()
    nvml.init_error = 18  # LIB_RM_VERSION_MISMATCH: the library loaded is the old driver's
    with pytest.raises(DriverChanged, match="restarting"):
        reader.sweep()
    nvml.init_error = 9  # the module unloaded mid-upgrade, after it had answered
    with pytest.raises(DriverChanged):
        reader.sweep()
    nvml.init_error = None
    gpu.faults["nvmlDeviceGetMemoryInfo"] = 18  # said mid-sweep
    with pytest.raises(DriverChanged):
        reader.sweep()


def test_no_driver_at_start_is_not_a_driver_change() -> None:
    nvml = FakeNvml([])
    nvml.init_error = 9
    with pytest.raises(NvmlUnavailable) as raised:
        NvmlReader(nvml).sweep()
    assert not isinstance(raised.value, DriverChanged)  # waited for, not restarted


def test_released_between_sweeps_nothing_is_held_open() -> None:
    nvml = FakeNvml([FakeGpu("GPU-a", processes={1: GIB}, sm={1: 10})])
    reader = NvmlReader(nvml, release_between_sweeps=True)
    first = reader.sweep()
    assert not nvml.initialised and nvml.shutdowns == 1
    assert reader.sweep().sm_percent == first.sm_percent  # each window still its own
    assert (nvml.inits, nvml.shutdowns) == (2, 2)
    held = NvmlReader(nvml)
    held.sweep()
    held.sweep()
    assert nvml.initialised and nvml.inits == 3


def test_utilization_is_time_weighted_over_the_gpus_periods_idle_included() -> None:
    """NVML returns a process sample only for a period the process was busy: a process busy
    at 90 % in 2 of 6 periods kept the GPU 30 % busy, not 90 %."""
    gpu = FakeGpu("GPU-a", processes={1: GIB, 2: GIB}, sm={1: 90, 2: 20}, periods=6)
    gpu.busy_periods = {1: 2}
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    assert sweep.sm_percent == {("GPU-a", 1): 30.0, ("GPU-a", 2): 20.0}


def test_graphics_processes_and_mps_clients_are_listed() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB}, graphics={2: GIB}, mps_clients={3: 2 * GIB})
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    listed = {p.pid: (p.used_bytes, p.mps_client) for p in sweep.processes}
    assert listed == {1: (GIB, False), 2: (GIB, False), 3: (2 * GIB, True)}
