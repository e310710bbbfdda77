"""GPU daemons the visibility policy would blind, named by the install's self-check on a real
kube-apiserver 1.36 (the controller as its own ServiceAccount, with the base's RBAC): NVIDIA's
device plugin as its static manifest ships it (NVIDIA_VISIBLE_DEVICES=all, no GPU asked) and a
standalone dcgm-exporter as the GPU Operator runs it (privileged, runtimeClassName nvidia, the
variable from its image) in namespaces that are not exempt; the same in an exempt namespace,
and a CPU-only Deployment, are not named. A Warning Event lands on each DaemonSet, the gauge
and `gpu-admission audit` say the same, and the exempt label clears it."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from commands.audit import audit_command
from commands.controller import ControllerProcess
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.test_install_check import _as_controller, _until
from tests.world.control_plane import ControlPlane

pytestmark = pytest.mark.e2e

PLUGINS, MONITORING, EXEMPT = "blind-nvidia", "blind-monitoring", "blind-exempt"
GAUGE = "gpu_admission_blinded_gpu_daemon"


def _daemonset(name: str, namespace: str, container: dict[str, Any], **spec: Any) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": "nvcr.io/x", **container}], **spec},
            },
        },
    }


DEVICE_PLUGIN = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
# Privileged as the toolkit counts it (CAP_SYS_ADMIN); `privileged: true` itself, as the GPU
# Operator sets it, this control plane refuses (--allow-privileged=false).
DCGM = {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}


@pytest.fixture
def daemons(kubectl: Kubectl, api: client.ApiClient) -> Iterator[None]:
    apply_base(kubectl)
    namespace_ready(api, PLUGINS)
    namespace_ready(api, MONITORING)
    namespace_ready(api, EXEMPT, labels={"gpu-admission.io/exempt": "true"})
    apps = client.AppsV1Api(api)
    apps.create_namespaced_daemon_set(
        PLUGINS, _daemonset("nvidia-device-plugin", PLUGINS, DEVICE_PLUGIN)
    )
    apps.create_namespaced_daemon_set(
        MONITORING, _daemonset("dcgm-exporter", MONITORING, DCGM, runtimeClassName="nvidia")
    )
    apps.create_namespaced_daemon_set(
        EXEMPT, _daemonset("nvidia-device-plugin", EXEMPT, DEVICE_PLUGIN)
    )
    cpu = _daemonset(
        "web", MONITORING, {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}
    )
    apps.create_namespaced_deployment(
        MONITORING, {**cpu, "kind": "Deployment", "spec": {**cpu["spec"], "replicas": 0}}
    )
    try:
        yield
    finally:
        for namespace in (PLUGINS, MONITORING, EXEMPT):
            kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")


async def _event_on(api: client.ApiClient, namespace: str, name: str) -> client.CoreV1Event:
    core = client.CoreV1Api(api)
    selector = f"involvedObject.kind=DaemonSet,involvedObject.name={name},reason=GPUDaemonBlinded"
    deadline = time.monotonic() + 30
    while True:
        listed = await asyncio.to_thread(
            core.list_namespaced_event, namespace, field_selector=selector
        )
        if listed.items:
            return listed.items[-1]
        assert time.monotonic() < deadline, f"no GPUDaemonBlinded Event on {namespace}/{name}"
        await asyncio.sleep(0.1)  # polling a condition, bounded by the deadline


async def test_blinded_gpu_daemons_are_named_on_themselves_and_cleared_by_the_exempt_label(
    real_cluster: ControlPlane, api: client.ApiClient, kubectl: Kubectl, daemons: None
) -> None:
    config = Config.model_validate(
        {
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
        }
    )
    metrics = Metrics(process_metrics=False)
    process = ControllerProcess(config, _as_controller(api), metrics, identity="blinded")
    checker = process.install_check
    await process.start()
    try:
        report = await _until(checker, lambda r: len(r.daemons) == 2, "both daemons named")
        named = {(d.namespace, d.name): d for d in report.daemons}
        assert set(named) == {(PLUGINS, "nvidia-device-plugin"), (MONITORING, "dcgm-exporter")}
        assert named[(PLUGINS, "nvidia-device-plugin")].how == "sets NVIDIA_VISIBLE_DEVICES=all"
        assert "runtimeClassName nvidia" in named[(MONITORING, "dcgm-exporter")].how
        event = await _event_on(api, MONITORING, "dcgm-exporter")
        assert event.type == "Warning"
        daemonset = client.AppsV1Api(api).read_namespaced_daemon_set("dcgm-exporter", MONITORING)
        assert event.involved_object.uid == daemonset.metadata.uid  # kubectl describe finds it
        assert f"kubectl label namespace {MONITORING} gpu-admission.io/exempt=true" in (
            event.message
        )
        labels = {"namespace": MONITORING, "kind": "DaemonSet", "name": "dcgm-exporter"}
        assert metrics.registry.get_sample_value(GAUGE, labels) == 1.0
        # `gpu-admission audit` says the same, from outside.
        out = io.StringIO()
        args = argparse.Namespace(
            kubeconfig=real_cluster.kubeconfig,
            config=None,
            output="json",
            namespace=PLUGINS,
            sources=False,
        )
        await asyncio.to_thread(audit_command, args, out, io.StringIO())
        listed = json.loads(out.getvalue())["installedAdmissionObjects"]["blindedGpuDaemons"]
        assert {(d["namespace"], d["name"]) for d in listed} == set(named)
        # The fix the finding gives.
        kubectl("label", "namespace", MONITORING, "gpu-admission.io/exempt=true")
        await _until(checker, lambda r: len(r.daemons) == 1, "the exempted one cleared")
        assert metrics.registry.get_sample_value(GAUGE, labels) is None
    finally:
        await process.stop()
