"""Generated pods and clusters: every patch applies, a second pass records nothing, nothing raises.

Odd shapes on purpose: duplicate and null env, valueFrom, quantities like "2000m" or "junk",
malformed affinity, nodes with missing or nonsense labels.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from gpu_admission.config.model import Config, MemoryShareConfig, NoCandidateBehaviour
from tests.webhooks.policy_helpers import make_request, mutate_twice
from webhooks.policies import gpu_env_guard, gpu_visibility, memory_share, shared_gpu_limit

GENERATED = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,  # the same examples every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-1g.10gb.shared",
    "nvidia.com/gpus",
    "cpu",
    "memory",
]
# Shared resources weigh more: the memory-share path needs them.
RESOURCE_NAMES = st.sampled_from(
    [*RESOURCES, *["nvidia.com/gpu.shared"] * 4, *["nvidia.com/mig-1g.10gb.shared"] * 3]
)
QUANTITIES = st.one_of(
    st.sampled_from(["1", "2", "0", "2000m", "500m", "1.5", "1e3", "junk", "", "1Ki"]),
    st.integers(-2, 5),
    st.sampled_from([1.0, 2.5]),
)
ENV_NAMES = [
    "NVIDIA_VISIBLE_DEVICES",
    "GPU_MEMORY_FRACTION",
    "GPU_SHARED_REPLICAS",
    "GPU_MEMORY_LIMIT_MIB",
    "PYTORCH_CUDA_ALLOC_CONF",
    "XLA_CLIENT_MEM_FRACTION",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "OTHER",
]
ENV_VALUES = st.one_of(
    st.sampled_from(["none", "all", "0.5", "expandable_segments:True", "a:[1:2,3:4],", ""]),
    st.text(alphabet=":,[] abp0.5_", max_size=12),
)
ENV_ENTRY = st.one_of(
    st.fixed_dictionaries({"name": st.sampled_from(ENV_NAMES), "value": ENV_VALUES}),
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(ENV_NAMES),
            "valueFrom": st.just({"configMapKeyRef": {"name": "cm", "key": "k"}}),
        }
    ),
    st.fixed_dictionaries({"name": st.sampled_from(ENV_NAMES)}),
)
LABEL_KEYS = ["zone", "pool", "rank", "nvidia.com/gpu.present"]
LABEL_VALUES = st.sampled_from(["a", "b", "1", "7", "true", "x"])
MIRROR = "kubernetes.io/config.mirror"
NODE_NAMES = ["n1", "n2", "n3", "n4"]


def _absent_null_or(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just("<absent>"), st.none(), strategy)


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value != "<absent>":
        target[key] = value


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": f"{prefix}{draw(st.integers(0, 3))}", "image": "cuda"}
    resources: dict[str, Any] = {}
    if draw(st.booleans()):  # a typical shared-GPU container
        name = draw(st.sampled_from(["nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.shared"]))
        resources["limits"] = {name: draw(st.sampled_from(["1", 1, "1000m", "2"]))}
    else:
        for field in ("limits", "requests"):
            quantities = st.dictionaries(RESOURCE_NAMES, QUANTITIES, max_size=3)
            _put(resources, field, draw(_absent_null_or(quantities)))
    _put(container, "resources", resources if draw(st.integers(0, 3)) else "<absent>")
    _put(container, "env", draw(_absent_null_or(st.lists(ENV_ENTRY, max_size=5))))
    if draw(st.booleans()):
        container["envFrom"] = [{"configMapRef": {"name": "cm"}}]
    return container


EXPRESSION = st.fixed_dictionaries(
    {
        "key": st.sampled_from(LABEL_KEYS),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]),
    },
    optional={"values": st.lists(st.sampled_from(["a", "b", "1", "5", "x"]), max_size=2)},
)
FIELD = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["metadata.name", "spec.unschedulable"]),
        "operator": st.sampled_from(["In", "NotIn", "Exists"]),
        "values": st.lists(st.sampled_from(NODE_NAMES), max_size=2),
    }
)
TERM = st.fixed_dictionaries(
    {},
    optional={
        "matchExpressions": st.one_of(st.none(), st.lists(EXPRESSION, max_size=3)),
        "matchFields": st.one_of(st.none(), st.lists(FIELD, max_size=1)),
    },
)
AFFINITY = st.one_of(
    st.none(),
    st.just({}),
    st.builds(
        lambda terms: {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        },
        st.lists(TERM, max_size=3),
    ),
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers("c"), min_size=1, max_size=3))}
    _put(spec, "initContainers", draw(_absent_null_or(st.lists(containers("i"), max_size=2))))
    _put(spec, "ephemeralContainers", draw(_absent_null_or(st.lists(containers("e"), max_size=2))))
    if draw(st.booleans()):  # the other half may go anywhere, so shares get computed
        selectors = st.dictionaries(st.sampled_from(LABEL_KEYS), LABEL_VALUES, max_size=2)
        _put(spec, "nodeSelector", draw(_absent_null_or(selectors)))
        _put(spec, "affinity", draw(st.one_of(st.just("<absent>"), AFFINITY)))
        node_names = st.sampled_from([*NODE_NAMES, "gone"])
        _put(spec, "nodeName", draw(st.one_of(st.just("<absent>"), node_names)))
    profiles = st.sampled_from(["pytorch", "jax", "tensorflow", "generic", "custom", "weird", ""])
    annotations = draw(
        st.one_of(
            st.fixed_dictionaries({"gpu-admission.io/gpu-app": profiles}),
            _absent_null_or(
                st.dictionaries(
                    st.sampled_from(["gpu-admission.io/gpu-app", MIRROR, "other"]),
                    profiles,
                    max_size=2,
                )
            ),
        )
    )
    metadata: dict[str, Any] = {"name": "p", "namespace": "ml"}
    _put(metadata, "annotations", annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@st.composite
def odd_nodes(draw: st.DrawFn) -> list[NodeInfo]:
    """Nodes with missing, zero or nonsense labels and allocatable."""
    result = []
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=4)):
        labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), LABEL_VALUES, max_size=3))
        for base in GPU_BASES:
            for suffix, values in (
                (".replicas", ["1", "2", "4", "0", "x", "2000"]),
                (".memory", ["23028", "9728", "0", "-1", "big"]),
            ):
                if draw(st.booleans()):
                    labels[base + suffix] = draw(st.sampled_from(values))
        allocatable = draw(
            st.dictionaries(
                st.sampled_from(RESOURCES),
                st.sampled_from(["0", "1", "4", "14", "2000m", "junk"]),
                max_size=3,
            )
        )
        result.append(NodeInfo(name, labels, allocatable))
    return result


@st.composite
def labelled_nodes(draw: st.DrawFn) -> list[NodeInfo]:
    """Nodes as gpu-feature-discovery labels them, so shares get computed (and disagree)."""
    result = []
    for name in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, min_size=1, max_size=4)):
        labels = draw(st.dictionaries(st.sampled_from(LABEL_KEYS), LABEL_VALUES, max_size=2))
        for base in GPU_BASES:
            labels[base + ".replicas"] = draw(st.sampled_from(["1", "2", "4", "7"]))
            labels[base + ".memory"] = draw(st.sampled_from(["23028", "9728", "40960"]))
        allocatable = {"nvidia.com/gpu.shared": "4", "nvidia.com/mig-1g.10gb.shared": "14"}
        result.append(NodeInfo(name, labels, allocatable))
    return result


GPU_BASES = ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
CLUSTERS = st.one_of(odd_nodes(), labelled_nodes())


CUSTOM = {"custom": {"APP_SHARE": "{fraction} of {limit_mib} over {replicas}"}}
SKIPPING = Config(memory_share=MemoryShareConfig(profiles=CUSTOM))
DENYING = Config(
    memory_share=MemoryShareConfig(profiles=CUSTOM, on_no_candidates=NoCandidateBehaviour.DENY)
)


def _mutating(config: Config) -> list[Any]:
    return [*gpu_visibility.policies(config), *memory_share.policies(config)]


def _validating(config: Config) -> list[Any]:
    return [*gpu_env_guard.policies(config), *shared_gpu_limit.policies(config)]


MUTATING = {False: _mutating(SKIPPING), True: _mutating(DENYING)}
VALIDATING = _validating(SKIPPING)


def _check(ops: list[dict[str, Any]], patched: dict[str, Any]) -> None:
    json.dumps(ops)  # the response carries them as JSON
    for container in [
        *(patched["spec"].get("initContainers") or []),
        *patched["spec"]["containers"],
        *(patched["spec"].get("ephemeralContainers") or []),
    ]:
        for entry in container.get("env") or []:
            assert "value" not in entry or isinstance(entry["value"], str)


@GENERATED
@given(pod=pods(), cluster=CLUSTERS, deny=st.booleans())
def test_pod_create(pod: dict[str, Any], cluster: list[NodeInfo], deny: bool) -> None:
    view = StaticClusterView(nodes=cluster)
    original = copy.deepcopy(pod)
    ops, _, verdict, patched = mutate_twice(MUTATING[deny], pod, view)
    assert pod == original  # the caller's object is never changed
    if verdict is None or verdict.allowed:
        _check(ops, patched)
    request = make_request(patched)
    for policy in VALIDATING:
        if policy.scope.matches(request):
            assert policy.validate(request, view).allowed in (True, False)


@GENERATED
@given(pod=pods(), added=st.lists(containers("new"), min_size=1, max_size=2))
def test_ephemeral_container_update(pod: dict[str, Any], added: list[dict[str, Any]]) -> None:
    old = copy.deepcopy(pod)
    pod["spec"]["ephemeralContainers"] = [*(pod["spec"].get("ephemeralContainers") or []), *added]
    fields = {"operation": "UPDATE", "sub_resource": "ephemeralcontainers", "old_object": old}
    ops, _, _, patched = mutate_twice(MUTATING[False], pod, StaticClusterView(), **fields)
    _check(ops, patched)
    # Only ephemeral containers change through this subresource.
    assert all(op["path"].startswith("/spec/ephemeralContainers/") for op in ops)
    assert patched["spec"]["containers"] == pod["spec"]["containers"]
    request = make_request(patched, **fields)
    for policy in VALIDATING:
        if policy.scope.matches(request):
            policy.validate(request, StaticClusterView())
