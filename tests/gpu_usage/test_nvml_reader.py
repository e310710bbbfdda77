"""Reading NVML: processes and memory per GPU and per MIG instance, per-process utilization
where the GPU gives it, as nvml.h documents it (one sample per process, its window tracked from
its own stamp, the first window said as nothing), the GPU's own busy figure, and the faults a node
has, played per GPU and per call with the binding's own error classes: no driver, a driver
reload or upgrade, an older GPU or driver, a lost GPU, a MIG instance refused, a process
starting mid-call."""

from __future__ import annotations

import ctypes
import inspect
import itertools
import re
import time

import pynvml
import pytest

from gpu_usage.nvml_faults import DriverChanged, NvmlUnavailable
from gpu_usage.nvml_reader import (
    MISMATCH_RETRY_MAX_SECONDS,
    MISMATCH_RETRY_SECONDS,
    NvmlReader,
    Sweep,
)
from tests.gpu_usage.fake_nvml import SAMPLE_PERIOD_US, FakeGpu, FakeNvml

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


# nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h), what the _v3 process calls fill:
#   typedef struct nvmlProcessInfo_v2_st {
#       unsigned int pid; unsigned long long usedGpuMemory;
#       unsigned int gpuInstanceId; unsigned int computeInstanceId;
#   } nvmlProcessInfo_v2_t, nvmlProcessInfo_t;
# with `#define nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v3`.
# Field name -> (offset, size) on a 64-bit build; 24 bytes in all (the last padded to 8).
PROCESS_INFO = {"pid": (0, 4), "usedGpuMemory": (8, 8), "gpuInstanceId": (16, 4)}
PROCESS_INFO |= {"computeInstanceId": (20, 4)}


def test_the_bindings_process_struct_is_nvml_hs() -> None:
    """The struct each process call of the installed binding sizes its array with is nvml.h's.
    nvidia-ml-py 12.535.77 gave it a fifth field, `usedGpuCcProtectedMemory` (32 bytes), which
    nvml.h's has not: the driver writes 24-byte entries, so every process after the first was
    read from the wrong place, its PID and memory mixed up. 12.535.108 went back to nvml.h's
    four fields, and is pyproject.toml's floor."""
    assert ctypes.sizeof(ctypes.c_void_p) == 8  # the offsets are a 64-bit build's
    calls = (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetMPSComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    )
    used: set[str] = set()
    for call in calls:  # the reader's calls, and the versioned one each of them makes
        for name in (call, f"{call}_v3", f"{call}_v2"):
            if hasattr(pynvml, name):
                used |= set(
                    re.findall(r"c_nvmlProcessInfo\w*", inspect.getsource(getattr(pynvml, name)))
                )
    assert used, "no process call names its struct"
    for name in sorted(used):
        struct = getattr(pynvml, name)
        fields = {
            f[0]: (getattr(struct, f[0]).offset, getattr(struct, f[0]).size)
            for f in struct._fields_
        }
        assert (fields, ctypes.sizeof(struct)) == (PROCESS_INFO, 24), name


def _second_sweep(reader: NvmlReader) -> Sweep:
    """The first window only sets the marks; the second has figures."""
    reader.sweep()
    return reader.sweep()


def test_a_sweep_lists_each_process_with_its_memory_and_utilization() -> None:
    gpu = FakeGpu("GPU-a", processes={101: 4 * GIB, 102: 2 * GIB}, sm={101: 33, 102: 25})
    reader = NvmlReader(FakeNvml([gpu]))
    first = reader.sweep()
    assert [(g.uuid, g.index, g.memory_used) for g in first.gpus] == [
        ("GPU-a", "0", 6 * GIB + 512 * 1024**2)
    ]
    assert {(p.pid, p.used_bytes) for p in first.processes} == {(101, 4 * GIB), (102, 2 * GIB)}
    # From timestamp 0 the driver averages its whole buffer, of a length nobody knows: nothing
    # is said of the first window, not even that the processes were idle.
    assert first.sm_percent == {} and first.gpu_busy == {}
    assert not first.utilization_read("GPU-a")
    sweep = reader.sweep()
    assert sweep.sm_percent == {("GPU-a", 101): 33.0, ("GPU-a", 102): 25.0}
    assert sweep.gpu_busy == {"GPU-a": 58.0} and sweep.utilization_read("GPU-a")


def test_each_process_gives_one_sample_taken_as_it_comes() -> None:
    """nvml.h: "One utilization sample structure is returned per process running": its smUtil is
    the window's figure. A model that summed samples and divided by the GPU's periods would read
    40 % over six periods as 6.7 %."""
    gpu = FakeGpu("GPU-a", processes={1: GIB}, sm={1: 40})
    nvml = FakeNvml([gpu])
    reader = NvmlReader(nvml)
    reader.sweep()
    nvml.window_periods = 30  # a 5 s interval
    assert reader.sweep().sm_percent == {("GPU-a", 1): 40.0}


def test_a_process_whose_samples_lag_is_not_cut_out() -> None:
    """Process 2's stamp lags process 1's by two periods: asking from the newest stamp seen
    would never return it again."""
    gpu = FakeGpu("GPU-a", processes={1: GIB, 2: GIB}, sm={1: 50, 2: 30})
    gpu.lag_us = {2: 2 * SAMPLE_PERIOD_US}
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    for _ in range(3):
        assert reader.sweep().sm_percent == {("GPU-a", 1): 50.0, ("GPU-a", 2): 30.0}


def test_a_process_that_stops_computing_reads_idle_and_its_old_mark_stretches_no_window() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB, 2: GIB}, sm={1: 50, 2: 30})
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    reader.sweep()
    gpu.sm = {1: 50}  # process 2 holds its memory and computes nothing
    for _ in range(3):
        sweep = reader.sweep()
        assert sweep.sm_percent == {("GPU-a", 1): 50.0}  # 2 absent: sampled, idle
        assert sweep.utilization_read("GPU-a")
    gpu.sm = {1: 50, 2: 30}
    assert reader.sweep().sm_percent == {("GPU-a", 1): 50.0, ("GPU-a", 2): 30.0}


def test_garbage_samples_are_dropped_and_counted_not_clamped() -> None:
    """2147483632 is what DCGM#83 saw NVML give; clamping it would report a busy GPU."""
    gpu = FakeGpu("GPU-a", processes={1: GIB, 2: GIB}, sm={1: 50, 2: 10}, garbage={2})
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    sweep = reader.sweep()
    assert sweep.sm_percent == {("GPU-a", 1): 50.0}
    assert sweep.garbage_samples == 1


def test_the_gpus_own_busy_figure_includes_idle_periods() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB}, sm={1: 90})
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    assert reader.sweep().gpu_busy == {"GPU-a": 90.0}
    gpu.sm = {}  # a window with nothing computed
    reader.sweep()
    gpu.sm = {1: 90}
    idle_then_busy = reader.sweep()
    assert idle_then_busy.gpu_busy == {"GPU-a": 90.0}  # each window its own
    gpu.busy = 45  # the GPU says otherwise than the processes' sum: its own figure wins
    assert reader.sweep().gpu_busy == {"GPU-a": 45.0}


def test_without_device_samples_the_last_periods_rate_stands_in() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB}, sm={1: 70}, faults={"nvmlDeviceGetSamples": 3})
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    assert reader.sweep().gpu_busy == {"GPU-a": 70.0}


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


@pytest.mark.parametrize("empty", [6, 2], ids=["NOT_FOUND", "INVALID_ARGUMENT"])
def test_an_empty_mig_slot_is_no_fault(empty: int) -> None:
    """Instances in slots 0 and 2, none in 1 (one destroyed): the slot is skipped, whichever of
    the two answers nvml.h names NVML gives for it, and the GPU is read."""
    instances: list[FakeGpu | None] = [
        FakeGpu("MIG-1", total=10 * GIB, processes={5: GIB}),
        None,
        FakeGpu("MIG-3", total=40 * GIB, processes={6: 3 * GIB}),
    ]
    parent = FakeGpu("GPU-p", mig=instances, empty_slot=empty)
    sweep = NvmlReader(FakeNvml([parent])).sweep()
    assert [(g.uuid, g.index) for g in sweep.gpus] == [("MIG-1", "0/0"), ("MIG-3", "0/2")]
    assert sweep.faults == {}


def test_a_mig_slot_refused_is_the_gpus_fault_and_says_what_it_needs() -> None:
    refused = FakeGpu("GPU-p", mig=[FakeGpu("MIG-1")])
    refused.faults["nvmlDeviceGetMigDeviceHandleByIndex"] = 4  # NO_PERMISSION
    sweep = NvmlReader(FakeNvml([refused, FakeGpu("GPU-b", processes={2: GIB})])).sweep()
    assert [g.uuid for g in sweep.gpus] == ["GPU-b"]
    fault = sweep.faults["GPU 0"]
    assert (fault.reason, fault.figure) == ("no_permission", "all")
    assert "MIG monitor capability" in fault.message


@pytest.mark.parametrize("call", ["nvmlDeviceGetProcessUtilization", "nvmlDeviceGetSamples"])
def test_a_utilization_error_keeps_the_gpus_processes_and_memory(call: str) -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB}, sm={1: 40}, faults={call: 999})  # UNKNOWN
    reader = NvmlReader(FakeNvml([gpu]))
    sweep = reader.sweep()
    assert [g.uuid for g in sweep.gpus] == ["GPU-a"]
    assert [(p.pid, p.used_bytes) for p in sweep.processes] == [(1, GIB)]
    fault = sweep.faults["GPU-a"]
    assert (fault.reason, fault.figure) == ("nvml_error", "utilization")
    assert sweep.sm_percent == {} and not sweep.utilization_read("GPU-a")
    del gpu.faults[call]  # its own sweep's: asked again, and read
    again = _second_sweep(reader)
    assert again.faults == {} and again.utilization_read("GPU-a")
    assert again.sm_percent == {("GPU-a", 1): 40.0}


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
    sweep = _second_sweep(NvmlReader(FakeNvml([gpu])))
    assert sweep.sm_percent == {} and sweep.utilization_read("GPU-a")
    assert sweep.gpu_busy == {"GPU-a": 0.0}
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
    reader = NvmlReader(FakeNvml([gpu]))
    reader.sweep()
    gpu.faults["nvmlDeviceGetProcessUtilization"] = 7
    sweep = reader.sweep()
    assert sweep.sm_percent == {("GPU-a", 1): 40.0} and sweep.faults == {}


def test_a_driver_older_than_the_bindings_process_calls_is_said() -> None:
    """`NVMLLibraryMismatchError` is not an NVMLError: it must not escape the sweep."""
    if not hasattr(pynvml, "NVMLLibraryMismatchError"):
        pytest.skip("nvidia-ml-py before 12.550 has no NVMLLibraryMismatchError")
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


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_mismatch_at_the_first_init_is_reported_and_tried_again_slowly() -> None:
    """Driver packages upgraded without a module reload: the library is newer than the kernel
    module from the start, and a new process would meet the same. Not a driver change (no
    exit): said in words, init asked again after 30 s, then 60, 120, at most every 300."""
    nvml = FakeNvml([FakeGpu("GPU-a", processes={1: GIB})])
    nvml.init_error = 18  # LIB_RM_VERSION_MISMATCH
    clock = Clock()
    reader = NvmlReader(nvml, release_between_sweeps=True, clock=clock)
    tried_at: list[float] = []
    while clock.now < 1000 + 900:
        before = nvml.init_attempts
        with pytest.raises(NvmlUnavailable) as raised:
            reader.sweep()
        assert not isinstance(raised.value, DriverChanged)
        assert "kernel module and its library" in str(raised.value)
        assert "Reboot the node, or reload" in str(raised.value)
        if nvml.init_attempts > before:
            tried_at.append(clock.now - 1000)
        clock.now += 5  # the agent's interval
    waits = [b - a for a, b in itertools.pairwise(tried_at)]
    assert waits[:4] == [MISMATCH_RETRY_SECONDS, 60, 120, 240]
    assert set(waits[4:]) == {MISMATCH_RETRY_MAX_SECONDS}
    nvml.init_error = None  # the module reloaded (or the node rebooted)
    clock.now += MISMATCH_RETRY_MAX_SECONDS
    assert [p.pid for p in reader.sweep().processes] == [1]
    assert [p.pid for p in reader.sweep().processes] == [1]  # and each sweep after


def test_no_driver_at_start_is_not_a_driver_change() -> None:
    nvml = FakeNvml([])
    nvml.init_error = 9
    with pytest.raises(NvmlUnavailable) as raised:
        NvmlReader(nvml).sweep()
    assert not isinstance(raised.value, DriverChanged)  # waited for, not restarted


def test_released_between_sweeps_nothing_is_held_open() -> None:
    nvml = FakeNvml([FakeGpu("GPU-a", processes={1: GIB}, sm={1: 10})])
    reader = NvmlReader(nvml, release_between_sweeps=True)
    reader.sweep()
    assert not nvml.initialised and nvml.shutdowns == 1
    assert reader.sweep().sm_percent == {("GPU-a", 1): 10.0}  # the marks outlive a release
    assert (nvml.inits, nvml.shutdowns) == (2, 2)
    held = NvmlReader(nvml)
    held.sweep()
    held.sweep()
    assert nvml.initialised and nvml.inits == 3


def test_graphics_processes_and_mps_clients_are_listed() -> None:
    gpu = FakeGpu("GPU-a", processes={1: GIB}, graphics={2: GIB}, mps_clients={3: 2 * GIB})
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    listed = {p.pid: (p.used_bytes, p.mps_client) for p in sweep.processes}
    assert listed == {1: (GIB, False), 2: (GIB, False), 3: (2 * GIB, True)}


def test_a_hung_gpu_is_named_and_the_others_are_read() -> None:
    """A call that hangs on GPU 1 (fallen off the bus) holds that GPU alone: the sweep names it
    hung after its deadline and reads GPU 0; it is not asked again while its call runs, and is
    read again once the call returns."""
    gpus = [FakeGpu("GPU-a", processes={1: GIB}), FakeGpu("GPU-b", processes={2: GIB})]
    gpus[1].faults["nvmlDeviceGetComputeRunningProcesses"] = "hang"
    gpus[1].fault_once = True
    nvml = FakeNvml(gpus)
    reader = NvmlReader(nvml, gpu_timeout=0.2)
    try:
        for _ in range(3):
            sweep = reader.sweep()
            assert [g.uuid for g in sweep.gpus] == ["GPU-a"]
            assert [p.pid for p in sweep.processes] == [1]
            fault = sweep.faults["GPU 1"]
            assert fault.reason == "hung" and "the other GPUs are read" in fault.message
        assert nvml.hung_calls == 1  # asked once, not piled on
    finally:
        nvml.unhang.set()
    deadline = time.monotonic() + 30
    while reader.workers.hung():
        assert time.monotonic() < deadline, "the hung call never returned"
        time.sleep(0.01)  # polling a condition, bounded by the deadline
    sweep = reader.sweep()
    assert [g.uuid for g in sweep.gpus] == ["GPU-a", "GPU-b"] and sweep.faults == {}
