"""One truth: the ValidatingAdmissionPolicy's CEL, evaluated by a real CEL runtime as the API
emulator evaluates it, against the Python policies the webhook runs, over generated pods."""

from __future__ import annotations

import asyncio
import fnmatch
import re
from fractions import Fraction
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commands.admission_policy import write_admission_policy
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config import Config, FailureMode
from tests import ROOT
from tests.webhooks.policy_helpers import make_request
from tests.world.kubeapi import quantity as apimachinery
from tests.world.kubeapi.admission_policy import PolicyAdmission, policy_causes
from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.errors import StatusError
from webhooks import chain
from webhooks.admission_policy import (
    FALLBACK_MESSAGE,
    _glob_regex,
    admission_policy,
    admission_policy_binding,
    denial_text,
    policy_denial,
)
from webhooks.pod_webhook_condition import webhook_condition, webhook_sees
from webhooks.policies.quantity import parse_quantity
from webhooks.registry import build_policy_set

CONFIG = Config()
POLICIES = build_policy_set(CONFIG).validating_for("Pod")
RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-2g.10gb.shared",
    "cpu",
    "example.com/fpga.shared",
]
QUANTITY_CHARS = "0123456789.+-eEkKmMGTiun"

names = st.text("abcdefghij-0123", min_size=1, max_size=6).filter(
    lambda n: n[0] != "-" and n[-1] != "-"
)
realistic = st.sampled_from(["0", "1", "2", "3", "1k", "500m", "1000m", "2000m", "1.5", "0.5"])
odd = st.text(QUANTITY_CHARS, min_size=0, max_size=5).filter(
    lambda t: "e" not in t.lower() or t.lower().split("e")[-1].lstrip("+-")[:2].isdigit()
)
quantities = st.one_of(realistic, odd, st.sampled_from(["lots", "1e3", "1E2", "2Ki", "-1"]))
resource_maps = st.dictionaries(st.sampled_from(RESOURCES), quantities, max_size=3)
env_entries = st.lists(
    st.builds(
        lambda name, by_ref: (
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "x"}}}
            if by_ref
            else {"name": name, "value": "all"}
        ),
        st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "PATH"]),
        st.booleans(),
    ),
    max_size=3,
)


@st.composite
def containers(draw: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(names), "image": "cuda"}
    limits, requests = draw(resource_maps), draw(resource_maps)
    if draw(st.booleans()):  # as the API server defaults extended resources: requests = limits
        requests = {**requests, **limits}
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    if resources:
        container["resources"] = resources
    env = draw(env_entries)
    if env:
        container["env"] = env
    return container


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=3))}
    for field, most in (("initContainers", 2), ("ephemeralContainers", 1)):
        items = draw(st.lists(containers(), max_size=most))
        if items:
            spec[field] = items
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _attrs(pod: dict[str, Any], operation: str = "CREATE", old: Any = None) -> AdmissionAttributes:
    return AdmissionAttributes(
        operation=operation,
        group="",
        version="v1",
        resource="pods",
        subresource="" if operation == "CREATE" else "ephemeralcontainers",
        kind_group="",
        kind_version="v1",
        kind="Pod",
        namespace="ml",
        name="p",
        object=pod,
        old_object=old,
        dry_run=False,
    )


def cluster_verdict(
    pod: dict[str, Any], operation: str = "CREATE", old: Any = None, config: Config = CONFIG
) -> str | None:
    """What the emulator, evaluating the policy with the CEL runtime, answers: None, or the
    policy's message (after kube-apiserver's `... denied request: `)."""
    policy, binding = admission_policy(config), admission_policy_binding()
    objects = {
        "validatingadmissionpolicies": [policy],
        "validatingadmissionpolicybindings": [binding],
    }

    async def lister(resource: str) -> list[dict[str, Any]]:
        return objects.get(resource, [])

    async def namespace(_: AdmissionAttributes) -> dict[str, Any]:
        return {"metadata": {"name": "ml", "labels": {"kubernetes.io/metadata.name": "ml"}}}

    try:
        asyncio.run(PolicyAdmission(lister, namespace).validate(_attrs(pod, operation, old)))
    except StatusError as error:
        assert error.code == 422 and error.reason == "Invalid"
        prefix = 'pods "p" is forbidden: ' + denial_text("")
        assert error.message.startswith(prefix)
        return error.message.removeprefix(prefix)
    return None


def webhook_verdict(pod: dict[str, Any], operation: str = "CREATE", old: Any = None) -> str | None:
    request = make_request(
        pod,
        resource="pods",
        sub_resource="" if operation == "CREATE" else "ephemeralcontainers",
        operation=operation,
        namespace="ml",
        old_object=old,
    )
    outcome = chain.run_validating(request, POLICIES, StaticClusterView(), FailureMode.DENY)
    return None if outcome.allowed else outcome.message


def _parts(message: str) -> list[str]:
    # Within one container, map order decides the order of its resources' problems (Go maps
    # iterate at random); compare the problems as a multiset.
    return sorted(message.split("; "))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_the_policy_and_the_webhook_agree_on_every_pod(pod: dict[str, Any]) -> None:
    webhook = webhook_verdict(pod)
    cluster = cluster_verdict(pod)
    assert (webhook is None) == (cluster is None), (webhook, cluster)
    if webhook is None or cluster is None:
        return
    expected = webhook if len(webhook.encode()) <= 5 * 1024 else FALLBACK_MESSAGE
    assert _parts(cluster) == _parts(expected)
    # `review`'s reading of the policy says the same.
    assert _parts(policy_denial(pod, CONFIG) or "") == _parts(cluster)


@settings(max_examples=100, deadline=None)
@given(pods(), st.lists(containers(), min_size=1, max_size=2))
def test_they_agree_on_added_ephemeral_containers(
    pod: dict[str, Any], added: list[dict[str, Any]]
) -> None:
    old = pod
    new = {**pod, "spec": {**pod["spec"]}}
    new["spec"]["ephemeralContainers"] = [*pod["spec"].get("ephemeralContainers", []), *added]
    webhook = webhook_verdict(new, "UPDATE", old)
    cluster = cluster_verdict(new, "UPDATE", old)
    assert (webhook is None) == (cluster is None), (webhook, cluster)
    if webhook is not None and cluster is not None:
        assert _parts(cluster) == _parts(webhook)


@settings(max_examples=500, deadline=None)
@given(st.one_of(quantities, st.text(QUANTITY_CHARS + " x", max_size=6)))
def test_quantities_parse_as_apimachinery_parses_them(text: str) -> None:
    """Equal in what the policies ask of a value: a quantity or not, its sign, above 1, whole
    within int64 (the product clamps absurd exponents, which keeps all four)."""

    def reading(value: Fraction | None) -> tuple[Any, ...] | None:
        if value is None:
            return None
        return ((value > 0) - (value < 0), value > 1, apimachinery.as_int64(value) is not None)

    try:
        expected = apimachinery.parse(text)
    except apimachinery.QuantityError:
        expected = None
    assert reading(parse_quantity(text)) == reading(expected)
    if expected is not None and abs(expected) < 10**30:
        assert parse_quantity(text) == expected


def _limits(name: str, value: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "t", "resources": {"limits": {name: value}}}]}}


def test_the_webhook_sees_claims_and_plain_gpus_over_one_and_only_those() -> None:
    claim_pod = {
        "spec": {
            "containers": [{"name": "t", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        }
    }
    gpu = CONFIG.gpu
    assert webhook_sees(claim_pod, gpu)
    assert webhook_sees(_limits("nvidia.com/gpu", "2"), gpu)  # plain name: the nodes decide
    assert webhook_sees(_limits("nvidia.com/mig-1g.5gb", "3"), gpu)
    assert not webhook_sees(_limits("nvidia.com/gpu", "1"), gpu)
    assert not webhook_sees(_limits("nvidia.com/gpu.shared", "2"), gpu)  # the policy's own case
    assert not webhook_sees(_limits("cpu", "4"), gpu)
    webhooks = yaml.safe_load_all((ROOT / "manifests" / "base" / "webhooks.yaml").read_text())
    validating = next(d for d in webhooks if d["kind"] == "ValidatingWebhookConfiguration")
    pods_hook = next(w for w in validating["webhooks"] if w["name"].startswith("pods."))
    (condition,) = pods_hook["matchConditions"]
    assert " ".join(condition["expression"].split()) == webhook_condition(gpu), (
        "regenerate with `gpu-admission admission-policy --webhook-condition`"
    )


def test_the_default_manifests_carry_the_policy_for_the_deployed_config(tmp_path) -> None:
    with (tmp_path / "out.yaml").open("w") as out:
        write_admission_policy(None, out)
    generated = (tmp_path / "out.yaml").read_text()
    assert generated == (ROOT / "manifests" / "base" / "admission-policy.yaml").read_text(), (
        "regenerate with `gpu-admission admission-policy > manifests/base/admission-policy.yaml`"
    )


def test_a_custom_config_changes_the_cel() -> None:
    config = Config.model_validate(
        {"gpu": {"resource_patterns": ["amd.com/gpu*"], "guarded_env": ["ROCR_VISIBLE_DEVICES"]}}
    )
    text = yaml.safe_dump(admission_policy(config))
    assert "amd.com/gpu" in text and "ROCR_VISIBLE_DEVICES" in text
    assert "nvidia.com" not in text


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("nvidia.com/mig-*", "nvidia.com/mig-1g.5gb", True),
        ("nvidia.com/mig-?g.*", "nvidia.com/mig-2g.10gb", True),
        ("nvidia.com/mig-?g.*", "nvidia.com/mig-22g.10gb", False),
        ("gpu.[ab]/x", "gpu.a/x", True),
        ("gpu.[!ab]/x", "gpu.a/x", False),
        ("gpu.[!ab]/x", "gpu.c/x", True),
    ],
)
def test_resource_patterns_match_in_cel_as_in_python(
    pattern: str, name: str, matches: bool
) -> None:
    config = Config.model_validate({"gpu": {"resource_patterns": [pattern]}})
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {name: "1"}},
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                }
            ]
        }
    }
    assert config.gpu.is_gpu_resource(name) is matches
    assert (cluster_verdict(pod, config=config) is not None) is matches


PATTERN_CHARS = "abcnv0123./-_*?[]!^\\'\" "


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.text(PATTERN_CHARS, min_size=1, max_size=12), min_size=1, max_size=3),
    st.lists(st.text(".-_abs", min_size=1, max_size=6), min_size=1, max_size=2),
    st.lists(st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True), max_size=3),
)
def test_the_printed_policy_compiles_in_kubernetes_cel_for_any_valid_config(
    patterns: list[str], suffixes: list[str], guarded: list[str]
) -> None:
    """What `gpu-admission admission-policy` and `--webhook-condition` print for any config
    compiles in the CEL environment kube-apiserver 1.36 declares (the test world's, held to the
    real server's verdicts; the real-API tier applies a custom config's to the real server)."""
    config = Config.model_validate(
        {
            "gpu": {
                "resource_patterns": patterns,
                "shared_suffixes": suffixes,
                "guarded_env": guarded,
            }
        }
    )
    assert policy_causes(admission_policy(config)) == []
    condition = {"name": "c", "expression": webhook_condition(config.gpu)}
    probe = {
        "metadata": {"name": "p"},
        "spec": {"matchConditions": [condition], "validations": [{"expression": "true"}]},
    }
    assert policy_causes(probe) == []


@settings(max_examples=400, deadline=None)
@given(st.text(PATTERN_CHARS, min_size=1, max_size=10), st.text("abc0./-_[]!^\\", max_size=8))
def test_the_cel_regex_of_a_pattern_matches_what_fnmatch_matches(pattern: str, name: str) -> None:
    # Python's re reads this RE2 subset alike; the CEL runtime runs it in the test above.
    assert (re.fullmatch(_glob_regex(pattern), name) is not None) is fnmatch.fnmatchcase(
        name, pattern
    )
