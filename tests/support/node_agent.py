"""The node agent as its own process (`gpu-admission gpu-usage`), with NVML played: the binding's
stand-in (tests/gpu_usage/nvml_shim) answering from a JSON file, the node's /proc from a folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import ROOT

SHIM = ROOT / "tests" / "gpu_usage" / "nvml_shim"


def start_agent(
    kubeconfig: Path, node: str, proc: Path, nvml: Path, metrics_port: int, log: Path
) -> subprocess.Popen[bytes]:
    """The agent of `node`, sweeping every half second, its metrics on `metrics_port`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "gpu-usage",
            "--kubeconfig",
            str(kubeconfig),
            "--node",
            node,
            "--proc",
            str(proc),
            "--metrics-port",
            str(metrics_port),
            "--interval",
            "0.5",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(map(str, (SHIM, SHIM.parent, ROOT))),
            "GPU_USAGE_FAKE_NVML": str(nvml),
        },
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
