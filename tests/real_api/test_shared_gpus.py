"""Shared GPUs as NVIDIA's device plugin ships them, through a real kube-apiserver 1.36 calling
the webhook service: Nodes labelled exactly as gpu-feature-discovery labels them with the device
plugin's defaults (the GPU keeps the name nvidia.com/gpu), pods created for real.

- on time-sliced nodes a pod asking for one nvidia.com/gpu gets the memory share;
- asking for more than 1 there is refused, with why and what to ask for instead;
- on MPS nodes the env stays under the MPS daemon's per-client cap (memory / replicas);
- on nodes that do not share, nothing changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.config.model import Config
from tests.real_api.conftest import namespace_ready
from tests.real_api.service import served
from tests.world.control_plane import ControlPlane
from webhooks.apiserver_policies.pod_checks import admission_policy, admission_policy_binding

NAMESPACE = "shared-gpus"
MEMORY_MIB = 40960
REPLICAS = 4


def gfd_node(name: str, strategy: str, replicas: int) -> dict[str, Any]:
    """A Node as gpu-feature-discovery and the device plugin (renameByDefault: false) leave it."""
    shared = replicas > 1
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB" + ("-SHARED" if shared else ""),
                "nvidia.com/gpu.memory": str(MEMORY_MIB),
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.sharing-strategy": strategy,
            },
        },
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(replicas)},
            "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": str(replicas)},
        },
    }


NODES = [
    gfd_node("gfd-time-sliced", "time-slicing", REPLICAS),
    gfd_node("gfd-mps", "mps", REPLICAS),
    gfd_node("gfd-whole", "none", 1),
]


@pytest.fixture(scope="module")
def core(real_cluster: ControlPlane, api: client.ApiClient) -> Iterator[client.CoreV1Api]:
    core = client.CoreV1Api(api)
    for node in NODES:
        core.create_node(node)
    admission = client.AdmissionregistrationV1Api(api)
    for obj, create in (
        (admission_policy(Config()), admission.create_validating_admission_policy),
        (admission_policy_binding(), admission.create_validating_admission_policy_binding),
    ):
        try:
            create(obj)
        except client.ApiException as error:
            if error.status != 409:  # the base, applied by another module
                raise
    namespace_ready(api, NAMESPACE)
    with served(real_cluster):
        yield core
    for node in NODES:
        core.delete_node(node["metadata"]["name"])


def pod(name: str, strategy: str, count: str, app: str = "pytorch") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-admission.io/gpu-app": app}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.sharing-strategy": strategy},
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": count}},
                }
            ],
        },
    }


def created(core: client.CoreV1Api, manifest: dict[str, Any]) -> dict[str, Any]:
    made = core.create_namespaced_pod(NAMESPACE, manifest)
    return dict(core.api_client.sanitize_for_serialization(made))


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


def test_a_time_sliced_gpu_gets_the_memory_share(core: client.CoreV1Api) -> None:
    made = created(core, pod("ts-one", "time-slicing", "1"))
    values = env(made)
    assert values["GPU_MEMORY_FRACTION"] == "0.237"  # 0.95 / 4
    assert values["GPU_SHARED_REPLICAS"] == "4"
    assert values["GPU_MEMORY_LIMIT_MIB"] == "9707"
    assert values["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.237"
    annotations = made["metadata"]["annotations"]
    assert annotations["gpu-admission.io/gpu-sharing"] == "time-slicing"
    assert annotations["gpu-admission.io/gpu-replicas"] == "4"


def test_more_than_one_is_refused_where_every_node_time_slices(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(NAMESPACE, pod("ts-two", "time-slicing", "2"))
    status = json.loads(refused.value.body)
    assert refused.value.status == 403
    assert status["message"] == (
        'admission webhook "pods.validate.gpu-admission.io" denied the request: container '
        '"train" asks for 2 of nvidia.com/gpu, and every node it can run on shares that GPU '
        "(time-slicing, 4 replicas per GPU): the replicas take turns on one GPU (or split its "
        "SMs) and share its memory, so 2 give no more compute than 1; request 1 nvidia.com/gpu, "
        "or run the pod on nodes that give whole GPUs"
    )


def test_under_mps_the_env_matches_the_daemons_limit(core: client.CoreV1Api) -> None:
    made = created(core, pod("mps-one", "mps", "1", app="jax"))
    values = env(made)
    daemon_limit = MEMORY_MIB // REPLICAS  # the device plugin's set_default_device_pinned_mem_limit
    assert int(values["GPU_MEMORY_LIMIT_MIB"]) <= daemon_limit
    assert float(values["XLA_PYTHON_CLIENT_MEM_FRACTION"]) * MEMORY_MIB <= daemon_limit
    assert made["metadata"]["annotations"]["gpu-admission.io/gpu-sharing"] == "mps"


def test_on_nodes_that_do_not_share_nothing_changes(core: client.CoreV1Api) -> None:
    made = created(core, pod("whole-two", "none", "2"))
    assert "env" not in made["spec"]["containers"][0] or not any(
        e["name"].startswith("GPU_") for e in made["spec"]["containers"][0]["env"]
    )
    assert "gpu-admission.io/gpu-sharing" not in made["metadata"]["annotations"]
