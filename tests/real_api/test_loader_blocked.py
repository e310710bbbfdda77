"""A loader pod that cannot start is named on its PVC, through a real kube-apiserver 1.36 with
the real Job controller (kube-controller-manager): the dataset controller creates the loader
Job, the Job controller its pod, and the test plays the kubelet through the API, as a node whose
ConfigMap volume, Secret or image is missing would: the pod's status and the kubelet's Events,
in the kubelet's words.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from gpu_admission.config.model import Config
from tests.e2e.datasets import eventually
from tests.real_api.conftest import namespace_ready
from tests.world.control_plane import ControlPlane

NAMESPACE = "loader-blocked"
PREFIX = "gpu-admission.io/"
WAIT = 60.0  # "within a minute"


def config() -> Config:
    return Config.model_validate(
        {
            "dataset": {
                "loader_image": "registry.example.com/ml/gpu-admission:0.1.0",
                "trusted_ca_config_map": "trust-bundle",
                "progress_interval_seconds": 1,
            },
            "leader_election": {
                "namespace": NAMESPACE,
                "lease_duration_seconds": 2,
                "renew_deadline_seconds": 1.5,
                "retry_period_seconds": 0.2,
            },
        }
    )


@pytest.fixture
async def controller(
    real_cluster: ControlPlane, api: client.ApiClient
) -> AsyncIterator[DatasetController]:
    await asyncio.to_thread(namespace_ready, api, NAMESPACE)
    running = DatasetController(api, config(), identity="blocked-test")
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def _pvc(core: client.CoreV1Api, name: str, credentials: str | None = None) -> None:
    annotations = {f"{PREFIX}data-source": "s3://datasets/coco"}
    if credentials:
        annotations[f"{PREFIX}data-credentials"] = credentials
    core.create_namespaced_persistent_volume_claim(
        NAMESPACE,
        {
            "metadata": {
                "name": name,
                "annotations": annotations,
                "labels": {f"{PREFIX}data-load": "true"},
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def _loader_pod(core: client.CoreV1Api) -> dict[str, Any] | None:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{PREFIX}data-load=true")
    items = [core.api_client.sanitize_for_serialization(p) for p in pods.items]
    return items[0] if items else None


def _as_kubelet(core: client.CoreV1Api, pod: dict[str, Any], waiting: dict[str, str]) -> None:
    """The pod bound to a node, as kube-scheduler binds it (the session's scheduler has no
    Ready node to choose), then the kubelet's status for a pod whose container has not
    started."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod["metadata"]["name"], "namespace": NAMESPACE},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    core.create_namespaced_pod_binding(
        pod["metadata"]["name"], NAMESPACE, binding, _preload_content=False
    )
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    container = pod["spec"]["containers"][0]
    status = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": waiting},
            }
        ],
    }
    core.patch_namespaced_pod_status(pod["metadata"]["name"], NAMESPACE, {"status": status})


def _kubelet_event(core: client.CoreV1Api, pod: dict[str, Any], reason: str, message: str) -> None:
    meta = pod["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.create_namespaced_event(
        NAMESPACE,
        {
            "metadata": {"name": f"{meta['name']}.{reason.lower()}", "namespace": NAMESPACE},
            "involvedObject": {
                "kind": "Pod",
                "namespace": NAMESPACE,
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        },
    )


def _loading_message(core: client.CoreV1Api, name: str) -> str:
    response = core.read_namespaced_persistent_volume_claim(name, NAMESPACE, _preload_content=False)
    pvc = json.loads(response.data)
    for condition in (pvc.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Loading":
            return str(condition.get("message") or "")
    return ""


def _events(core: client.CoreV1Api, name: str) -> list[str]:
    found = core.list_namespaced_event(
        NAMESPACE,
        field_selector=f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name}",
    )
    return [f"{e.reason}: {e.message}" for e in found.items]


@pytest.mark.parametrize(
    ("credentials", "waiting", "event", "expected"),
    [
        (
            None,
            {"reason": "ContainerCreating"},
            (
                "FailedMount",
                'MountVolume.SetUp failed for volume "trusted-ca" : configmap "trust-bundle" '
                "not found",
            ),
            'ConfigMap "trust-bundle" is missing in namespace loader-blocked; create it '
            "(dataset.trusted_ca_config_map names it) or ask the cluster's administrators",
        ),
        (
            "s3-reader",
            {"reason": "CreateContainerConfigError", "message": 'secret "s3-reader" not found'},
            None,
            'Secret "s3-reader" is missing in namespace loader-blocked; create it, or point '
            "gpu-admission.io/data-credentials at a Secret that exists",
        ),
        (
            None,
            {
                "reason": "ImagePullBackOff",
                "message": 'Back-off pulling image "registry.example.com/ml/gpu-admission:0.1.0"',
            },
            None,
            "its image registry.example.com/ml/gpu-admission:0.1.0 cannot be pulled",
        ),
    ],
    ids=["configmap", "secret", "image"],
)
async def test_a_loader_that_cannot_start_is_named_on_its_pvc(
    controller: DatasetController,
    api: client.ApiClient,
    credentials: str | None,
    waiting: dict[str, str],
    event: tuple[str, str] | None,
    expected: str,
) -> None:
    core = client.CoreV1Api(api)
    name = f"coco-{waiting['reason'].lower()}"
    await asyncio.to_thread(_pvc, core, name, credentials)
    # The controller's Job, and the Job controller's pod for it.
    pod = await eventually(lambda: _loader_pod_of(core, name), WAIT, "the loader pod")
    await asyncio.to_thread(_as_kubelet, core, pod, waiting)
    if event is not None:
        await asyncio.to_thread(_kubelet_event, core, pod, *event)
    message = await eventually(
        lambda: expected in (m := _loading_message(core, name)) and m, WAIT, "the PVC to say why"
    )
    assert message.startswith(f"loader pod {pod['metadata']['name']} cannot start: ")
    events = await asyncio.to_thread(_events, core, name)
    assert any(e.startswith("LoaderBlocked: ") and expected in e for e in events), events
    families = {m.name: m for m in controller.registry.registry.collect()}
    samples = families["gpu_admission_dataset_loader_blocked"].samples
    assert any(s.labels["persistentvolumeclaim"] == name for s in samples), samples


def _loader_pod_of(core: client.CoreV1Api, pvc: str) -> dict[str, Any] | None:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{PREFIX}data-load=true")
    for item in pods.items:
        found = core.api_client.sanitize_for_serialization(item)
        if pvc in found["metadata"]["name"] or pvc in json.dumps(found["metadata"].get("labels")):
            return found
    return None
