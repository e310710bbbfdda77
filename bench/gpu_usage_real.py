"""What NVML really says of each process's utilization, beside what the node agent makes of it.

    python -m bench.gpu_usage_real                    # GPU 0, 10 s per scenario
    python -m bench.gpu_usage_real --device 1 --seconds 20 --json gpu-usage-real.json

Needs an NVIDIA GPU, its driver (libcuda.so.1, libnvidia-ml.so.1) and nvidia-ml-py; says so and
stops (exit 2) without them. No framework: the load is a spin kernel in PTX, loaded through the
CUDA driver API with ctypes, so the figures depend on nothing but the driver.

Scenarios, each with its own processes on one GPU:
- `saturating`: one process launching spin kernels back to back on every SM;
- `time-sliced`: two such processes at once (the driver time-slices their contexts);
- `partial`: one process busy 10 ms of every 33 ms (about 30 % of the time);
- `idle`: one process holding a context and 1 GiB, computing nothing.

For each, over `--seconds`, once a second: NVML's raw per-process samples
(`nvmlDeviceGetProcessUtilization` from the last sample's stamp: how many samples per process per
call, their `smUtil`), the GPU's own samples (`nvmlDeviceGetSamples`), `nvidia-smi pmon`'s SM %
per process where `nvidia-smi` is installed, and the agent's figures (gpu_usage's NvmlReader, as
the agent sweeps: each process's duty and the GPU's busy figure). Then the costs: NVML's init and
shutdown, and a sweep with NVML held against one that initialises it (`--release-nvml`), with the
persistence mode the GPU is in. The other mode is measured only with `--toggle-persistence`,
which needs root and sets the mode back after: the GPU's settings are otherwise left as they are.
Never part of `make test`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

EXIT_NO_GPU = 2
GPU_UTILIZATION_SAMPLES = 1  # NVML_GPU_UTILIZATION_SAMPLES
SCENARIOS: dict[str, tuple[str, ...]] = {
    "saturating": ("spin",),
    "time-sliced": ("spin", "spin"),
    "partial": ("partial",),
    "idle": ("idle",),
}
# A kernel spinning on its SM's clock for `cycles`: PTX, which the driver compiles for its GPU.
SPIN_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(
    .param .u64 spin_param_0
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [spin_param_0];
    mov.u64 %rd2, %clock64;
$L_spin:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra $L_spin;
    ret;
}
"""
CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13  # kHz
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


class NoGpu(Exception):
    """No GPU to measure on; the message says what is missing."""


# ----------------------------------------------------------------------------- the load (child)
class Cuda:
    """The few CUDA driver calls the load needs."""

    def __init__(self, device: int) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise NoGpu(f"libcuda.so.1 cannot be loaded ({error}): no NVIDIA driver here") from None
        self._check(self.lib.cuInit(0), "cuInit")
        self.device = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(self.device), device), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(
            self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device),
            "cuDevicePrimaryCtxRetain",
        )
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def _check(self, result: int, call: str) -> None:
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(text))
            raise RuntimeError(f"{call}: CUDA error {result} ({(text.value or b'').decode()})")

    def attribute(self, which: int) -> int:
        value = ctypes.c_int()
        self._check(
            self.lib.cuDeviceGetAttribute(ctypes.byref(value), which, self.device),
            "cuDeviceGetAttribute",
        )
        return value.value

    def allocate(self, size: int) -> None:
        pointer = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "alloc")

    def spinner(self) -> Callable[[float], None]:
        """A function that keeps every SM busy for `seconds` and waits for it."""
        module, kernel = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.lib.cuModuleLoadData(ctypes.byref(module), SPIN_PTX), "load PTX")
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(kernel), module, b"spin"), "spin")
        blocks = 2 * self.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        cycles_per_second = 1000 * self.attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)

        def spin(seconds: float) -> None:
            cycles = ctypes.c_uint64(int(seconds * cycles_per_second))
            arguments = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(cycles), ctypes.c_void_p))
            self._check(
                self.lib.cuLaunchKernel(kernel, blocks, 1, 1, 128, 1, 1, 0, None, arguments, None),
                "cuLaunchKernel",
            )
            self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

        return spin


def load(kind: str, device: int, seconds: float) -> None:
    """A child process: `spin`, `partial` or `idle` on `device` for `seconds`; says `ready`."""
    cuda = Cuda(device)
    cuda.allocate(1024**3)
    spin = cuda.spinner()
    spin(0.01)  # compiled and launched once before the window opens
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kind == "spin":
            spin(0.005)
        elif kind == "partial":
            spin(0.010)
            time.sleep(0.023)  # the idle part of the duty cycle being measured
        else:
            time.sleep(0.1)  # holds its context and memory, computes nothing


# ------------------------------------------------------------------------ the probe (parent)
@dataclass
class ProcessFigures:
    role: str
    pid: int
    samples_per_call: list[int] = field(default_factory=list)
    nvml_sm: list[float] = field(default_factory=list)  # each raw sample's smUtil
    pmon_sm: list[float] = field(default_factory=list)
    agent_sm: list[float] = field(default_factory=list)


@dataclass
class ScenarioFigures:
    scenario: str
    processes: list[ProcessFigures]
    gpu_samples: list[float] = field(default_factory=list)  # nvmlDeviceGetSamples, each period
    agent_busy: list[float] = field(default_factory=list)


def pmon_sm(text: str, device: int) -> dict[int, list[float]]:
    """`nvidia-smi pmon -s u` output -> pid -> its SM % readings on `device` ('-' skipped)."""
    readings: dict[int, list[float]] = defaultdict(list)
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#") or len(fields) < 4:
            continue
        if not (fields[0].isdigit() and fields[1].isdigit()) or int(fields[0]) != device:
            continue
        if fields[3].replace(".", "", 1).isdigit():
            readings[int(fields[1])].append(float(fields[3]))
    return dict(readings)


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


@contextmanager
def _loads(
    roles: Sequence[str], device: int, seconds: float
) -> Iterator[list[subprocess.Popen[str]]]:
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.gpu_usage_real", "--load", role, "--device", str(device),
             "--seconds", str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]  # fmt: skip
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {roles} load did not start (exit {child.wait()})")
        yield children
    finally:
        for child in children:
            child.kill()
            child.wait()


def measure(nvml: Any, scenario: str, device: int, seconds: float) -> ScenarioFigures:
    from gpu_usage.nvml_reader import NvmlReader

    roles = SCENARIOS[scenario]
    handle = nvml.nvmlDeviceGetHandleByIndex(device)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    with _loads(roles, device, seconds + 5) as children:
        figures = ScenarioFigures(
            scenario, [ProcessFigures(r, c.pid) for r, c in zip(roles, children, strict=True)]
        )
        by_pid = {p.pid: p for p in figures.processes}
        pmon = None
        if shutil.which("nvidia-smi"):
            pmon = subprocess.Popen(
                ["nvidia-smi", "pmon", "-i", str(device), "-s", "u", "-d", "1",
                 "-c", str(int(seconds))],
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        reader = NvmlReader(nvml)  # the agent's own reading, held as it holds it
        reader.sweep()  # opens its windows
        # Both calls stamp with the same CPU clock (nvml.h: "CPU timestamp in microseconds"):
        # the GPU's newest sample is where the processes' first window starts too.
        _, first = nvml.nvmlDeviceGetSamples(handle, GPU_UTILIZATION_SAMPLES, 0)
        last = last_device = max((int(s.timeStamp) for s in first), default=0)
        for _ in range(int(seconds)):
            time.sleep(1.0)  # the window being measured
            counted: dict[int, int] = defaultdict(int)
            try:
                samples = nvml.nvmlDeviceGetProcessUtilization(handle, last)
            except nvml.NVMLError:
                samples = []  # NOT_FOUND: no process busy since `last`
            for sample in samples:
                counted[int(sample.pid)] += 1
                last = max(last, int(sample.timeStamp))
                if int(sample.pid) in by_pid:
                    by_pid[int(sample.pid)].nvml_sm.append(float(sample.smUtil))
            for process in figures.processes:
                process.samples_per_call.append(counted.get(process.pid, 0))
            try:
                _, periods = nvml.nvmlDeviceGetSamples(handle, GPU_UTILIZATION_SAMPLES, last_device)
            except nvml.NVMLError:
                periods = []
            for period in periods:
                figures.gpu_samples.append(float(period.sampleValue.uiVal))
                last_device = max(last_device, int(period.timeStamp))
            sweep = reader.sweep()
            for process in figures.processes:
                if (found := sweep.sm_percent.get((uuid, process.pid))) is not None:
                    process.agent_sm.append(found)
                elif sweep.utilization_read(uuid):
                    process.agent_sm.append(0.0)
            if (busy := sweep.gpu_busy.get(uuid)) is not None:
                figures.agent_busy.append(busy)
        reader.stop()
        if pmon is not None:
            text, _ = pmon.communicate(timeout=seconds + 30)
            for pid, readings in pmon_sm(text, device).items():
                if pid in by_pid:
                    by_pid[pid].pmon_sm.extend(readings)
    return figures


@dataclass
class Costs:
    persistence: str
    init_ms: list[float] = field(default_factory=list)
    held_sweep_ms: list[float] = field(default_factory=list)
    released_sweep_ms: list[float] = field(default_factory=list)


def costs(nvml: Any, device: int, rounds: int) -> Costs:
    from gpu_usage.nvml_reader import NvmlReader

    handle = nvml.nvmlDeviceGetHandleByIndex(device)
    mode = nvml.nvmlDeviceGetPersistenceMode(handle)
    measured = Costs("on" if mode == 1 else "off")
    nvml.nvmlShutdown()  # the probe's own hold, so each init below is a first one
    for _ in range(rounds):
        started = time.perf_counter()
        nvml.nvmlInit()
        measured.init_ms.append(1000 * (time.perf_counter() - started))
        nvml.nvmlShutdown()
    for release, into in ((False, measured.held_sweep_ms), (True, measured.released_sweep_ms)):
        reader = NvmlReader(nvml, release_between_sweeps=release)
        reader.sweep()
        for _ in range(rounds):
            started = time.perf_counter()
            reader.sweep()
            into.append(1000 * (time.perf_counter() - started))
        reader.stop()
    nvml.nvmlInit()
    return measured


def _set_persistence(nvml: Any, device: int, on: bool) -> None:
    nvml.nvmlDeviceSetPersistenceMode(nvml.nvmlDeviceGetHandleByIndex(device), 1 if on else 0)


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.1f}{unit}"


def report(scenarios: list[ScenarioFigures], measured: list[Costs]) -> list[str]:
    lines = [
        "scenario     role     pid      NVML samples/call  NVML smUtil  pmon SM  agent duty  "
        "GPU busy (samples / agent)",
    ]
    for s in scenarios:
        for p in s.processes:
            lines.append(
                f"{s.scenario:<12} {p.role:<8} {p.pid:<8} "
                f"{_cell(_mean(p.samples_per_call)):>17}  {_cell(_mean(p.nvml_sm), '%'):>11}  "
                f"{_cell(_mean(p.pmon_sm), '%'):>7}  {_cell(_mean(p.agent_sm), '%'):>10}  "
                f"{_cell(_mean(s.gpu_samples), '%')} / {_cell(_mean(s.agent_busy), '%')}"
            )
    lines.append("")
    lines.append("persistence  NVML init ms (median)  sweep held ms  sweep initialising ms")
    for c in measured:
        lines.append(
            f"{c.persistence:<12} {_cell(statistics.median(c.init_ms)):>21}  "
            f"{_cell(statistics.median(c.held_sweep_ms)):>13}  "
            f"{_cell(statistics.median(c.released_sweep_ms)):>21}"
        )
    return lines


def _nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        raise NoGpu("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NoGpu(f"NVML cannot be initialised ({error}): no NVIDIA driver or GPU here") from None
    return pynvml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_usage_real", description=__doc__)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0, help="per scenario")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=5, help="of each cost")
    parser.add_argument(
        "--toggle-persistence",
        action="store_true",
        help="also measure the costs in the other persistence mode (root; set back after)",
    )
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--load", choices=("spin", "partial", "idle"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.load:
            load(args.load, args.device, args.seconds)
            return 0
        nvml = _nvml()
    except NoGpu as error:
        print(f"no GPU to measure: {error}; run this on a GPU node", file=sys.stderr)
        return EXIT_NO_GPU
    scenarios = [
        measure(nvml, name, args.device, args.seconds) for name in args.scenario or SCENARIOS
    ]
    measured = [costs(nvml, args.device, args.rounds)]
    if args.toggle_persistence:
        was_on = measured[0].persistence == "on"
        _set_persistence(nvml, args.device, not was_on)
        try:
            measured.append(costs(nvml, args.device, args.rounds))
        finally:
            _set_persistence(nvml, args.device, was_on)
    print("\n".join(report(scenarios, measured)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"scenarios": [asdict(s) for s in scenarios],
                       "costs": [asdict(c) for c in measured]}, out, indent=1)  # fmt: skip
    nvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
