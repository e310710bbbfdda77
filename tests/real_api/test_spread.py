"""Where kube-scheduler 1.36 puts the webhook replicas of the shipped Deployment: on different
nodes when there are several, both on the one node when there is one, and a tainted
control-plane node neither takes a replica nor strands one (`nodeTaintsPolicy: Honor`).

The Nodes report Ready with a Lease, as a kubelet keeps them (the node lifecycle controller then
lifts the not-ready taint the API server puts on new Nodes); no kubelet runs their pods, so the
pods stay bound and Pending: what is proven is the scheduler's placement. The Deployment is the
rendered base's, with a nodeSelector for this test's nodes (other tests may leave Nodes)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.real_api.conftest import namespace_ready
from tests.world.harness import manifest_objects, wait_until

POOL = "test.gpu-admission.io/pool"
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ready_node(api: client.ApiClient, name: str, pool: str, tainted: bool = False) -> None:
    core = client.CoreV1Api(api)
    spec = {"taints": [CONTROL_PLANE_TAINT]} if tainted else {}
    # The labels every kubelet registers its Node with (pkg/kubelet/kubelet_node_status.go).
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        POOL: pool,
    }
    node = {"metadata": {"name": name, "labels": labels}, "spec": spec}
    core.create_node(node)
    resources = {"cpu": "8", "memory": "16Gi", "pods": "110"}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "lastHeartbeatTime": _now(),
        "lastTransitionTime": _now(),
    }
    status = {"capacity": resources, "allocatable": resources, "conditions": [ready]}
    core.patch_node_status(name, {"status": status})
    lease = {
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _now()},
    }
    client.CoordinationV1Api(api).create_namespaced_lease("kube-node-lease", lease)

    def not_ready_lifted() -> bool:
        taints = core.read_node(name).spec.taints or []
        return not any(t.key == "node.kubernetes.io/not-ready" for t in taints)

    wait_until(not_ready_lifted, f"the not-ready taint of {name} to be lifted", timeout=60)


def webhook_deployment(namespace: str, pool: str) -> dict[str, Any]:
    [deployment] = [
        d for d in manifest_objects("Deployment") if d["metadata"]["name"] == "gpu-admission"
    ]
    deployment["metadata"]["namespace"] = namespace
    deployment["spec"]["template"]["spec"]["nodeSelector"] = {POOL: pool}
    return deployment


@pytest.fixture
def pool(api: client.ApiClient) -> Iterator[tuple[str, str, list[str]]]:
    """A pool name, its namespace, and the nodes made (deleted afterwards, with the namespace)."""
    name = f"spread-{uuid.uuid4().hex[:6]}"
    nodes: list[str] = []
    namespace_ready(api, name)
    [account] = [
        a for a in manifest_objects("ServiceAccount") if a["metadata"]["name"] == "gpu-admission"
    ]
    account["metadata"]["namespace"] = name
    client.CoreV1Api(api).create_namespaced_service_account(name, account)
    yield name, name, nodes
    core = client.CoreV1Api(api)
    core.delete_namespace(name)
    for node in nodes:
        core.delete_node(node)
        client.CoordinationV1Api(api).delete_namespaced_lease(node, "kube-node-lease")


@pytest.mark.parametrize(
    "workers, control_plane, spread",
    [
        (2, True, True),  # two workers and a tainted control plane: one replica on each worker
        (1, True, False),  # one worker (and a tainted control plane): both replicas on it
        (1, False, False),  # kind or minikube: one node runs both
    ],
    ids=["two-workers", "one-worker-and-control-plane", "one-node"],
)
def test_replicas_spread_over_workers_and_never_wait_for_a_second_node(
    api: client.ApiClient,
    pool: tuple[str, str, list[str]],
    workers: int,
    control_plane: bool,
    spread: bool,
) -> None:
    name, namespace, nodes = pool
    for index in range(workers):
        nodes.append(f"{name}-worker-{index}")
        ready_node(api, nodes[-1], name)
    if control_plane:
        nodes.append(f"{name}-control-plane")
        ready_node(api, nodes[-1], name, tainted=True)
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace, webhook_deployment(namespace, name)
    )
    core = client.CoreV1Api(api)

    def placed() -> list[str]:
        pods = core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/name=gpu-admission"
        )
        bound = [p.spec.node_name for p in pods.items if p.spec.node_name]
        return bound if len(bound) == 2 else []

    try:
        wait_until(lambda: bool(placed()), "both replicas to be scheduled", timeout=60)
    except AssertionError as error:
        events = core.list_namespaced_event(namespace).items
        said = [
            f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
            for e in events
        ]
        raise AssertionError(f"{error}\n" + "\n".join(said)) from None
    where = placed()
    assert f"{name}-control-plane" not in where
    assert len(set(where)) == (2 if spread else 1), where
