"""The pod checks as a real kube-apiserver 1.36 runs them: the base's ValidatingAdmissionPolicy
denies the examples' env-tampering and over-asking pods with the words `review` and the docs
give, and agrees with the Python policies over generated pods.

The base is applied for real but for its two webhook configurations: no webhook service runs
behind this API server (`apply_base`). What is under test is the policy alone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, FailureMode
from tests import ROOT
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.webhooks.pod_strategies import KAI_ANNOTATIONS, KAI_MAPS, SCHEDULERS
from tests.webhooks.policy_helpers import make_request
from webhooks.apiserver_policies.pod_checks import denial_text, policy_denial
from webhooks.apiserver_policies.visibility_mutation import changes
from webhooks.core.pod_defaults import default_pod
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set

NAMESPACE = "ml"  # the examples' namespace
POLICIES = build_policy_set(Config()).validating_for("Pod")
# Exempt from the policy: a dry run there answers the pod as the server stores it (requests
# defaulted from limits, quantities in canonical form, `2000m` as `2`).
EXEMPT = "exempt-probe"
EXAMPLE_PODS = [
    doc
    for path in sorted((ROOT / "examples" / "manifests").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc and doc.get("kind") == "Pod"
]


@pytest.fixture(scope="module")
def core(kubectl: Kubectl, api: client.ApiClient) -> client.CoreV1Api:
    apply_base(kubectl)
    namespace_ready(api, NAMESPACE)
    namespace_ready(api, EXEMPT, labels={Config().exempt_label: "true"})
    return client.CoreV1Api(api)


def stored(core: client.CoreV1Api, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server holds it once decoded and defaulted."""
    created = core.create_namespaced_pod(EXEMPT, pod, dry_run="All")
    return dict(core.api_client.sanitize_for_serialization(created))


def server_denial(core: client.CoreV1Api, pod: dict[str, Any]) -> str | None:
    """None when the server admits the pod (dry run), else the denial's Status message."""
    namespace = pod["metadata"].get("namespace") or NAMESPACE  # ml, or kube-system
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except client.ApiException as error:
        return str(json.loads(error.body)["message"])
    return None


def hidden(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the policy sees it: after the GPU-visibility policy (every mutation comes
    before any validation)."""
    return changes(pod, None, Config())[0]


def expected(pod: dict[str, Any], hide: bool = True) -> str | None:
    """What `review` says the policy answers, as the server words a 422 from it; `hide`: after
    the GPU-visibility policy, as in a namespace that is not exempt."""
    pod = default_pod(pod)
    message = policy_denial(hidden(pod) if hide else pod, Config())
    if message is None:
        return None
    return f'pods "{pod["metadata"]["name"]}" is forbidden: {denial_text(message)}'


def test_the_examples_hold_both_kinds_of_denial() -> None:
    denied = {p["metadata"]["name"] for p in EXAMPLE_PODS if expected(p)}
    assert {"sees-all-gpus", "notebook-shared-2"} <= denied


@pytest.mark.parametrize("pod", EXAMPLE_PODS, ids=[p["metadata"]["name"] for p in EXAMPLE_PODS])
def test_the_examples_are_answered_as_review_says(core: client.CoreV1Api, pod: dict) -> None:
    assert server_denial(core, pod) == expected(pod)


# -- agreement over generated pods -------------------------------------------------------------

RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/gpumem",  # HAMi's: asks for a GPU, counts none
    "cpu",
]
# Quantities the API server accepts for an extended resource (whole numbers); fractions and
# junk are refused by its own validation before any policy runs.
WHOLE = st.sampled_from(["0", "1", "2", "3", "1000m", "2000m", "1k"])
GUARDED = st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "PATH"])
# What a GPU-sharing scheduler's pod may carry: hidden values, and the fraction's env from
# KAI's ConfigMap for the pod or from one of its author's.
SCHEDULER_ENV = st.sampled_from(
    [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {
                "configMapKeyRef": {"name": f"{KAI_MAPS}-0", "key": "NVIDIA_VISIBLE_DEVICES"}
            },
        },
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
        },
    ]
)


@st.composite
def containers(draw: Any, name: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "cuda"}
    limits = draw(st.dictionaries(st.sampled_from(RESOURCES), WHOLE, max_size=3))
    if limits:
        # Extended resources: a request, where given, must equal the limit.
        container["resources"] = {"limits": limits}
        if draw(st.booleans()):
            container["resources"]["requests"] = dict(limits)
    env = draw(
        st.lists(
            st.builds(
                lambda n, by_ref: (
                    {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    if by_ref
                    else {"name": n, "value": "all"}
                ),
                GUARDED,
                st.booleans(),
            )
            | SCHEDULER_ENV,
            max_size=3,
        )
    )
    if env:
        container["env"] = env
    return container


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    spec: dict[str, Any] = {"containers": [draw(containers(f"c{i}")) for i in range(count)]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init"))]
    # Under KAI-Scheduler or not, placed by hand or not, as its webhook names the ConfigMaps.
    spec["schedulerName"] = draw(SCHEDULERS)
    if draw(st.integers(0, 3)) == 0:
        spec["nodeName"] = "gpu-node-1"
    metadata: dict[str, Any] = {"name": "p"}
    annotations = draw(KAI_ANNOTATIONS)
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pod=pods())
def test_the_real_server_and_the_python_policies_agree(core: client.CoreV1Api, pod: dict) -> None:
    # The Python policies read the pod as the webhook receives it: as the server stores it.
    as_stored = stored(core, pod)
    denied = server_denial(core, pod)
    assert denied == expected(as_stored)
    # The webhook's own validating chain, which runs where the policy cannot, agrees too.
    request = make_request(
        hidden(as_stored), resource="pods", operation="CREATE", namespace=NAMESPACE
    )
    outcome = chain.run_validating(request, POLICIES, StaticClusterView(), FailureMode.DENY)
    assert outcome.allowed is (denied is None), (outcome.message, denied)
