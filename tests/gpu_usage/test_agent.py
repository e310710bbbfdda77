"""The agent's sweep into metrics under the kubelet's old names, its readiness without NVML,
and `gpu-usage --once` on this machine's real /proc."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from commands.parser import main as cli
from gpu_admission.metrics import Metrics
from gpu_usage.agent import Agent
from gpu_usage.host_processes import ProcessTable
from gpu_usage.nvml_reader import NvmlReader
from gpu_usage.usage_metrics import AgentMetrics
from tests.gpu_usage.fake_nvml import FakeGpu, FakeNvml

GIB = 1024**3
UID = "00000000-0000-0000-0000-00000000000a"
CID = "c" * 64


class StaticPods:
    """The node's pods as NodePods gives them, without an API server."""

    def __init__(self, pods: list[dict]) -> None:
        from gpu_usage.pod_index import PodIndex

        self.index = PodIndex(pods)
        self.error = ""
        self.events: list[tuple[tuple[str, str], str, str]] = []

    def refresh(self, unknown: bool) -> None:
        pass

    def event(self, pod: tuple[str, str], reason: str, message: str, instance: str) -> bool:
        self.events.append((pod, reason, message))
        return True


def _samples(metrics: Metrics) -> dict[str, list]:
    text = metrics.exposition().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _agent(tmp_path: Path, used: int) -> tuple[Agent, StaticPods, FakeGpu]:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    (tmp_path / "7" / "comm").write_text("python\n")
    pods = StaticPods(
        [
            {
                "metadata": {
                    "namespace": "team-a",
                    "name": "train-7d9f8-x2x4q",
                    "uid": UID,
                    "labels": {"pod-template-hash": "7d9f8"},
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": "train-7d9f8", "controller": True}
                    ],
                },
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                            "env": [
                                {"name": "GPU_MEMORY_LIMIT_MIB", "value": "4096"},
                                {"name": "GPU_SHARED_REPLICAS", "value": "4"},
                            ],
                        }
                    ]
                },
                "status": {
                    "phase": "Running",
                    "containerStatuses": [{"name": "main", "containerID": f"containerd://{CID}"}],
                },
            }
        ]
    )
    gpu = FakeGpu("GPU-a", name="NVIDIA H200", processes={7: used}, sm={7: 60})
    agent = Agent(NvmlReader(FakeNvml([gpu])), ProcessTable(tmp_path), pods)  # type: ignore[arg-type]
    return agent, pods, gpu


def test_a_sweep_shows_under_the_kubelets_old_names(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, 3 * GIB)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    labels = {
        "namespace": "team-a",
        "pod": "train-7d9f8-x2x4q",
        "container": "main",
        "gpu_uuid": "GPU-a",
        "gpu_model": "NVIDIA H200",
    }
    used = samples["container_accelerator_memory_used_bytes"][0]
    workload = {"workload_kind": "Deployment", "workload": "train"}
    assert used.labels == {**labels, "preallocated": "false", **workload}
    assert used.value == 3 * GIB
    assert samples["container_accelerator_memory_total_bytes"][0].value == 80 * GIB
    assert samples["container_accelerator_duty_cycle"][0].value == 60
    assert samples["gpu_admission_container_gpu_memory_share_bytes"][0].value == 4 * GIB
    assert samples["gpu_admission_container_gpu_memory_peak_bytes"][0].value == 3 * GIB
    held = samples["gpu_admission_container_gpus_held"][0]
    assert held.labels["workload"] == "train" and held.value == 0.25  # one of four replicas
    outside = samples["gpu_admission_gpu_memory_outside_pods_bytes"][0]
    assert outside.labels["command"] == "(not listed by a process)"  # the driver's reserve
    assert samples["gpu_admission_gpu_usage_nvml_up"][0].value == 1


def test_over_its_share_writes_one_event_per_rise(tmp_path: Path) -> None:
    agent, pods, gpu = _agent(tmp_path, 6 * GIB)  # share 4 GiB + 1 GiB context allowance
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    agent.record(agent.sweep())
    (over,) = _samples(metrics)["gpu_admission_container_gpu_memory_over_share_bytes"]
    assert over.value == GIB and over.labels["container"] == "main"
    gpu.processes[7] = 3 * GIB  # back within its share: no series, the alert resolves
    agent.record(agent.sweep())
    assert _samples(metrics)["gpu_admission_container_gpu_memory_over_share_bytes"] == []
    assert [s.value for s in _samples(metrics)["gpu_admission_gpu_memory_total_bytes"]] == [
        80 * GIB
    ]
    assert [(pod, reason) for pod, reason, _ in pods.events] == [
        (("team-a", "train-7d9f8-x2x4q"), "GPUMemoryOverShare")
    ]
    assert (
        "uses 6,144 MiB of GPU 0 (NVIDIA H200, GPU-a), over its share of 4,096 MiB"
        in (pods.events[0][2])
    )


def test_without_nvml_it_is_not_ready_with_the_reason_and_keeps_trying(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, GIB)
    nvml = agent.reader.nvml
    nvml.init_error = 12
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    async def two_tries() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(0.1, stop))
        while "libnvidia-ml" not in agent.unavailable:  # the first sweep's answer
            await asyncio.sleep(0.01)
        assert "libnvidia-ml.so.1" in agent.readiness()[0]
        nvml.init_error = None  # the driver arrives
        while agent.unavailable:
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(two_tries(), 30))
    assert agent.readiness() == []
    assert _samples(metrics)["gpu_admission_gpu_usage_nvml_up"][0].value == 1


def test_once_prints_this_machines_processes_as_host_processes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside a pod, no kubeconfig: the real /proc, this test's own PID on a fake GPU."""
    fake = FakeNvml([FakeGpu("GPU-a", name="NVIDIA H100 80GB HBM3", processes={os.getpid(): GIB})])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli(["gpu-usage", "--once"]) == 0
    out, err = capsys.readouterr()
    assert "named by pod UID" in err
    line = next(line for line in out.splitlines() if line.startswith(str(os.getpid())))
    assert "(host) " in line and "1,024 MiB" in line


def test_once_without_a_driver_says_so_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml([])
    fake.init_error = 12
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli(["gpu-usage", "--once"]) == 1
    assert "this node has no NVIDIA driver" in capsys.readouterr().err
