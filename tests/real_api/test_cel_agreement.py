"""The pod checks' CEL against the Python the webhook and `review` run, decided by a real
kube-apiserver 1.36 (its CEL environment and libraries, its validation of a policy when it is
written, its evaluation at admission): debug containers added to a running pod, resource-name
patterns, any config's printed policy, and quantities as the Kubernetes CEL library reads them.

Pods the server's own validation refuses (a fractional extended resource, junk quantities,
resources on an ephemeral container) never reach a policy, so none are generated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from kubernetes import client

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, FailureMode
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.test_pod_checks import EXEMPT, expected, pods, stored
from tests.support.waits import while_running
from tests.webhooks.policy_helpers import make_request
from tests.world.harness import delete_policy
from webhooks.apiserver_policies.pod_checks import admission_policy, admission_policy_binding
from webhooks.apiserver_policies.webhook_routing import webhook_condition
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.quantity import is_int64, parse_quantity

NAMESPACE = "ml"
PROBES = "cel-probes"  # where the probe policies below apply, and nowhere else
WAIT = 60
FIXTURES = [HealthCheck.function_scoped_fixture]
POLICIES = build_policy_set(Config()).validating_for("Pod")


@pytest.fixture(scope="module")
def core(kubectl: Kubectl, api: client.ApiClient) -> client.CoreV1Api:
    apply_base(kubectl)
    namespace_ready(api, NAMESPACE)
    # Exempt from the base's policy: only the probe policies below judge pods there.
    namespace_ready(api, PROBES, labels={Config().exempt_label: "true"})
    namespace_ready(api, EXEMPT, labels={Config().exempt_label: "true"})
    return client.CoreV1Api(api)


def webhook_verdict(pod: dict[str, Any], old: dict[str, Any]) -> str | None:
    request = make_request(
        pod,
        resource="pods",
        sub_resource="ephemeralcontainers",
        operation="UPDATE",
        namespace=NAMESPACE,
        old_object=old,
    )
    outcome = chain.run_validating(request, POLICIES, StaticClusterView(), FailureMode.DENY)
    return None if outcome.allowed else outcome.message


def denial(call: Any) -> str | None:
    try:
        call()
    except client.ApiException as error:
        assert error.status in (403, 422), error.body
        return str(json.loads(error.body)["message"])
    return None


# -- debug containers -------------------------------------------------------------------------

debuggers = st.lists(
    st.builds(
        lambda name, env: {"name": name, "image": "cuda", **({"env": env} if env else {})},
        st.sampled_from(["debug-a", "debug-b"]),
        st.lists(
            st.sampled_from(
                [
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
                    {"name": "PATH", "value": "/bin"},
                ]
            ),
            max_size=2,
            unique_by=lambda e: e["name"],
        ),
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda c: c["name"],
)


@pytest.fixture
def running(core: client.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES)
@given(pod=pods(), added=debuggers)
def test_debug_containers_are_judged_alike(
    core: client.CoreV1Api, running: list[str], pod: dict[str, Any], added: list[dict[str, Any]]
) -> None:
    """`kubectl debug` adds ephemeral containers to a pod the policy admitted: the server's
    verdict on the ephemeralcontainers update is the webhook's."""
    pod = json.loads(json.dumps(pod))
    pod["metadata"]["name"] = f"debugged-{len(running)}"
    assume(denial(lambda: core.create_namespaced_pod(NAMESPACE, pod, dry_run="All")) is None)
    name = pod["metadata"]["name"]
    core.create_namespaced_pod(NAMESPACE, pod)
    running.append(name)

    def debugged() -> tuple[dict[str, Any], dict[str, Any], str | None] | None:
        # The scheduler writes the pod's status meanwhile: on a conflict, read it again.
        old = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, NAMESPACE))
        new = json.loads(json.dumps(old))
        new["spec"]["ephemeralContainers"] = added
        try:
            core.replace_namespaced_pod_ephemeralcontainers(name, NAMESPACE, new, dry_run="All")
        except client.ApiException as error:
            if error.status == 409:
                return None
            assert error.status in (403, 422), error.body
            return old, new, str(json.loads(error.body)["message"])
        return old, new, None

    old, new, server = while_running(debugged, "an update without a conflict", {}, WAIT)
    webhook = webhook_verdict(new, old)
    assert (server is None) == (webhook is None), (server, webhook)
    if server is not None and webhook is not None:
        assert server.endswith(webhook), (server, webhook)


# -- any config's policy is one the server accepts -------------------------------------------

PATTERN_CHARS = "abcnv0123./-_*?[]!^\\'\" "


def probe_policy(
    config: Config, name: str, namespace: str = PROBES
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The config's pod-check policy under `name`, for `namespace` only."""
    policy = admission_policy(config, name=name)
    policy["spec"]["matchConstraints"]["namespaceSelector"] = {
        "matchLabels": {"kubernetes.io/metadata.name": namespace}
    }
    binding = admission_policy_binding(name=name)
    return policy, binding


@settings(max_examples=40, deadline=None, suppress_health_check=FIXTURES)
@given(
    st.lists(st.text(PATTERN_CHARS, min_size=1, max_size=12), min_size=1, max_size=3),
    st.lists(st.text(".-_abs", min_size=1, max_size=6), min_size=1, max_size=2),
    st.lists(st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True), max_size=3),
)
def test_the_printed_policy_of_any_valid_config_is_accepted(
    core: client.CoreV1Api, patterns: list[str], suffixes: list[str], guarded: list[str]
) -> None:
    """What `gpu-admission admission-policy` and `--webhook-condition` print for any config
    compiles: the server compiles a policy's CEL when it is written (a dry run), and refuses
    what does not."""
    config = Config.model_validate(
        {
            "gpu": {
                "resource_patterns": patterns,
                "shared_suffixes": suffixes,
                "guarded_env": guarded,
            }
        }
    )
    registration = client.AdmissionregistrationV1Api(core.api_client)
    policy, _ = probe_policy(config, "printed-probe")
    registration.create_validating_admission_policy(policy, dry_run="All")
    condition = {"name": "c", "expression": webhook_condition(config.gpu)}
    probe = {
        "metadata": {"name": "condition-probe"},
        "spec": {
            "matchConstraints": policy["spec"]["matchConstraints"],
            "matchConditions": [condition],
            "validations": [{"expression": "true"}],
        },
    }
    registration.create_validating_admission_policy(probe, dry_run="All")


# -- the policy matches only the pods it refuses ------------------------------------------------


@pytest.fixture(scope="module")
def condition_probe(core: client.CoreV1Api) -> Iterator[str]:
    """A probe policy in PROBES whose one validation is the shipped pods policy's matchCondition,
    negated: it refuses exactly the pods that condition matches."""
    registration = client.AdmissionregistrationV1Api(core.api_client)
    policy, binding = probe_policy(Config(), "matched-probe")
    (condition,) = policy["spec"].pop("matchConditions")
    policy["spec"].pop("variables")
    policy["spec"]["validations"] = [
        {"expression": f"!({condition['expression']})", "message": "matched"}
    ]
    registration.create_validating_admission_policy(policy)
    registration.create_validating_admission_policy_binding(binding)
    refused = env_pod("nvidia.com/gpu")  # the env guard's case: matched
    in_force(lambda: denial(lambda: core.create_namespaced_pod(PROBES, refused, dry_run="All")))
    yield condition["name"]
    delete_policy(registration, "matched-probe")


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(pod=pods())
def test_the_pods_policy_matches_only_the_pods_it_refuses(
    core: client.CoreV1Api, condition_probe: str, pod: dict[str, Any]
) -> None:
    """The pods policy's matchCondition is its refusal, exactly: kube-apiserver evaluates a
    matched policy's validations and then every messageExpression, each over a conversion of
    the pod of its own, so a valid pod (one with a shared GPU, say) must not match."""
    made = denial(lambda: core.create_namespaced_pod(PROBES, pod, dry_run="All"))
    matched = made is not None and made.endswith(": matched")
    # The probe's namespace is exempt: no visibility policy runs before it.
    assert matched is (expected(stored(core, pod), hide=False) is not None), (
        condition_probe,
        pod,
        made,
    )


# -- resource-name patterns ---------------------------------------------------------------------


@pytest.fixture
def policies(core: client.CoreV1Api) -> Iterator[client.AdmissionregistrationV1Api]:
    """Probe policies a test makes (each under a name of its own: the server may still apply
    a deleted policy for a moment), deleted afterwards."""
    registration = client.AdmissionregistrationV1Api(core.api_client)
    yield registration
    for policy in registration.list_validating_admission_policy().items:
        if policy.metadata.name.endswith("-probe"):
            delete_policy(registration, policy.metadata.name)


def in_force(check: Any) -> Any:
    """A new policy applies a moment after it is written (the server's own informers)."""
    return while_running(check, "kube-apiserver to apply the probe policy", {}, WAIT)


def env_pod(resource: str) -> dict[str, Any]:
    container = {
        "name": "c",
        "image": "cuda",
        "resources": {"limits": {resource: "1"}},
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    }
    return {"metadata": {"name": "p"}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("nvidia.com/mig-*", "nvidia.com/mig-1g.5gb", True),
        ("nvidia.com/mig-?g.*", "nvidia.com/mig-2g.10gb", True),
        ("nvidia.com/mig-?g.*", "nvidia.com/mig-22g.10gb", False),
        ("gpu.a/[ab]x", "gpu.a/ax", True),
        ("gpu.a/[!ab]x", "gpu.a/ax", False),
        ("gpu.a/[!ab]x", "gpu.a/cx", True),
    ],
)
def test_resource_patterns_match_in_cel_as_in_python(
    core: client.CoreV1Api,
    policies: client.AdmissionregistrationV1Api,
    pattern: str,
    name: str,
    matches: bool,
) -> None:
    config = Config.model_validate({"gpu": {"resource_patterns": [pattern, "probe.io/gpu"]}})
    # A namespace and a policy of its own: the server may still apply a deleted policy (an
    # earlier case's) for a moment, and never outside the namespace it was bound to.
    digest = hashlib.sha256(f"{pattern} {name}".encode()).hexdigest()[:10]
    namespace = f"patterns-{digest}"
    namespace_ready(core.api_client, namespace, labels={Config().exempt_label: "true"})
    policy, binding = probe_policy(config, f"patterns-{digest}-probe", namespace)
    policies.create_validating_admission_policy(policy)
    policies.create_validating_admission_policy_binding(binding)

    def verdict(resource: str) -> str | None:
        pod = env_pod(resource)
        return denial(lambda: core.create_namespaced_pod(namespace, pod, dry_run="All"))

    try:
        in_force(lambda: verdict("probe.io/gpu"))  # a GPU by the config's second pattern
        assert config.gpu.is_gpu_resource(name) is matches
        assert (verdict(name) is not None) is matches
    finally:
        core.delete_namespace(namespace)


# -- quantities -----------------------------------------------------------------------------------

QUANTITY_CHARS = "0123456789.+-eEkKmMGTiun"
quantities = st.one_of(
    st.sampled_from(["0", "1", "2", "1k", "500m", "1000m", "1.5", "0.5", "-1", "2Ki", "1e3"]),
    st.text(QUANTITY_CHARS, min_size=0, max_size=6),
)
# What the policies ask of a value: a quantity or not, its sign, above 1, and only at or below 1
# whether it is whole. isInteger() is not asked above 1: there it is Go's AsInt64, which also
# fails for a whole number ParseQuantity keeps as a big decimal (1Ei, 19 digits).
READING = (
    "!isQuantity(object.data.q) ? 'none' : "
    "string(quantity(object.data.q).compareTo(quantity('0'))) + ',' + "
    "string(quantity(object.data.q).isGreaterThan(quantity('1'))) + ',' + "
    "(quantity(object.data.q).isGreaterThan(quantity('1')) ? 'not asked' : "
    "string(quantity(object.data.q).isInteger()))"
)


def python_reading(text: str) -> str:
    value: Fraction | None = parse_quantity(text)
    if value is None:
        return "none"
    sign = (value > 0) - (value < 0)
    whole = "not asked" if value > 1 else str(is_int64(value)).lower()
    return f"{sign},{str(value > 1).lower()},{whole}"


@pytest.fixture
def quantity_probe(
    core: client.CoreV1Api, policies: client.AdmissionregistrationV1Api
) -> client.CoreV1Api:
    """A policy that refuses every ConfigMap in the probes' namespace, saying how Kubernetes'
    CEL quantity library reads its `q`."""
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"]}
    policies.create_validating_admission_policy(
        {
            "metadata": {"name": "quantity-probe"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": PROBES}},
                    "resourceRules": [{**rule, "resources": ["configmaps"]}],
                },
                "validations": [{"expression": "false", "messageExpression": READING}],
            },
        }
    )
    policies.create_validating_admission_policy_binding(
        {
            "metadata": {"name": "quantity-probe"},
            "spec": {"policyName": "quantity-probe", "validationActions": ["Deny"]},
        }
    )
    in_force(lambda: cel_reading(core, "1") == "1,false,true")
    return core


def cel_reading(core: client.CoreV1Api, text: str) -> str | None:
    body = {"metadata": {"name": "q"}, "data": {"q": text}}
    said = denial(lambda: core.create_namespaced_config_map(PROBES, body, dry_run="All"))
    return None if said is None else said.rsplit(": ", 1)[-1]


def canonical(core: client.CoreV1Api, text: str) -> str | None:
    """A quantity as the API server stores it in a pod, which is what both the policy and the
    webhook read (`1000m` is stored as `1`: CEL's `isInteger()` is false for `1000m` itself);
    None when the server refuses it as a quantity. A CPU limit takes any quantity but a
    negative one (and keeps at most millicores), so a negative is stored by its magnitude."""
    sign, magnitude = ("-", text[1:]) if text.startswith("-") else ("", text.removeprefix("+"))
    assume(not magnitude.startswith(("+", "-")))
    container = {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": magnitude}}}
    pod = {"metadata": {"name": "q"}, "spec": {"containers": [container]}}
    try:
        stored = core.create_namespaced_pod(EXEMPT, pod, dry_run="All")
    except client.ApiException as error:
        assert error.status in (400, 422), error.body  # 400: not even decodable as one
        return None
    value = stored.spec.containers[0].resources.limits["cpu"]
    return value if value == "0" else sign + value


@settings(max_examples=300, deadline=None, suppress_health_check=FIXTURES)
@given(text=quantities)
# Whole and within int64, yet not integers to CEL as written (kept at a negative scale, or as a
# big decimal): stored as "1" and "0", or above 1 where the policies never ask.
@example(text="1000m")
@example(text="1.0")
@example(text="0.0")
@example(text="1Ei")
@example(text="1023Ti")
@example(text="9223372036854775807")
@example(text="1e19")
def test_quantities_read_as_kubernetes_cel_reads_them(
    quantity_probe: client.CoreV1Api, text: str
) -> None:
    stored = canonical(quantity_probe, text)
    if stored is None:
        # Refused by the server's own validation, so no policy ever sees it.
        assert cel_reading(quantity_probe, text) in ("none", python_reading(text))
        return
    assert python_reading(stored) == cel_reading(quantity_probe, stored)
