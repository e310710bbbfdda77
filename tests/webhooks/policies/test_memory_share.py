"""GPU memory share: env telling apps on a time-sliced GPU how much memory is theirs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from gpu_admission.config.model import Config, MemoryShareConfig, NoCandidateBehaviour
from tests.webhooks.policy_helpers import FIXTURES, _run_once, mutate_twice
from webhooks.core.review import parse_review
from webhooks.policies import memory_share
from webhooks.policies.share_env import option_value, with_option

R = "nvidia.com/gpu.shared"
MIG = "nvidia.com/mig-1g.10gb.shared"
FRACTION_ANNOTATION = "gpu-admission.io/gpu-memory-fraction"
REPLICAS_ANNOTATION = "gpu-admission.io/gpu-replicas"
POLICIES = memory_share.policies(Config())


def gpu_node(
    name: str,
    replicas: int | None,
    memory: int | None = 23028,
    zone: str = "us-east-1a",
    resource: str = R,
    base: str = "nvidia.com/gpu",
    offered: str | None = None,
    **labels: str | None,
) -> NodeInfo:
    """A GPU node; a label given as None is left out."""
    node_labels = {
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "g5.xlarge",
        "topology.kubernetes.io/zone": zone,
        "nvidia.com/gpu.present": "true",
        **labels,
    }
    node_labels = {k: v for k, v in node_labels.items() if v is not None}
    if replicas is not None:
        node_labels[f"{base}.replicas"] = str(replicas)
    if memory is not None:
        node_labels[f"{base}.memory"] = str(memory)
    offered = offered if offered is not None else str(replicas or 1)
    return NodeInfo(name, node_labels, {"cpu": "4", resource: offered})


TWO_AND_FOUR = StaticClusterView(
    nodes=[
        gpu_node("two-way", 2, zone="us-east-1a", pool="small"),
        gpu_node("four-way", 4, zone="us-east-1c", pool="big"),
        NodeInfo("cpu-1", {"kubernetes.io/os": "linux"}, {"cpu": "8"}),
    ]
)


def fixture(name: str) -> dict[str, Any]:
    return parse_review((FIXTURES / name).read_bytes(), "Pod").object


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def pod(
    *containers: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"kind": "Pod", "metadata": meta, "spec": {"containers": list(containers), **spec}}


def shared(
    name: str = "app", resource: str = R, env: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": "app",
        "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
        **extra,
    }
    if env is not None:
        c["env"] = env
    return c


def test_real_shared_pod_gets_the_worst_case_share() -> None:
    _ops, warnings, verdict, patched = mutate_twice(
        POLICIES, fixture("pod-shared-gpu-1.mutating.json"), TWO_AND_FOUR
    )
    assert verdict is None
    assert env_of(patched["spec"]["containers"][0]) == {
        "GPU_MEMORY_FRACTION": "0.237",  # 0.95 / 4, rounded down
        "GPU_SHARED_REPLICAS": "4",
        "GPU_MEMORY_LIMIT_MIB": "5457",  # floor(23028 * 0.237)
    }
    annotations = patched["metadata"]["annotations"]
    assert annotations[FRACTION_ANNOTATION] == "0.237" and annotations[REPLICAS_ANNOTATION] == "4"
    assert warnings == [f"{R}: replicas 2..4 across 2 nodes; using the safe worst case"]


@pytest.mark.parametrize(
    ("spec", "fraction", "replicas", "limit"),
    [
        ({"nodeSelector": {"pool": "small"}}, "0.475", "2", "10938"),
        ({"nodeSelector": {"pool": "big"}}, "0.237", "4", "5457"),
        ({"nodeName": "two-way"}, "0.475", "2", "10938"),
        ({"nodeName": "four-way"}, "0.237", "4", "5457"),
        ({"nodeSelector": {"kubernetes.io/os": "linux"}}, "0.237", "4", "5457"),
    ],
)
def test_candidates_follow_node_name_and_selector(
    spec: dict[str, Any], fraction: str, replicas: str, limit: str
) -> None:
    _, _warnings, _, patched = mutate_twice(POLICIES, pod(shared(), **spec), TWO_AND_FOUR)
    assert env_of(patched["spec"]["containers"][0]) == {
        "GPU_MEMORY_FRACTION": fraction,
        "GPU_SHARED_REPLICAS": replicas,
        "GPU_MEMORY_LIMIT_MIB": limit,
    }


AFFINITY_VIEW = StaticClusterView(
    nodes=[
        gpu_node("a", 2, zone="us-east-1a"),
        gpu_node("b", 2, memory=24000, zone="us-east-1b"),
        gpu_node("c-out-of-zone", 8, zone="us-east-1c"),
        gpu_node(
            "d-other-type", 8, zone="us-east-1a", **{"node.kubernetes.io/instance-type": "p4d"}
        ),
        gpu_node("e-no-gpu-present", 8, zone="us-east-1b", **{"nvidia.com/gpu.present": None}),
    ]
)


def test_real_affinity_pod_with_pytorch_merges_the_allocator_option() -> None:
    obj = fixture("pod-node-selector-affinity.mutating.json")
    _ops, warnings, _, patched = mutate_twice(POLICIES, obj, AFFINITY_VIEW)
    env = env_of(patched["spec"]["containers"][0])
    assert (
        env["PYTORCH_CUDA_ALLOC_CONF"]
        == "expandable_segments:True,per_process_memory_fraction:0.475"
    )
    assert env["GPU_MEMORY_FRACTION"] == "0.475"
    assert env["GPU_MEMORY_LIMIT_MIB"] == "10938"  # the smaller memory of a and b
    assert env["MODEL_NAME"] == "llama-3-8b"
    assert warnings == [f"{R}: memory 23028..24000 MiB across 2 nodes; using the safe worst case"]


@pytest.mark.parametrize(
    ("operator_expr", "expected_fraction"),
    [
        (
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1c"]},
            "0.118",
        ),
        (
            {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-east-1c"]},
            "0.475",
        ),
        ({"key": "nvidia.com/gpu.present", "operator": "Exists"}, "0.118"),
        ({"key": "rack", "operator": "DoesNotExist"}, "0.118"),
        ({"key": "rank", "operator": "Gt", "values": ["5"]}, "0.475"),
        ({"key": "rank", "operator": "Lt", "values": ["5"]}, "0.118"),
    ],
)
def test_affinity_operators_choose_candidates(
    operator_expr: dict[str, Any], expected_fraction: str
) -> None:
    view = StaticClusterView(
        nodes=[
            gpu_node("low", 8, zone="us-east-1c", rank="1"),
            gpu_node("high", 2, zone="us-east-1a", rank="9"),
        ]
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [operator_expr]}]
            }
        }
    }
    _, _, _, patched = mutate_twice(POLICIES, pod(shared(), affinity=affinity), view)
    assert env_of(patched["spec"]["containers"][0])["GPU_MEMORY_FRACTION"] == expected_fraction


def test_mig_shared_reads_labels_under_the_base_name() -> None:
    base = "nvidia.com/mig-1g.10gb"
    view = StaticClusterView(
        nodes=[
            gpu_node("mig", 2, memory=9728, resource=MIG, base=base, offered="14"),
            gpu_node("timesliced", 8),  # offers nvidia.com/gpu.shared only: not a candidate
        ]
    )
    _, warnings, _, patched = mutate_twice(POLICIES, pod(shared(resource=MIG)), view)
    assert env_of(patched["spec"]["containers"][0]) == {
        "GPU_MEMORY_FRACTION": "0.475",
        "GPU_SHARED_REPLICAS": "2",
        "GPU_MEMORY_LIMIT_MIB": "4620",  # floor(9728 * 0.475)
    }
    assert warnings == []


@pytest.mark.parametrize(
    ("view", "spec", "reason"),
    [
        (StaticClusterView(), {}, f"no node it can run on offers {R}"),
        (TWO_AND_FOUR, {"nodeName": "cpu-1"}, f"no node it can run on offers {R}"),
        (TWO_AND_FOUR, {"nodeSelector": {"pool": "none"}}, f"no node it can run on offers {R}"),
        (
            StaticClusterView(nodes=[gpu_node("x", 4, offered="0")]),
            {},
            f"no node it can run on offers {R}",
        ),
        (
            StaticClusterView(nodes=[gpu_node("unlabelled", None, None, offered="4")]),
            {},
            "its 1 candidate node(s) lack labels nvidia.com/gpu.replicas/memory",
        ),
        (
            StaticClusterView(nodes=[gpu_node("half", 4, None)]),
            {},
            "lack labels nvidia.com/gpu.replicas/memory",
        ),
        (
            StaticClusterView(
                nodes=[
                    gpu_node("bad-label", None, offered="4", **{"nvidia.com/gpu.replicas": "four"})
                ]
            ),
            {},
            "lack labels",
        ),
        (
            StaticClusterView(nodes=[gpu_node("crowded", 1000)]),
            {},
            "1000 replicas per GPU leave under 0.001",
        ),
    ],
)
def test_no_share_skips_with_a_warning_or_denies(
    view: StaticClusterView, spec: dict[str, Any], reason: str
) -> None:
    obj = pod(shared("nb"), **spec)
    ops, warnings, verdict, _ = mutate_twice(POLICIES, obj, view)
    assert ops == [] and verdict is None
    assert len(warnings) == 1
    assert warnings[0].startswith('container "nb": memory share not set: ')
    assert reason in warnings[0]
    assert len(warnings[0]) <= 120

    denying = memory_share.policies(
        Config(memory_share=MemoryShareConfig(on_no_candidates=NoCandidateBehaviour.DENY))
    )
    ops, _, verdict, _ = mutate_twice(denying, obj, view)
    assert verdict is not None and not verdict.allowed
    assert verdict.message.startswith(f'container "nb" requests {R}, but ')
    assert reason in verdict.message and "cannot be set;" in verdict.message


def test_unlabelled_candidates_are_named_and_the_rest_used() -> None:
    view = StaticClusterView(nodes=[gpu_node("ok", 2), gpu_node("bare", None, None, offered="3")])
    _, warnings, _, patched = mutate_twice(POLICIES, pod(shared()), view)
    assert env_of(patched["spec"]["containers"][0])["GPU_MEMORY_FRACTION"] == "0.475"
    assert warnings == [
        f"{R}: 1 of 2 candidate nodes lack labels nvidia.com/gpu.replicas/memory; "
        "share computed from the others"
    ]


USER_FRACTION = {"name": "GPU_MEMORY_FRACTION", "value": "0.9"}


@pytest.mark.parametrize(
    ("profile", "env", "expected", "warning"),
    [
        # The user's value wins, with a warning that does not echo it.
        (
            "generic",
            [USER_FRACTION],
            {
                "GPU_MEMORY_FRACTION": "0.9",
                "GPU_SHARED_REPLICAS": "4",
                "GPU_MEMORY_LIMIT_MIB": "5457",
            },
            'container "app": kept your GPU_MEMORY_FRACTION, not the computed 0.237',
        ),
        (
            "generic",
            [
                {
                    "name": "GPU_SHARED_REPLICAS",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                }
            ],
            {
                "GPU_MEMORY_FRACTION": "0.237",
                "GPU_SHARED_REPLICAS": {"fieldRef": {"fieldPath": "metadata.name"}},
                "GPU_MEMORY_LIMIT_MIB": "5457",
            },
            'container "app": kept your GPU_SHARED_REPLICAS (valueFrom), not the computed 4',
        ),
        (
            "pytorch",
            [
                {
                    "name": "PYTORCH_CUDA_ALLOC_CONF",
                    "value": "per_process_memory_fraction:0.5,expandable_segments:True",
                }
            ],
            {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.5,expandable_segments:True"},
            (
                'container "app": kept your per_process_memory_fraction in '
                "PYTORCH_CUDA_ALLOC_CONF, not the computed 0.237"
            ),
        ),
        (
            "pytorch",
            [
                {
                    "name": "PYTORCH_CUDA_ALLOC_CONF",
                    "value": "roundup_power2_divisions:[256:1,512:2],",
                }
            ],
            {
                "PYTORCH_CUDA_ALLOC_CONF": (
                    "roundup_power2_divisions:[256:1,512:2],per_process_memory_fraction:0.237"
                )
            },
            None,
        ),
        ("pytorch", [], {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.237"}, None),
        (
            "pytorch",
            [{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}],
            {
                "PYTORCH_CUDA_ALLOC_CONF": (
                    "expandable_segments:True,per_process_memory_fraction:0.237"
                )
            },
            None,
        ),
        # jax: one name only, the one every jaxlib reads; newer jaxlib refuses the pair.
        (
            "jax",
            [],
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.237", "XLA_CLIENT_MEM_FRACTION": None},
            None,
        ),
        (
            "jax",
            [{"name": "XLA_CLIENT_MEM_FRACTION", "value": ".5"}],
            {"XLA_CLIENT_MEM_FRACTION": ".5", "XLA_PYTHON_CLIENT_MEM_FRACTION": None},
            (
                'container "app": kept your XLA_CLIENT_MEM_FRACTION (computed 0.237); '
                "no XLA_PYTHON_CLIENT_MEM_FRACTION added"
            ),
        ),
        (
            "jax",
            [{"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": ".5"}],
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5", "XLA_CLIENT_MEM_FRACTION": None},
            'container "app": kept your XLA_PYTHON_CLIENT_MEM_FRACTION, not the computed 0.237',
        ),
        (
            "jax",
            [
                {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": ".5"},
                {"name": "XLA_CLIENT_MEM_FRACTION", "value": ".5"},
            ],
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5", "XLA_CLIENT_MEM_FRACTION": ".5"},
            (
                'container "app": sets XLA_PYTHON_CLIENT_MEM_FRACTION and '
                "XLA_CLIENT_MEM_FRACTION: the framework refuses both; keep one"
            ),
        ),
        (
            "tensorflow",
            [],
            {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
            "tensorflow takes no GPU memory cap from env: apply GPU_MEMORY_LIMIT_MIB with "
            "tf.config.set_logical_device_configuration",
        ),
        # Identical to what would be written: nothing to do, nothing to say.
        (
            "generic",
            [{"name": "GPU_MEMORY_FRACTION", "value": "0.237"}],
            {"GPU_MEMORY_FRACTION": "0.237"},
            None,
        ),
    ],
)
def test_profiles_and_user_values(
    profile: str, env: list[dict[str, Any]], expected: dict[str, Any], warning: str | None
) -> None:
    obj = pod(shared(env=env), annotations={"gpu-admission.io/gpu-app": profile})
    _, warnings, _, patched = mutate_twice(POLICIES, obj, TWO_AND_FOUR)
    got = env_of(patched["spec"]["containers"][0])
    assert {k: got.get(k) for k in expected} == expected
    assert got["GPU_MEMORY_FRACTION"] == expected.get("GPU_MEMORY_FRACTION", "0.237")
    notes = [w for w in warnings if "across" not in w]
    assert notes == ([warning] if warning else [])
    assert all(len(note) <= 120 for note in notes)  # the API server's warning length
    if profile == "generic":
        assert "PYTORCH_CUDA_ALLOC_CONF" not in got and "XLA_CLIENT_MEM_FRACTION" not in got


def test_reinvocation_records_nothing_and_warns_nothing() -> None:
    # Candidates agree, so a warning could only come from mistaking our own values for the user's.
    view = StaticClusterView(nodes=[gpu_node("a", 2)])
    obj = pod(
        shared(env=[{"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"}]),
        annotations={"gpu-admission.io/gpu-app": "pytorch"},
    )
    ops, warnings, _, patched = mutate_twice(POLICIES, obj, view)
    assert ops and warnings == []
    again, again_warnings, verdict, _ = _run_once(POLICIES, patched, view, {})
    assert again == [] and again_warnings == [] and verdict is None
    assert env_of(patched["spec"]["containers"][0])["PYTORCH_CUDA_ALLOC_CONF"] == (
        "expandable_segments:True,per_process_memory_fraction:0.475"
    )


def test_custom_profile_from_config() -> None:
    config = Config(
        memory_share=MemoryShareConfig(
            profiles={
                "vllm": {
                    "VLLM_GPU_UTIL": "{fraction}",
                    "APP_LIMIT": "{limit_mib}Mi of 1/{replicas}",
                }
            }
        )
    )
    obj = pod(shared(), annotations={"gpu-admission.io/gpu-app": "vllm"})
    _, _warnings, _, patched = mutate_twice(memory_share.policies(config), obj, TWO_AND_FOUR)
    env = env_of(patched["spec"]["containers"][0])
    assert env["VLLM_GPU_UTIL"] == "0.237"
    assert env["APP_LIMIT"] == "5457Mi of 1/4"
    assert env["GPU_MEMORY_FRACTION"] == "0.237"  # generic always applies


def test_default_profile_comes_from_config() -> None:
    config = Config(memory_share=MemoryShareConfig(default_profile="jax"))
    _, _, _, patched = mutate_twice(memory_share.policies(config), pod(shared()), TWO_AND_FOUR)
    env = env_of(patched["spec"]["containers"][0])
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.237"
    assert "XLA_CLIENT_MEM_FRACTION" not in env


def test_unknown_profile_warns_and_applies_generic_only() -> None:
    obj = pod(shared(), annotations={"gpu-admission.io/gpu-app": "mxnet"})
    _, warnings, _, patched = mutate_twice(POLICIES, obj, TWO_AND_FOUR)
    assert set(env_of(patched["spec"]["containers"][0])) == {
        "GPU_MEMORY_FRACTION",
        "GPU_SHARED_REPLICAS",
        "GPU_MEMORY_LIMIT_MIB",
    }
    assert any(
        w.startswith('unknown gpu-admission.io/gpu-app "mxnet": applied generic only')
        for w in warnings
    )


def test_headroom_is_configurable() -> None:
    config = Config(memory_share=MemoryShareConfig(headroom=0.9))
    _, _, _, patched = mutate_twice(memory_share.policies(config), pod(shared()), TWO_AND_FOUR)
    assert env_of(patched["spec"]["containers"][0])["GPU_MEMORY_FRACTION"] == "0.225"


def test_new_env_goes_first_so_user_entries_and_args_can_reference_it() -> None:
    vllm = shared(
        "vllm",
        env=[{"name": "UTIL", "value": "$(GPU_MEMORY_FRACTION)"}],
        args=["--gpu-memory-utilization=$(GPU_MEMORY_FRACTION)"],
    )
    _, _, _, patched = mutate_twice(POLICIES, pod(vllm), TWO_AND_FOUR)
    container = patched["spec"]["containers"][0]
    names = [e["name"] for e in container["env"]]
    assert names == ["GPU_MEMORY_FRACTION", "GPU_SHARED_REPLICAS", "GPU_MEMORY_LIMIT_MIB", "UTIL"]
    assert all(set(e) == {"name", "value"} for e in container["env"][:3])  # plain values
    assert container["args"] == ["--gpu-memory-utilization=$(GPU_MEMORY_FRACTION)"]


def test_only_shared_gpu_containers_change_and_annotations_name_each() -> None:
    view = StaticClusterView(
        nodes=[
            gpu_node("a", 4),
            gpu_node(
                "mig", 2, memory=9728, resource=MIG, base="nvidia.com/mig-1g.10gb", offered="14"
            ),
        ]
    )
    obj = pod(
        shared("nb"),
        {"name": "whole", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "cpu", "image": "x"},
        initContainers=[shared("warm", resource=MIG)],
    )
    _, _, _, patched = mutate_twice(POLICIES, obj, view)
    spec = patched["spec"]
    assert env_of(spec["initContainers"][0])["GPU_MEMORY_FRACTION"] == "0.475"
    assert env_of(spec["containers"][0])["GPU_MEMORY_FRACTION"] == "0.237"
    assert "env" not in spec["containers"][1] and "env" not in spec["containers"][2]
    annotations = patched["metadata"]["annotations"]
    assert annotations[FRACTION_ANNOTATION] == "warm=0.475,nb=0.237"
    assert annotations[REPLICAS_ANNOTATION] == "warm=2,nb=4"


def test_env_null_is_replaced() -> None:
    container = shared()
    container["env"] = None
    ops, _, _, _ = mutate_twice(POLICIES, pod(container), TWO_AND_FOUR)
    assert ops[0]["op"] == "replace" and ops[0]["path"] == "/spec/containers/0/env"


def test_mirror_pods_are_skipped() -> None:
    obj = pod(shared(), annotations={"kubernetes.io/config.mirror": "x"})
    ops, warnings, _, _ = mutate_twice(POLICIES, obj, TWO_AND_FOUR)
    assert ops == [] and warnings == []


def test_pods_without_shared_gpus_are_untouched() -> None:
    obj = fixture("pod-gpu.mutating.json")
    original = copy.deepcopy(obj)
    ops, warnings, _, patched = mutate_twice(POLICIES, obj, TWO_AND_FOUR)
    assert ops == [] and warnings == [] and patched == original


def test_the_policy_reads_only_nodes_from_the_view() -> None:
    class NodesOnly(StaticClusterView):
        def secret(self, namespace: str, name: str) -> Any:
            raise AssertionError("memory share must not read Secrets")

        service_account = pvc = secret  # type: ignore[assignment]

    mutate_twice(POLICIES, pod(shared()), NodesOnly(nodes=TWO_AND_FOUR.nodes()))


@pytest.mark.parametrize(
    ("conf", "key", "expected"),
    [
        ("expandable_segments:True", "per_process_memory_fraction", None),
        ("a:1, per_process_memory_fraction : 0.5", "per_process_memory_fraction", "0.5"),
        (
            "roundup_power2_divisions:[per_process_memory_fraction:1]",
            "per_process_memory_fraction",
            None,
        ),
        ("", "x", None),
    ],
)
def test_allocator_option_parsing(conf: str, key: str, expected: str | None) -> None:
    assert option_value(conf, key) == expected


@pytest.mark.parametrize(
    ("conf", "expected"),
    [("", "k:v"), ("  ", "k:v"), ("a:1", "a:1,k:v"), ("a:1,", "a:1,k:v"), ("a:1 , ", "a:1,k:v")],
)
def test_allocator_option_appending(conf: str, expected: str) -> None:
    assert with_option(conf, "k", "v") == expected
