"""What the API server decides alone, decided by the real kube-apiserver 1.36 against the Python
that `review` runs: GPU visibility (the base's MutatingAdmissionPolicy, as it is applied; and the
audit-mode policy's words), the mutating webhook's routing (its matchConditions, as shipped), and
the guards of ServiceAccount-bound credentials' routing (as applied), over generated pods."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, assume, given, settings
from kubernetes import client

from gpu_admission.config.model import Config
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.support.waits import while_running
from tests.webhooks.pod_strategies import DEBUGGERS, admission_pods
from tests.world.harness import create_policies, delete_policy
from webhooks.apiserver_policies.credential_namespaces import (
    BINDING_POLICY,
    LABEL_POLICY,
    binding_refusal,
    unlabel_refusal,
)
from webhooks.apiserver_policies.pod_checks import denial_text
from webhooks.apiserver_policies.visibility_mutation import (
    changes,
    visibility_audit_policy,
    visibility_policy,
    visibility_policy_binding,
    would_change,
)
from webhooks.apiserver_policies.webhook_routing import (
    mutating_pod_webhooks,
    mutating_webhook_sees,
)

NAMESPACE = "stateless"  # the base's policies apply here
PROBES = "stateless-probes"  # only the probe policies below apply here
EXEMPT = "stateless-exempt"  # nothing applies: the pod as the server stores it
CONFIG = Config()
FIXTURES = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
WAIT = 60


@pytest.fixture(scope="module")
def core(kubectl: Kubectl, api: client.ApiClient) -> client.CoreV1Api:
    apply_base(kubectl)
    namespace_ready(api, NAMESPACE)
    namespace_ready(api, PROBES, labels={CONFIG.exempt_label: "true"})
    namespace_ready(api, EXEMPT, labels={CONFIG.exempt_label: "true"})
    return client.CoreV1Api(api)


def stored(core: client.CoreV1Api, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server holds it before admission (defaulted), from the exempt
    namespace, where no policy applies."""
    made = core.create_namespaced_pod(EXEMPT, copy.deepcopy(pod), dry_run="All")
    return dict(core.api_client.sanitize_for_serialization(made))


def admitted(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> dict | str:
    """The pod as the server admits it (a dry run), or its refusal's message."""
    try:
        made = core.create_namespaced_pod(namespace, copy.deepcopy(pod), dry_run="All")
    except client.ApiException as error:
        return str(json.loads(error.body)["message"])
    return dict(core.api_client.sanitize_for_serialization(made))


def envs(pod: dict[str, Any], lists: tuple[str, ...] = ("initContainers", "containers")) -> list:
    return [c.get("env") for lst in lists for c in pod["spec"].get(lst) or []]


def in_force(check: Any) -> Any:
    return while_running(check, "kube-apiserver to apply the probe policy", {}, WAIT)


# -- GPU visibility ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES)
@given(pod=admission_pods())
def test_the_policy_changes_each_pod_as_review_says(core: client.CoreV1Api, pod: dict) -> None:
    before = stored(core, pod)
    after = admitted(core, NAMESPACE, pod)
    assume(isinstance(after, dict))  # the base's pod checks refused it: not this test's
    assert isinstance(after, dict)
    expected, _ = changes(before, None, CONFIG)
    assert envs(after) == envs(expected)


@pytest.fixture
def running(core: client.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


@settings(max_examples=20, deadline=None, suppress_health_check=FIXTURES)
@given(pod=admission_pods(), added=DEBUGGERS)
def test_debug_containers_are_hidden_as_review_says(
    core: client.CoreV1Api, running: list[str], pod: dict, added: list
) -> None:
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"] = f"debugged-{len(running)}"
    assume(isinstance(admitted(core, NAMESPACE, pod), dict))
    core.create_namespaced_pod(NAMESPACE, pod)
    running.append(pod["metadata"]["name"])
    old = dict(
        core.api_client.sanitize_for_serialization(
            core.read_namespaced_pod(pod["metadata"]["name"], NAMESPACE)
        )
    )
    new = copy.deepcopy(old)
    new["spec"]["ephemeralContainers"] = copy.deepcopy(added)
    made = core.patch_namespaced_pod_ephemeralcontainers(
        pod["metadata"]["name"],
        NAMESPACE,
        {"spec": {"ephemeralContainers": added}},
        dry_run="All",
    )
    after = dict(core.api_client.sanitize_for_serialization(made))
    # The server's form of what was added (defaults filled in), then the policy's change.
    server_new = copy.deepcopy(old)
    server_new["spec"]["ephemeralContainers"] = [
        {**c, "env": next(a.get("env") for a in added if a["name"] == c["name"])}
        for c in after["spec"]["ephemeralContainers"]
    ]
    for container in server_new["spec"]["ephemeralContainers"]:
        if container["env"] is None:
            del container["env"]
    expected, _ = changes(server_new, old, CONFIG)
    assert envs(after, ("ephemeralContainers",)) == envs(expected, ("ephemeralContainers",))


@pytest.fixture
def probes(core: client.CoreV1Api) -> Iterator[client.AdmissionregistrationV1Api]:
    registration = client.AdmissionregistrationV1Api(core.api_client)
    yield registration
    for policy in registration.list_validating_admission_policy().items:
        if policy.metadata.name.startswith("stateless-probe-"):
            delete_policy(registration, policy.metadata.name)


def probe(name: str, policy: dict[str, Any], namespace: str = PROBES) -> list[dict[str, Any]]:
    """`policy` under `name`, for one probe namespace only, refusing (Deny) where it fails."""
    policy = copy.deepcopy(policy)
    policy["metadata"]["name"] = name
    policy["spec"]["matchConstraints"]["namespaceSelector"] = {
        "matchLabels": {"kubernetes.io/metadata.name": namespace}
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


CPU_POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "cuda"}]}}


def test_audit_mode_records_what_would_change_in_reviews_words(
    core: client.CoreV1Api, probes: client.AdmissionregistrationV1Api
) -> None:
    """The audit-mode policy's message, shown here as a refusal by a Deny binding: the words
    `review` and the webhook record."""
    name = "stateless-probe-audit"
    create_policies(core.api_client, probe(name, visibility_audit_policy(CONFIG)))
    in_force(lambda: isinstance(admitted(core, PROBES, CPU_POD), str))
    pods = [
        CPU_POD,
        {
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "setup", "image": "x"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "x",
                        "env": [
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                            {"name": "PATH", "value": "/bin"},
                            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"},
                        ],
                    },
                    {"name": "gpu", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {
                        "name": "hidden",
                        "image": "x",
                        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}],
                    },
                ],
            },
        },
    ]
    for pod in pods:
        said = admitted(core, PROBES, pod)
        expected = would_change(stored(core, pod), None, CONFIG)
        assert said == f'pods "p" is forbidden: {denial_text(expected, name)}'


# -- the mutating webhook's routing ---------------------------------------------------------------


def routing_probe(conditions: list[dict[str, str]]) -> dict[str, Any]:
    """A policy that refuses exactly the pods a webhook entry with `conditions` is called for
    (every condition true)."""
    met = " && ".join(f"({c['expression']})" for c in conditions)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "x"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "validations": [{"expression": f"!({met})", "message": "sent to the webhook"}],
        },
    }


ROUTES = {False: "stateless-route-plain", True: "stateless-route-labelled"}
NAMES_CREDENTIALS = {
    "metadata": {"name": "p", "annotations": {CONFIG.names.cloud_credentials: "s3-keys"}},
    "spec": CPU_POD["spec"],
}


@pytest.fixture
def routed_probes(core: client.CoreV1Api, probes: client.AdmissionregistrationV1Api) -> None:
    """The two pods mutating webhook entries' conditions as shipped, each as a probe policy in a
    namespace of its own: by whether the pod's namespace is labelled for ServiceAccount-bound
    credentials. A pod the probe refuses is one the webhook entry is called for."""
    for labelled, entry in zip((False, True), mutating_pod_webhooks(CONFIG), strict=True):
        namespace = ROUTES[labelled]
        namespace_ready(core.api_client, namespace, labels={CONFIG.exempt_label: "true"})
        name = f"stateless-probe-routing-{int(labelled)}"
        policy = probe(name, routing_probe(entry["matchConditions"]), namespace)
        create_policies(core.api_client, policy)
        in_force(lambda ns=namespace: isinstance(admitted(core, ns, NAMES_CREDENTIALS), str))


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURES)
@given(pod=admission_pods())
def test_the_webhook_is_called_for_the_pods_review_says(
    core: client.CoreV1Api, routed_probes: None, pod: dict
) -> None:
    # The policy runs before the webhook: its operations, on the pod as written (the server
    # defaults it again) and as the server holds it (what the matchConditions see).
    pod_for_webhook, ops = changes(stored(core, pod), None, CONFIG)
    written = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    for labelled, namespace in ROUTES.items():
        said = admitted(core, namespace, written)
        assert isinstance(said, dict) or "stateless-probe-routing" in said, said
        sent = isinstance(said, str)
        assert sent == mutating_webhook_sees(pod_for_webhook, "CREATE", labelled, CONFIG)


# -- the guards of ServiceAccount-bound credentials' routing ---------------------------------------


def test_a_binding_needs_its_namespace_labelled_and_the_label_stays(
    core: client.CoreV1Api, api: client.ApiClient
) -> None:
    label = CONFIG.names.serviceaccount_credentials_label
    namespace_ready(api, "bound-ns", labels={label: "true"})

    def account(namespace: str, value: str | None) -> dict[str, Any]:
        annotations = {CONFIG.names.cloud_credentials: value} if value is not None else {}
        return {"metadata": {"name": "trainer", "namespace": namespace, "annotations": annotations}}

    def write(namespace: str, value: str | None) -> str | None:
        try:
            core.create_namespaced_service_account(
                namespace, account(namespace, value), dry_run="All"
            )
        except client.ApiException as error:
            return str(json.loads(error.body)["message"])
        return None

    in_force(lambda: write(NAMESPACE, "s3-keys") is not None)
    for namespace, labels in ((NAMESPACE, {}), ("bound-ns", {label: "true"})):
        for value in ("s3-keys", "a, b", " , ", None):
            expected = binding_refusal(account(namespace, value), None, labels, CONFIG)
            said = write(namespace, value)
            if expected is None:
                assert said is None, said
            else:
                refused = denial_text(expected, BINDING_POLICY)
                assert said == f'serviceaccounts "trainer" is forbidden: {refused}'
    # The label comes off only as "false", on purpose.
    old = {"metadata": {"name": "bound-ns", "labels": {label: "true"}}}
    for labels, removed in (({}, True), ({label: "false"}, False)):
        new = {"metadata": {"name": "bound-ns", "labels": labels}}
        expected = unlabel_refusal(new, old, CONFIG)
        assert (expected is not None) == removed
        patch = {"metadata": {"labels": {label: labels.get(label)}}}
        try:
            core.patch_namespace("bound-ns", patch, dry_run="All")
            said = None
        except client.ApiException as error:
            said = str(json.loads(error.body)["message"])
        assert said == (
            None
            if expected is None
            else f'namespaces "bound-ns" is forbidden: {denial_text(expected, LABEL_POLICY)}'
        )


# -- `none` and `void` ---------------------------------------------------------------------------

VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def test_a_container_that_says_void_keeps_it(core: client.CoreV1Api) -> None:
    """`void` gives no GPU, and makes NVIDIA's runtime behave as runc (the GPU Operator's own
    driver, toolkit and DRA pods say it): the policy leaves it, and hides the next container."""
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "driverless", "image": "x", "env": [VOID]},
                {"name": "other", "image": "x"},
            ]
        },
    }
    after = admitted(core, NAMESPACE, pod)
    assert isinstance(after, dict)
    assert envs(after) == [[VOID], [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]]
    assert envs(after) == envs(changes(stored(core, pod), None, CONFIG)[0])


def test_the_value_the_policy_writes_is_the_setting(
    core: client.CoreV1Api, probes: client.AdmissionregistrationV1Api
) -> None:
    """`gpu.hidden_value: void`, for nodes whose default runtime is nvidia: the policy writes
    `void`, and leaves a `none` a container already says."""
    config = Config.model_validate({"gpu": {"hidden_value": "void"}})
    name = "stateless-probe-void"
    policy = copy.deepcopy(visibility_policy(config))
    policy["metadata"]["name"] = name
    policy["spec"]["matchConstraints"]["namespaceSelector"] = {
        "matchLabels": {"kubernetes.io/metadata.name": PROBES}
    }
    binding = {**visibility_policy_binding(), "metadata": {"name": name}}
    binding["spec"] = {"policyName": name}
    create_policies(core.api_client, [policy, binding])
    registration = client.AdmissionregistrationV1Api(core.api_client)
    try:
        in_force(lambda: envs(_dict(admitted(core, PROBES, CPU_POD))) == [[VOID]])
        pod = {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "x"},
                    {"name": "b", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                       "value": "none"}]},
                    {"name": "c", "image": "x", "env": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                       "value": "all"}]},
                ]
            },
        }  # fmt: skip
        after = admitted(core, PROBES, pod)
        assert isinstance(after, dict)
        none = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
        assert envs(after) == [[VOID], [none], [VOID]]
        assert envs(after) == envs(changes(stored(core, pod), None, config)[0])
    finally:
        registration.delete_mutating_admission_policy_binding(name)
        registration.delete_mutating_admission_policy(name)


def _dict(answer: dict[str, Any] | str) -> dict[str, Any]:
    return answer if isinstance(answer, dict) else {"spec": {}}
