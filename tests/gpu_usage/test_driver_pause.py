"""The agent lets go of NVML while the GPU Operator's driver manager takes the driver off the node,
as k8s-driver-manager v0.12.0 says so (cmd/driver-manager/main.go: every
`nvidia.com/gpu.deploy.<component>` label it manages set to `paused-for-driver-upgrade`, or that
word appended, in one patch; set back after): read from the node's labels on a watch of its own,
on the real API server, through watches that end and a server that stalls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes import client

from gpu_admission.process.metrics import Metrics
from gpu_usage.driver_pause import DriverPause, paused_by
from gpu_usage.usage_metrics import AgentMetrics
from tests.gpu_usage.test_agent import _agent, _run, _samples, _until
from tests.world.real_cluster import KubeApi

GIB = 1024**3
NODE = "gpu-node-paused"
PAUSED = "paused-for-driver-upgrade"
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
CLIENT = "nvidia.com/gpu.deploy.client"


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ({"nvidia.com/gpu.deploy.device-plugin": "true"}, None),
        ({"nvidia.com/gpu.deploy.dcgm-exporter": "false"}, None),  # maybeSetPaused keeps false
        ({PLUGIN: PAUSED}, f"{PLUGIN}={PAUSED}"),
        # maybeSetPaused on a value of its own: `<value>_paused-for-driver-upgrade`
        ({CLIENT: f"canary_{PAUSED}"}, f"{CLIENT}=canary_{PAUSED}"),
        ({"example.com/gpu.deploy.client": PAUSED}, None),  # not the manager's
        ({}, None),
    ],
)
def test_the_driver_managers_pause_is_read_from_its_labels(
    labels: dict[str, str], said: str | None
) -> None:
    assert paused_by(labels) == said


def test_the_agent_releases_nvml_while_paused_and_reads_again_after(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, 3 * GIB)
    pause = SimpleNamespace(paused=None)
    agent.pause = pause  # type: ignore[assignment]
    nvml = agent.reader.nvml
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    def used() -> list:
        return _samples(metrics)["container_accelerator_memory_used_bytes"]

    async def steps() -> None:
        await _until(used, "the first series")
        assert nvml.initialised  # held between sweeps
        pause.paused = f"nvidia.com/gpu.deploy.device-plugin={PAUSED}"
        await _until(lambda: not nvml.initialised, "NVML shut down")
        assert nvml.shutdowns == 1
        [why] = agent.readiness()
        assert "driver manager" in why and "gpu.deploy.device-plugin" in why
        assert used() == [] and _samples(metrics)["gpu_admission_gpu_usage_nvml_up"][0].value == 0
        pause.paused = None
        await _until(used, "the series again")
        assert nvml.inits == 2 and agent.readiness() == []

    _run(agent, 0.05, steps)


def _eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)  # polling a condition, bounded by the deadline


@pytest.fixture
def node(kube_client: client.ApiClient) -> Iterator[client.CoreV1Api]:
    core = client.CoreV1Api(kube_client)
    core.create_node({"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}})
    try:
        yield core
    finally:
        core.delete_node(NODE)


def _label(core: client.CoreV1Api, value: str) -> None:
    core.patch_node(NODE, {"metadata": {"labels": {"nvidia.com/gpu.deploy.device-plugin": value}}})


def test_the_watch_follows_the_pause_through_ended_watches_and_a_stall(
    kube_api: KubeApi, kube_client: client.ApiClient, node: client.CoreV1Api
) -> None:
    pause = DriverPause(kube_client, NODE)
    thread = threading.Thread(target=pause.run, daemon=True)
    thread.start()
    try:
        _eventually(pause.synced.is_set, "the first listing")
        assert pause.paused is None
        _label(node, PAUSED)
        _eventually(lambda: pause.paused is not None, "the pause seen")
        assert pause.paused == f"nvidia.com/gpu.deploy.device-plugin={PAUSED}"
        # Every watch cut, as a restarted server does: resumed from its resourceVersion.
        kube_api.proxy.drop_watches()
        _label(node, "true")
        _eventually(lambda: pause.paused is None, "the end of the pause, after a cut watch")
        # The server stalls, then fails: the state seen stays meanwhile (an API server that
        # cannot be reached neither releases NVML nor holds it against a pause it saw), and
        # the watch comes back by itself.
        kube_api.faults.delay("GET", "/api/v1/nodes", seconds=2, times=1)
        kube_api.faults.fail("GET", "/api/v1/nodes", code=500, times=2)
        kube_api.proxy.drop_watches()
        assert pause.paused is None
        _label(node, PAUSED)
        _eventually(lambda: pause.paused is not None, "the pause, once the server answers")
    finally:
        pause.stop()
        kube_api.proxy.drop_watches()
        thread.join(timeout=30)
    assert not thread.is_alive()
