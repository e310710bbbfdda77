"""Shared GPUs as NVIDIA's device plugin ships them: `nvidia.com/gpu` keeps its name when shared
(renameByDefault is false), and gpu-feature-discovery's labels say how the node shares it. A
request is shared when every candidate node shares the resource; the memory share follows it,
the shared-GPU limit refuses more than 1 then, and warns when only some candidates share."""

from __future__ import annotations

from typing import Any

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policy_helpers import make_request, mutate_twice
from webhooks.core.review import Verdict
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies import memory_share
from webhooks.policies.gpu_sharing import classify, node_strategy

GPU = "nvidia.com/gpu"
CONFIG = Config()
MUTATING = memory_share.policies(CONFIG)
VALIDATING = build_policy_set(CONFIG).validating_for("Pod")


def gfd_node(
    name: str, strategy: str, replicas: int, memory: int = 40960, gpus: int = 1, **labels: str
) -> NodeInfo:
    """A node as gpu-feature-discovery labels it with the device plugin's defaults (no
    renaming): the strategy, the replica count, `-SHARED` on the product when shared, and
    `nvidia.com/gpu` advertised replicas x GPUs times."""
    shared = strategy != "none"
    product = "NVIDIA-A100-SXM4-40GB" + ("-SHARED" if shared else "")
    node_labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
        **labels,
    }
    return NodeInfo(name, node_labels, {"cpu": "16", GPU: str(gpus * max(replicas, 1))})


def gpu_pod(count: str = "1", app: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if app:
        meta["annotations"] = {"gpu-admission.io/gpu-app": app}
    container = {
        "name": "train",
        "image": "pytorch",
        "resources": {"limits": {GPU: count}, "requests": {GPU: count}},
    }
    return {"kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}


def validate(pod: dict[str, Any], view: StaticClusterView) -> Verdict:
    request = make_request(pod, resource="pods")
    outcome = chain.run_validating(request, VALIDATING, view, CONFIG.failure_mode("/validate/pods"))
    return Verdict(outcome.allowed, outcome.message, warnings=tuple(outcome.warnings))


TIME_SLICED = StaticClusterView(nodes=[gfd_node("ts-1", "time-slicing", 4)])
MPS = StaticClusterView(nodes=[gfd_node("mps-1", "mps", 4)])
EXCLUSIVE = StaticClusterView(nodes=[gfd_node("whole-1", "none", 1)])
MIXED = StaticClusterView(
    nodes=[gfd_node("ts-1", "time-slicing", 4, pool="a"), gfd_node("whole-1", "none", 1, pool="a")]
)


def test_node_labels_say_how_a_plain_name_is_shared() -> None:
    assert node_strategy(gfd_node("n", "time-slicing", 4), GPU, CONFIG.gpu) == "time-slicing"
    assert node_strategy(gfd_node("n", "mps", 2), GPU, CONFIG.gpu) == "mps"
    assert node_strategy(gfd_node("n", "none", 1), GPU, CONFIG.gpu) is None
    # gpu-feature-discovery writes a strategy only with replicas > 1; a lone label is not enough.
    assert node_strategy(gfd_node("n", "time-slicing", 1), GPU, CONFIG.gpu) is None
    # A renamed resource is shared wherever it is offered; no label means time-slicing.
    bare = NodeInfo("old", {}, {"nvidia.com/gpu.shared": "4"})
    assert node_strategy(bare, "nvidia.com/gpu.shared", CONFIG.gpu) == "time-slicing"


def test_only_nodes_offering_the_resource_count() -> None:
    cpu_only = NodeInfo("cpu", {"nvidia.com/gpu.sharing-strategy": "none"}, {"cpu": "8"})
    sharing = classify(GPU, [*TIME_SLICED.nodes(), cpu_only], CONFIG.gpu)
    assert sharing.everywhere and [n.name for n in sharing.shared] == ["ts-1"]


def test_a_time_sliced_plain_gpu_gets_the_memory_share() -> None:
    _ops, warnings, verdict, patched = mutate_twice(MUTATING, gpu_pod(app="pytorch"), TIME_SLICED)
    assert verdict is None and warnings == []
    env = env_of(patched)
    assert env["GPU_MEMORY_FRACTION"] == "0.237"  # 0.95 / 4
    assert env["GPU_SHARED_REPLICAS"] == "4"
    assert env["GPU_MEMORY_LIMIT_MIB"] == "9707"  # floor(40960 * 0.237)
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "per_process_memory_fraction:0.237"
    annotations = patched["metadata"]["annotations"]
    assert annotations["gpu-admission.io/gpu-memory-fraction"] == "0.237"
    assert annotations["gpu-admission.io/gpu-replicas"] == "4"
    assert annotations["gpu-admission.io/gpu-sharing"] == "time-slicing"


def test_under_mps_the_share_stays_under_the_daemons_limit() -> None:
    _ops, _warnings, verdict, patched = mutate_twice(MUTATING, gpu_pod(app="jax"), MPS)
    assert verdict is None
    env = env_of(patched)
    # The device plugin's MPS daemon caps each client at memory / replicas (10240 MiB here).
    daemon_limit = 40960 // 4
    assert int(env["GPU_MEMORY_LIMIT_MIB"]) <= daemon_limit
    assert float(env["XLA_PYTHON_CLIENT_MEM_FRACTION"]) * 40960 <= daemon_limit
    assert patched["metadata"]["annotations"]["gpu-admission.io/gpu-sharing"] == "mps"


def test_on_exclusive_nodes_nothing_changes() -> None:
    ops, warnings, verdict, _ = mutate_twice(MUTATING, gpu_pod(app="pytorch"), EXCLUSIVE)
    assert (ops, warnings, verdict) == ([], [], None)
    assert validate(gpu_pod("2"), EXCLUSIVE) == Verdict(True)


def test_mixed_candidates_get_the_safe_share_and_a_warning_naming_both_kinds() -> None:
    _ops, warnings, _verdict, patched = mutate_twice(MUTATING, gpu_pod(), MIXED)
    assert env_of(patched)["GPU_MEMORY_FRACTION"] == "0.237"
    assert warnings == [
        f"{GPU}: 1 of 2 candidate nodes share it (time-slicing), the rest give whole GPUs; using "
        "the share of the sharing nodes"
    ]


def test_more_than_one_is_refused_when_every_candidate_shares_it() -> None:
    verdict = validate(gpu_pod("2"), TIME_SLICED)
    assert not verdict.allowed
    assert verdict.message == (
        'container "train" asks for 2 of nvidia.com/gpu, and every node it can run on shares '
        "that GPU (time-slicing, 4 replicas per GPU): the replicas take turns on one GPU (or "
        "split its SMs) and share its memory, so 2 give no more compute than 1; request 1 "
        "nvidia.com/gpu, or run the pod on nodes that give whole GPUs"
    )
    assert "(mps, 4 replicas per GPU)" in validate(gpu_pod("3"), MPS).message
    assert validate(gpu_pod("1"), TIME_SLICED).allowed


def test_more_than_one_on_mixed_candidates_is_a_warning() -> None:
    verdict = validate(gpu_pod("2"), MIXED)
    assert verdict.allowed
    assert verdict.warnings == (
        'container "train" asks for 2 of nvidia.com/gpu: 1 of its 2 candidate nodes share that '
        "GPU (time-slicing), where 2 give no more compute than 1; keep the pod on nodes that give "
        "whole GPUs, or request 1",
    )
    # Placed on the whole-GPU node alone, the same pod is fine.
    assert validate(gpu_pod("2", nodeName="whole-1"), MIXED) == Verdict(True)
