"""The memory share is memoized per placement, and recomputed as soon as any node changes."""

from __future__ import annotations

from typing import Any

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policy_helpers import mutate_twice
from tests.webhooks.server_helpers import MutableView
from webhooks.policies import memory_share

FRACTION = "gpu-admission.io/gpu-memory-fraction"


def gpu_node(name: str, replicas: int) -> NodeInfo:
    return NodeInfo(
        name,
        {
            "pool": "a10g",
            "nvidia.com/gpu.replicas": str(replicas),
            "nvidia.com/gpu.memory": "24000",
        },
        {"nvidia.com/gpu.shared": str(replicas)},
    )


def shared_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nb", "namespace": "ml"},
        "spec": {
            "nodeSelector": {"pool": "a10g"},
            "containers": [{"name": "nb", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
        },
    }


def fraction(policies: list[Any], view: Any) -> str:
    _, _, _, patched = mutate_twice(policies, shared_pod(), view)
    return patched["metadata"]["annotations"][FRACTION]


def test_a_changed_node_is_seen_by_the_next_pod():
    policies = memory_share.policies(Config())
    view = MutableView()
    view.node_records["a"] = gpu_node("a", 2)
    assert fraction(policies, view) == "0.475"
    view.node_records["a"] = gpu_node("a", 4)  # time-slicing reconfigured
    assert fraction(policies, view) == "0.237"
    view.node_records["b"] = gpu_node("b", 8)  # a node joins the pool
    assert fraction(policies, view) == "0.118"


def test_another_view_never_gets_a_result_computed_for_the_first():
    policies = memory_share.policies(Config())
    assert fraction(policies, StaticClusterView(nodes=[gpu_node("a", 2)])) == "0.475"
    assert fraction(policies, StaticClusterView(nodes=[gpu_node("a", 5)])) == "0.19"
