"""nvidia-ml-py's `pynvml` played inside the node agent's pod for the install tier, beside
tests/gpu_usage/fake_nvml.py (both in a ConfigMap on the agent's PYTHONPATH; this file is not
imported by the tests themselves).

The GPUs come from the JSON file GPU_USAGE_FAKE_NVML names. What each holds is given by marker:
a word in the command line of a researcher's process (`python3 -c ... gpu-tenant-train`). Each
sweep finds the PIDs carrying a marker in /proc, as the driver names GPU processes by their PID
on the node (the agent runs with hostPID), so the agent gets the PIDs of real containers the
real kubelet started:

    {"gpus": [{"uuid": "GPU-...", "name": "NVIDIA A10G", "total": 24146608128,
               "markers": {"gpu-tenant-train": 8589934592}}]}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fake_nvml import FakeGpu, FakeNvml, NVMLError  # type: ignore[import-not-found]

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


class _MarkedNvml(FakeNvml):  # type: ignore[misc]
    def nvmlDeviceGetCount(self) -> int:
        state = json.loads(Path(os.environ["GPU_USAGE_FAKE_NVML"]).read_text())
        self.gpus = []
        for gpu in state["gpus"]:
            held = {pid: int(size) for m, size in gpu["markers"].items() for pid in _pids(m)}
            sm = {pid: 50 for pid in held}
            self.gpus.append(FakeGpu(gpu["uuid"], gpu["name"], int(gpu["total"]), 0, held, sm))
        return int(super().nvmlDeviceGetCount())


_NVML = _MarkedNvml([])


def __getattr__(name: str) -> Any:
    if name.startswith("nvml"):
        return getattr(_NVML, name)
    raise AttributeError(name)
