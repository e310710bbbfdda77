"""The node agent as its own process (`gpu-admission gpu-usage`), with NVML played: the binding's
stand-in (tests/gpu_usage/nvml_shim) answering from a JSON file, the node's /proc from a folder."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def running_status(container_id: str) -> dict[str, Any]:
    """The kubelet's status of a pod whose one container `main` has started, as
    `patch_namespaced_pod_status` takes it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "containerID": f"containerd://{container_id}",
                    "state": {"running": {"startedAt": now}},
                }
            ],
        }
    }
