"""GPU daemons the visibility policy would blind, named by the install's self-check on a real
kube-apiserver 1.36 (the controller as its own ServiceAccount, with the base's RBAC), with the
base's policy in force: NVIDIA's device plugin as its static manifest ships it
(NVIDIA_VISIBLE_DEVICES=all, no GPU asked) and a standalone dcgm-exporter as the GPU Operator runs
it (privileged, runtimeClassName nvidia, the variable from its image) in namespaces that are not
exempt; in an operator's namespace, a StatefulSet, a Job (whose own pods are judged through it,
not again) and the GPU Operator's `nvidia-cuda-validator`, a bare Pod owned by the ClusterPolicy,
read as the policy left it. Not named: the same device plugin in an exempt namespace, a CPU-only
Deployment, and a privileged pod under a gVisor RuntimeClass. A users' Deployment that sets
NVIDIA_VISIBLE_DEVICES=all is named with the advice to ask for a GPU by resource, never to
exempt its namespace. A Warning Event lands on each workload (its own apiVersion), the gauge and
`gpu-admission audit` say the same, and the exempt label clears a daemon."""

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
from gpu_admission.admission.installed import InstallReport
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.test_install_check import _as_controller, _until
from tests.world.control_plane import ControlPlane
from tests.world.harness import body, wait_until

pytestmark = pytest.mark.e2e

PLUGINS, MONITORING, EXEMPT = "blind-nvidia", "blind-monitoring", "blind-exempt"
OPERATOR, TEAM = "blind-operator", "blind-team"
OURS = (PLUGINS, MONITORING, EXEMPT, OPERATOR, TEAM)
GAUGE = "gpu_admission_blinded_gpu_daemon"
RUNTIME_CLASSES = {"nvidia": "nvidia", "gvisor": "runsc"}  # name -> handler


def _labels(name: str) -> dict[str, str]:
    return {"app": name}


def _template(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": _labels(name)},
        "spec": {"containers": [{"name": name, "image": "nvcr.io/x", **container}], **spec},
    }


def _daemonset(name: str, namespace: str, container: dict[str, Any], **spec: Any) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": _labels(name)},
            "template": _template(name, container, **spec),
        },
    }


def _deployment(name: str, namespace: str, container: dict[str, Any]) -> dict:
    made = _daemonset(name, namespace, container)
    return {**made, "kind": "Deployment", "spec": {**made["spec"], "replicas": 0}}


ALL = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
DEVICE_PLUGIN = ALL
# Privileged as the toolkit counts it (CAP_SYS_ADMIN); `privileged: true` itself, as the GPU
# Operator sets it, this control plane refuses (--allow-privileged=false).
PRIVILEGED = {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
DCGM = PRIVILEGED


def _cuda_validator() -> dict[str, Any]:
    """As NVIDIA/gpu-operator `validator/manifests/cuda-workload-validation.yaml` is made into a
    Pod by `cmd/nvidia-validator/main.go`: the runtime class, its node, and the validator
    DaemonSet's owner (the ClusterPolicy)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "nvidia-cuda-validator-",
            "namespace": OPERATOR,
            "labels": {"app": "nvidia-cuda-validator"},
            "ownerReferences": [
                {
                    "apiVersion": "nvidia.com/v1",
                    "kind": "ClusterPolicy",
                    "name": "cluster-policy",
                    "uid": "3f1c2b9e-0d4a-4e55-9b8e-2d1f6c7a8b90",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "runtimeClassName": "nvidia",
            "nodeName": "gpu-node-1",
            "restartPolicy": "OnFailure",
            "initContainers": [
                {"name": "cuda-validation", "image": "nvcr.io/x", **ALL, **PRIVILEGED}
            ],
            "containers": [{"name": "nvidia-cuda-validator", "image": "nvcr.io/x", **PRIVILEGED}],
        },
    }


@pytest.fixture
def daemons(kubectl: Kubectl, api: client.ApiClient) -> Iterator[dict[str, str]]:
    """The workloads; yields the bare Pods' generated names."""
    apply_base(kubectl)
    node = client.NodeV1Api(api)
    for name, handler in RUNTIME_CLASSES.items():
        try:
            node.create_runtime_class(
                body(
                    {
                        "apiVersion": "node.k8s.io/v1",
                        "kind": "RuntimeClass",
                        "metadata": {"name": name},
                        "handler": handler,
                    }
                )
            )
        except client.ApiException as error:
            if error.status != 409:
                raise
    for namespace in (PLUGINS, MONITORING, OPERATOR, TEAM):
        namespace_ready(api, namespace)
    namespace_ready(api, EXEMPT, labels={"gpu-admission.io/exempt": "true"})
    apps, batch, core = client.AppsV1Api(api), client.BatchV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_daemon_set(
        PLUGINS, _daemonset("nvidia-device-plugin", PLUGINS, DEVICE_PLUGIN)
    )
    apps.create_namespaced_daemon_set(
        MONITORING, _daemonset("dcgm-exporter", MONITORING, DCGM, runtimeClassName="nvidia")
    )
    apps.create_namespaced_daemon_set(
        EXEMPT, _daemonset("nvidia-device-plugin", EXEMPT, DEVICE_PLUGIN)
    )
    none = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}
    apps.create_namespaced_deployment(MONITORING, _deployment("web", MONITORING, none))
    # The GPU Operator's kinds beyond DaemonSets, in its namespace, not exempt.
    stateful = _daemonset("nvidia-mig-agent", OPERATOR, PRIVILEGED, runtimeClassName="nvidia")
    stateful = {
        **stateful,
        "kind": "StatefulSet",
        "spec": {**stateful["spec"], "replicas": 0, "serviceName": "nvidia-mig-agent"},
    }
    apps.create_namespaced_stateful_set(OPERATOR, stateful)
    # Unprivileged, under the NVIDIA class, no GPU asked: the image's variable is honoured.
    job_template = _template("gpu-burn-in", {}, runtimeClassName="nvidia", restartPolicy="Never")
    batch.create_namespaced_job(
        OPERATOR,
        body(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "gpu-burn-in", "namespace": OPERATOR},
                "spec": {"backoffLimit": 0, "template": job_template},
            }
        ),
    )
    validator = core.create_namespaced_pod(OPERATOR, body(_cuda_validator()))
    sandboxed = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sandboxed", "namespace": OPERATOR},
        "spec": {
            "runtimeClassName": "gvisor",
            "containers": [{"name": "tool", "image": "nvcr.io/x", **PRIVILEGED}],
        },
    }
    core.create_namespaced_pod(OPERATOR, body(sandboxed))
    apps.create_namespaced_deployment(TEAM, _deployment("notebook", TEAM, ALL))
    # The Job's own pod exists (owned by the Job: judged through it, not again).
    wait_until(
        lambda: bool(
            core.list_namespaced_pod(OPERATOR, label_selector="job-name=gpu-burn-in").items
        ),
        "the Job's pod",
    )
    try:
        yield {"validator": validator.metadata.name}
    finally:
        for namespace in (PLUGINS, MONITORING, EXEMPT, OPERATOR, TEAM):
            kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
        for name in RUNTIME_CLASSES:
            kubectl("delete", "runtimeclass", name, "--ignore-not-found", "--wait=false")


def _ours(report: InstallReport) -> dict[tuple[str, str, str], Any]:
    return {(d.namespace, d.kind, d.name): d for d in report.daemons if d.namespace in OURS}


async def _event_on(
    api: client.ApiClient, namespace: str, kind: str, name: str
) -> client.CoreV1Event:
    core = client.CoreV1Api(api)
    selector = f"involvedObject.kind={kind},involvedObject.name={name},reason=GPUDaemonBlinded"
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
    real_cluster: ControlPlane,
    api: client.ApiClient,
    kubectl: Kubectl,
    daemons: dict[str, str],
) -> None:
    config = Config.model_validate(
        {
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
            # Its webhooks would call a Service nothing here serves (test_install_check
            # tests the writes).
            "install": {"write_admission_objects": False},
        }
    )
    metrics = Metrics(process_metrics=False)
    process = ControllerProcess(config, _as_controller(api), metrics, identity="blinded")
    checker = process.install_check
    await process.start()
    validator = daemons["validator"]
    expected = {
        (PLUGINS, "DaemonSet", "nvidia-device-plugin"),
        (MONITORING, "DaemonSet", "dcgm-exporter"),
        (OPERATOR, "StatefulSet", "nvidia-mig-agent"),
        (OPERATOR, "Job", "gpu-burn-in"),
        (OPERATOR, "Pod", validator),
        (TEAM, "Deployment", "notebook"),
    }
    try:
        report = await _until(checker, lambda r: set(_ours(r)) == expected, "every one named")
        named = _ours(report)
        assert named[(PLUGINS, "DaemonSet", "nvidia-device-plugin")].how == (
            "sets NVIDIA_VISIBLE_DEVICES=all"
        )
        assert "runtimeClassName nvidia" in named[(MONITORING, "DaemonSet", "dcgm-exporter")].how
        # The validator as the policy left it: every container given `none`, named all the same.
        found = named[(OPERATOR, "Pod", validator)]
        assert found.containers == ("cuda-validation", "nvidia-cuda-validator")
        assert found.how.startswith("runs privileged with runtimeClassName nvidia")
        assert named[(OPERATOR, "Job", "gpu-burn-in")].how.startswith(
            "runs with runtimeClassName nvidia"
        )
        assert all(d.daemon for key, d in named.items() if key[0] != TEAM)

        event = await _event_on(api, MONITORING, "DaemonSet", "dcgm-exporter")
        assert event.type == "Warning"
        daemonset = client.AppsV1Api(api).read_namespaced_daemon_set("dcgm-exporter", MONITORING)
        assert event.involved_object.uid == daemonset.metadata.uid  # kubectl describe finds it
        assert f"kubectl label namespace {MONITORING} gpu-admission.io/exempt=true" in (
            event.message
        )
        on_pod = await _event_on(api, OPERATOR, "Pod", validator)
        assert on_pod.involved_object.api_version == "v1"
        on_job = await _event_on(api, OPERATOR, "Job", "gpu-burn-in")
        assert on_job.involved_object.api_version == "batch/v1"
        # The users' workload: by resource, never the exempt label.
        tenant = await _event_on(api, TEAM, "Deployment", "notebook")
        assert "nvidia.com/gpu: 1" in tenant.message
        assert "exempt" not in tenant.message and "kubectl label" not in tenant.message
        assert not named[(TEAM, "Deployment", "notebook")].daemon

        labels = {"namespace": MONITORING, "kind": "DaemonSet", "name": "dcgm-exporter"}
        assert metrics.registry.get_sample_value(GAUGE, labels) == 1.0
        pod_labels = {"namespace": OPERATOR, "kind": "Pod", "name": validator}
        assert metrics.registry.get_sample_value(GAUGE, pod_labels) == 1.0
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
        audited = {
            (d["namespace"], d["kind"], d["name"]): d for d in listed if d["namespace"] in OURS
        }
        assert set(audited) == expected
        assert audited[(TEAM, "Deployment", "notebook")]["gpuDaemon"] is False
        # The fix the finding gives.
        kubectl("label", "namespace", MONITORING, "gpu-admission.io/exempt=true")
        rest = expected - {(MONITORING, "DaemonSet", "dcgm-exporter")}
        await _until(checker, lambda r: set(_ours(r)) == rest, "the exempted one cleared")
        assert metrics.registry.get_sample_value(GAUGE, labels) is None
    finally:
        await process.stop()
