"""nvidia-ml-py's `pynvml` played for an agent process a test starts: put this folder and the
folder of fake_nvml.py first on PYTHONPATH (in a pod: both files in one mounted folder) and name
a JSON file in GPU_USAGE_FAKE_NVML. Each sweep reads the file again, so a test changes what the
GPUs hold by rewriting it. A GPU's processes are given by PID, or by marker: a word in a
process's command line, found in /proc as the driver names GPU processes by their PID on the
node (the agent runs with hostPID), so the agent gets the PIDs of real containers:

    {"gpus": [{"uuid": "GPU-a", "name": "NVIDIA H200", "total": 150754820096,
               "processes": {"1234": 3221225472}, "sm": {"1234": 40},
               "markers": {"gpu-tenant-train": 8589934592}}]}

The calls and their answers are fake_nvml.py's (checked against the real binding's signatures
in tests/gpu_usage/test_nvml_reader.py). Marked processes compute at 50 % SM. A process's memory
or SM may be a list, taken in turn, one entry a sweep: `"sm": {"1234": [60, 0, 0, 0]}` is a
burst every fourth sweep. `"init_error": 18`
beside "gpus" makes nvmlInit answer that NVML code (read at each init).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _load_real_binding() -> None:
    """nvidia-ml-py's own module, as `pynvml_real`, so the played calls raise its error classes
    (this file shadows `pynvml` on the path)."""
    this = Path(__file__).resolve()  # a ConfigMap's file is a link into its data folder
    for folder in sys.path:
        candidate = Path(folder or ".") / "pynvml.py"
        if not candidate.is_file() or candidate.resolve() == this:
            continue
        spec = importlib.util.spec_from_file_location("pynvml_real", candidate)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["pynvml_real"] = module
        spec.loader.exec_module(module)
        return
    raise ImportError("nvidia-ml-py is not installed beside the played NVML")


_load_real_binding()

from fake_nvml import FakeGpu, FakeNvml, NVMLError  # type: ignore[import-not-found]  # noqa: E402

__all__ = ["NVMLError"]


def _pids(marker: str) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # ended while we looked
        if marker.encode() in words:
            yield int(entry.name)


def _at(value: Any, sweep: int) -> int:
    """A number, or a list of them taken in turn, one a sweep (a burst, then quiet)."""
    return int(value[sweep % len(value)]) if isinstance(value, list) else int(value)


def _gpu(state: dict[str, Any], sweep: int) -> FakeGpu:
    processes = {int(pid): _at(size, sweep) for pid, size in state.get("processes", {}).items()}
    sm = {int(pid): _at(percent, sweep) for pid, percent in state.get("sm", {}).items()}
    for marker, size in state.get("markers", {}).items():
        for pid in _pids(marker):
            processes[pid], sm[pid] = int(size), 50
    return FakeGpu(
        state["uuid"],
        name=state.get("name", "NVIDIA H200"),
        total=int(state.get("total", 141 * 1024**3)),
        processes=processes,
        sm=sm,
    )


class _FileNvml(FakeNvml):  # type: ignore[misc]
    def __init__(self, path: Path) -> None:
        super().__init__([])
        self.path = path
        self.sweeps = 0

    def nvmlInit(self) -> None:
        self.init_error = json.loads(self.path.read_text()).get("init_error")
        super().nvmlInit()

    def nvmlDeviceGetCount(self) -> int:
        self.gpus = [_gpu(g, self.sweeps) for g in json.loads(self.path.read_text())["gpus"]]
        self.sweeps += 1
        return int(super().nvmlDeviceGetCount())


_NVML = _FileNvml(Path(os.environ["GPU_USAGE_FAKE_NVML"]))


def __getattr__(name: str) -> Any:
    if name.startswith("nvml"):
        return getattr(_NVML, name)
    raise AttributeError(name)
