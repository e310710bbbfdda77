"""nvidia-ml-py's `pynvml` played for an agent process a test starts: put this folder first on
PYTHONPATH and name a JSON file in GPU_USAGE_FAKE_NVML. Each sweep reads the file again, so the
test changes what the GPUs hold by rewriting it:

    {"gpus": [{"uuid": "GPU-a", "name": "NVIDIA H200", "total": 150754820096,
               "processes": {"1234": 3221225472}, "sm": {"1234": 40}}]}

The calls and their answers are tests/gpu_usage/fake_nvml.py's (checked against the real
binding's signatures there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.gpu_usage.fake_nvml import FakeGpu, FakeNvml, NVMLError

__all__ = ["NVMLError"]


class _FileNvml(FakeNvml):
    def __init__(self, path: Path) -> None:
        super().__init__([])
        self.path = path

    def nvmlDeviceGetCount(self) -> int:
        state = json.loads(self.path.read_text())
        self.gpus = [
            FakeGpu(
                g["uuid"],
                name=g.get("name", "NVIDIA H200"),
                total=int(g.get("total", 141 * 1024**3)),
                processes={int(k): int(v) for k, v in g.get("processes", {}).items()},
                sm={int(k): int(v) for k, v in g.get("sm", {}).items()},
            )
            for g in state["gpus"]
        ]
        return super().nvmlDeviceGetCount()


_NVML = _FileNvml(Path(os.environ["GPU_USAGE_FAKE_NVML"]))


def __getattr__(name: str) -> Any:
    if name.startswith("nvml"):
        return getattr(_NVML, name)
    raise AttributeError(name)
