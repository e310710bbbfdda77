"""GPU policies end to end, through the webhook configurations the manifests register.

kubectl and the kubernetes client talk to the real kube-apiserver; it calls the real HTTPS
webhook service by its service name, exactly as `kubectl apply -k manifests/` wires it. What is
checked is what the API stores (or the error the user sees), never the webhook's raw answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiException

from tests.world.harness import AdmissionCluster, AdmissionClusterFactory, body

CUDA_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
NS = "ml"
NONE = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]


def container(name: str, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": CUDA_IMAGE, "resources": {"limits": limits or {}}, **extra}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, **spec.pop("metadata", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers), **spec},
    }


def kubectl_create(cluster: AdmissionCluster, manifest: dict[str, Any], namespace: str = NS) -> str:
    """Create with kubectl; returns stderr (where kubectl prints webhook warnings)."""
    done = cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(manifest), namespace=namespace)
    assert done.returncode == 0, done.stderr
    return done.stderr


def stored(cluster: AdmissionCluster, name: str, namespace: str = NS) -> dict[str, Any]:
    done = cluster.kubectl("get", "pod", name, "-o", "json", namespace=namespace)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def env(pod: dict[str, Any], name: str, lists: str = "containers") -> list[dict[str, Any]] | None:
    (found,) = [c for c in pod["spec"].get(lists) or [] if c["name"] == name]
    return found.get("env")


def env_values(pod: dict[str, Any], name: str) -> dict[str, str]:
    """A container's env as name -> value (every entry the webhooks write has a plain value)."""
    return {entry["name"]: entry["value"] for entry in env(pod, name) or []}


def gpu_node(name: str, replicas: int, pool: str) -> dict[str, Any]:
    """A node as gpu-feature-discovery labels it when its GPUs are time-sliced `replicas` ways."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "gpu-pool": pool,
                "nvidia.com/gpu.product": "NVIDIA-A10G",
                "nvidia.com/gpu.replicas": str(replicas),
                "nvidia.com/gpu.memory": "23028",
            },
        },
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu.shared": str(replicas)}},
    }


SHARED_NODES = [gpu_node("a10g-2way", 2, "notebooks"), gpu_node("a10g-4way", 4, "batch")]


# -- GPU visibility --------------------------------------------------------------------------------


def test_cpu_only_cuda_pod_created_with_kubectl_is_stored_seeing_no_gpus(
    admission_cluster: AdmissionCluster,
) -> None:
    kubectl_create(admission_cluster, pod("cuda-cpu-only", container("main")))

    assert env(stored(admission_cluster, "cuda-cpu-only"), "main") == NONE


def test_user_value_is_replaced_in_a_cpu_only_container(
    admission_cluster: AdmissionCluster,
) -> None:
    manifest = pod(
        "sees-all",
        container("main", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    )
    kubectl_create(admission_cluster, manifest)

    assert env(stored(admission_cluster, "sees-all"), "main") == NONE


def test_gpu_container_is_untouched_while_its_helpers_see_no_gpus(
    admission_cluster: AdmissionCluster,
) -> None:
    manifest = pod(
        "train-resnet",
        container("trainer", {"nvidia.com/gpu": "1", "memory": "16Gi"}),
        container("metrics-sidecar", {"cpu": "100m"}),
        initContainers=[container("fetch-config")],
        restartPolicy="Never",
    )
    admission_cluster.core.create_namespaced_pod(NS, body(manifest))

    created = stored(admission_cluster, "train-resnet")
    assert env(created, "trainer") is None
    assert env(created, "metrics-sidecar") == NONE
    assert env(created, "fetch-config", "initContainers") == NONE


def test_debug_container_added_with_kubectl_debug_sees_no_gpus(
    admission_cluster: AdmissionCluster,
) -> None:
    kubectl_create(admission_cluster, pod("cuda-cpu-only", container("main")))

    done = admission_cluster.kubectl(
        "debug", "cuda-cpu-only", f"--image={CUDA_IMAGE}", "--container=debugger"
    )

    assert done.returncode == 0, done.stderr
    created = stored(admission_cluster, "cuda-cpu-only")
    (debugger,) = created["spec"]["ephemeralContainers"]
    assert debugger["name"] == "debugger"
    assert debugger["env"] == NONE


# -- denials ---------------------------------------------------------------------------------------


def test_two_shared_gpus_are_denied_and_kubectl_shows_why(
    admission_cluster: AdmissionCluster,
) -> None:
    manifest = pod("notebook-shared-2", container("main", {"nvidia.com/gpu.shared": "2"}))

    done = admission_cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(manifest))

    # kube-apiserver ran the check itself (the ValidatingAdmissionPolicy); kubectl words a 422
    # whose cause has no field as `is invalid: : MESSAGE`.
    assert done.returncode == 1
    assert (
        'The pods "notebook-shared-2" is invalid: : ValidatingAdmissionPolicy '
        "'gpu-admission-pods' with binding 'gpu-admission-pods' denied request: "
        'container "main" asks for 2 of nvidia.com/gpu.shared in limits and requests'
    ) in done.stderr
    assert "request 1 nvidia.com/gpu.shared, or a whole GPU with nvidia.com/gpu" in done.stderr
    with pytest.raises(ApiException) as missing:
        admission_cluster.core.read_namespaced_pod("notebook-shared-2", NS)
    assert missing.value.status == 404


def test_gpu_container_setting_visible_devices_is_denied(
    admission_cluster: AdmissionCluster,
) -> None:
    manifest = pod(
        "widened",
        container(
            "trainer",
            {"nvidia.com/gpu": "1"},
            env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        ),
    )

    with pytest.raises(ApiException) as denied:
        admission_cluster.core.create_namespaced_pod(NS, body(manifest))

    assert denied.value.status == 422
    status = json.loads(denied.value.body or "{}")
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(
        "pods \"widened\" is forbidden: ValidatingAdmissionPolicy 'gpu-admission-pods' with "
        "binding 'gpu-admission-pods' denied request: "
        'container "trainer" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)'
    )


# -- memory share ----------------------------------------------------------------------------------


def test_shared_gpu_pod_gets_the_memory_share_of_the_nodes_it_may_run_on(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    cluster = admission_cluster_factory(nodes=SHARED_NODES)
    notebook = pod(
        "notebook",
        container(
            "main",
            {"nvidia.com/gpu.shared": "1"},
            env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}],
        ),
        nodeSelector={"gpu-pool": "notebooks"},
        metadata={"annotations": {"gpu-admission.io/gpu-app": "pytorch"}},
    )
    batch = pod(
        "batch",
        container("main", {"nvidia.com/gpu.shared": "1"}),
        nodeSelector={"gpu-pool": "batch"},
    )

    assert "Warning" not in kubectl_create(cluster, notebook)
    kubectl_create(cluster, batch)

    created = stored(cluster, "notebook")
    assert env_values(created, "main") == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,per_process_memory_fraction:0.475",
        "GPU_MEMORY_FRACTION": "0.475",
        "GPU_SHARED_REPLICAS": "2",
        "GPU_MEMORY_LIMIT_MIB": "10938",
    }
    annotations = created["metadata"]["annotations"]
    assert annotations["gpu-admission.io/gpu-memory-fraction"] == "0.475"
    assert annotations["gpu-admission.io/gpu-replicas"] == "2"
    assert env_values(stored(cluster, "batch"), "main") == {
        "GPU_MEMORY_FRACTION": "0.237",
        "GPU_SHARED_REPLICAS": "4",
        "GPU_MEMORY_LIMIT_MIB": "5457",
    }


def test_jax_pods_get_exactly_one_fraction_name_and_keep_their_own(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    # Current jaxlib refuses XLA_CLIENT_MEM_FRACTION next to XLA_PYTHON_CLIENT_MEM_FRACTION and
    # then runs on the CPU: the stored pod must never carry both.
    cluster = admission_cluster_factory(nodes=SHARED_NODES)
    jax = {"annotations": {"gpu-admission.io/gpu-app": "jax"}}
    plain = pod(
        "jax-plain",
        container("main", {"nvidia.com/gpu.shared": "1"}),
        nodeSelector={"gpu-pool": "batch"},
        metadata=jax,
    )
    own = pod(
        "jax-own",
        container(
            "main",
            {"nvidia.com/gpu.shared": "1"},
            env=[{"name": "XLA_CLIENT_MEM_FRACTION", "value": ".2"}],
        ),
        nodeSelector={"gpu-pool": "batch"},
        metadata=jax,
    )

    assert "Warning" not in kubectl_create(cluster, plain)
    warnings = kubectl_create(cluster, own)

    plain_env = env_values(stored(cluster, "jax-plain"), "main")
    assert plain_env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.237"
    assert "XLA_CLIENT_MEM_FRACTION" not in plain_env
    own_env = env_values(stored(cluster, "jax-own"), "main")
    assert own_env["XLA_CLIENT_MEM_FRACTION"] == ".2"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in own_env
    assert own_env["GPU_MEMORY_FRACTION"] == "0.237"
    assert (
        'container "main": kept your XLA_CLIENT_MEM_FRACTION (computed 0.237); '
        "no XLA_PYTHON_CLIENT_MEM_FRACTION added" in warnings
    )


def test_nodes_added_after_start_reach_the_service_through_its_informer(
    admission_cluster: AdmissionCluster,
) -> None:
    admission_cluster.core.create_node(body(gpu_node("late-2way", 2, "notebooks")))
    admission_cluster.wait_until(
        lambda: admission_cluster.view.node("late-2way") is not None, "the new node in the view"
    )

    kubectl_create(
        admission_cluster, pod("notebook", container("main", {"nvidia.com/gpu.shared": "1"}))
    )

    annotations = stored(admission_cluster, "notebook")["metadata"]["annotations"]
    assert annotations["gpu-admission.io/gpu-memory-fraction"] == "0.475"


def test_configured_to_deny_a_shared_pod_no_labelled_node_can_take(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    cluster = admission_cluster_factory(
        config_overrides={"memory_share": {"on_no_candidates": "deny"}}, nodes=SHARED_NODES
    )
    manifest = pod(
        "lost",
        container("main", {"nvidia.com/gpu.shared": "1"}),
        nodeSelector={"gpu-pool": "training"},
    )

    done = cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(manifest))

    assert done.returncode == 1
    assert 'admission webhook "pods.mutate.gpu-admission.io" denied the request' in done.stderr
    assert "no node it can run on offers nvidia.com/gpu.shared" in done.stderr


def test_by_default_a_shared_pod_no_labelled_node_can_take_is_admitted_with_a_warning(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    cluster = admission_cluster_factory(nodes=SHARED_NODES)
    manifest = pod(
        "lost",
        container("main", {"nvidia.com/gpu.shared": "1"}),
        nodeSelector={"gpu-pool": "training"},
    )

    warnings = kubectl_create(cluster, manifest)

    assert "Warning: " in warnings and "memory share not set" in warnings
    assert env(stored(cluster, "lost"), "main") is None


# -- exempt namespaces -----------------------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["gpu-admission", "kube-system"])
def test_pods_in_exempt_namespaces_are_left_alone(
    admission_cluster: AdmissionCluster, namespace: str
) -> None:
    cpu_only = pod("cuda-cpu-only", container("main"))
    greedy = pod("greedy", container("main", {"nvidia.com/gpu.shared": "2"}))

    kubectl_create(admission_cluster, cpu_only, namespace)
    kubectl_create(admission_cluster, greedy, namespace)

    assert env(stored(admission_cluster, "cuda-cpu-only", namespace), "main") is None
    assert stored(admission_cluster, "greedy", namespace)["metadata"]["name"] == "greedy"
    # The same pods outside an exempt namespace: the webhooks are there and act.
    kubectl_create(admission_cluster, cpu_only, NS)
    assert env(stored(admission_cluster, "cuda-cpu-only", NS), "main") == NONE
    refused = admission_cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(greedy))
    assert refused.returncode == 1
