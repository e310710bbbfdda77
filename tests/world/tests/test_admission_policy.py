"""The emulator's ValidatingAdmissionPolicies, through the API as kube-apiserver 1.36 answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = pytest.mark.usefixtures("kubeapi")

POLICY = "replicas-limit"


def policy(validation: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [validation],
            **spec,
        },
    }


def binding(*actions: str, name: str = "b") -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": POLICY, "validationActions": list(actions)},
    }


@pytest.fixture
def api(kube_client: client.ApiClient, kubeapi: Any) -> client.AdmissionregistrationV1Api:
    from tests.world.kubeapi.admission import WebhookAdmission

    kubeapi.server.admission = WebhookAdmission(kubeapi.server.list_objects)
    client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": "ml"}})
    return client.AdmissionregistrationV1Api(kube_client)


def config_map(kube_client: client.ApiClient, data: dict[str, str]) -> Any:
    body = {"metadata": {"name": "c"}, "data": data}
    return client.CoreV1Api(kube_client).create_namespaced_config_map("ml", body)


SMALL = {"expression": "!has(object.data) || size(object.data) < 2"}


def test_a_denial_is_422_invalid_with_kube_apiservers_words(api, kube_client) -> None:
    api.create_validating_admission_policy(
        policy({**SMALL, "messageExpression": "'too many keys: ' + string(size(object.data))"})
    )
    api.create_validating_admission_policy_binding(binding("Deny"))
    with pytest.raises(ApiException) as denied:
        config_map(kube_client, {"a": "1", "b": "2"})
    status = json.loads(denied.value.body)
    assert denied.value.status == 422 and status["reason"] == "Invalid"
    expected = (
        "ValidatingAdmissionPolicy 'replicas-limit' with binding 'b' denied request: "
        "too many keys: 2"
    )
    assert status["message"] == f'configmaps "c" is forbidden: {expected}'
    assert status["details"]["causes"] == [{"message": expected}]
    config_map(kube_client, {"a": "1"})  # passes


def test_without_a_binding_a_policy_does_nothing(api, kube_client) -> None:
    api.create_validating_admission_policy(policy(SMALL))
    config_map(kube_client, {"a": "1", "b": "2"})


def test_warn_and_audit_let_the_request_through(api, kube_client, kubeapi) -> None:
    api.create_validating_admission_policy(policy({**SMALL, "message": "keep it small"}))
    api.create_validating_admission_policy_binding(binding("Warn", "Audit"))
    response = client.CoreV1Api(kube_client).create_namespaced_config_map(
        "ml", {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}, _preload_content=False
    )
    assert response.headers["Warning"] == (
        "299 - \"Validation failed for ValidatingAdmissionPolicy 'replicas-limit' with binding "
        "'b': keep it small\""
    )
    (audit,) = kubeapi.server.admission.policies.audits
    (failure,) = json.loads(audit["validation.policy.admission.k8s.io/validation_failure"])
    assert failure["message"] == "keep it small" and failure["validationActions"] == [
        "Warn",
        "Audit",
    ]


@pytest.mark.parametrize(("failure_policy", "denied"), [("Fail", True), ("Ignore", False)])
def test_an_evaluation_error_follows_the_failure_policy(
    api, kube_client, failure_policy: str, denied: bool
) -> None:
    api.create_validating_admission_policy(
        policy({"expression": "object.data.missing == 'x'"}, failurePolicy=failure_policy)
    )
    api.create_validating_admission_policy_binding(binding("Deny"))
    if denied:
        with pytest.raises(ApiException) as error:
            config_map(kube_client, {"a": "1"})
        assert error.value.status == 422
    else:
        config_map(kube_client, {"a": "1"})


def test_match_conditions_and_the_static_message_fallbacks(api, kube_client) -> None:
    api.create_validating_admission_policy(
        policy(
            {**SMALL, "messageExpression": "'line\\nbreak'", "message": "static words"},
            matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels)"}],
        )
    )
    api.create_validating_admission_policy_binding(binding("Deny"))
    config_map(kube_client, {"a": "1", "b": "2"})  # no labels: the condition is false
    body = {"metadata": {"name": "d", "labels": {"x": "y"}}, "data": {"a": "1", "b": "2"}}
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(kube_client).create_namespaced_config_map("ml", body)
    assert json.loads(denied.value.body)["message"].endswith("denied request: static words")


def test_bad_policies_and_bindings_are_refused_when_written(api) -> None:
    with pytest.raises(ApiException) as bad_cel:
        api.create_validating_admission_policy(policy({"expression": "object.data.("}))
    assert bad_cel.value.status == 422
    assert (
        "spec.validations[0].expression: Invalid value" in json.loads(bad_cel.value.body)["message"]
    )
    with pytest.raises(ApiException) as both:
        api.create_validating_admission_policy_binding(binding("Deny", "Warn"))
    assert "must not contain both Deny and Warn" in json.loads(both.value.body)["message"]
    with pytest.raises(ApiException) as none:
        api.create_validating_admission_policy_binding(binding())
    assert (
        "spec.validationActions: Required value: at least one validation action is required"
        in json.loads(none.value.body)["message"]
    )


def test_a_false_match_condition_wins_over_an_erroring_one(api, kube_client) -> None:
    erroring = {"name": "errors", "expression": "object.metadata.missing == 'x'"}
    api.create_validating_admission_policy(
        policy(SMALL, matchConditions=[erroring, {"name": "never", "expression": "false"}])
    )
    api.create_validating_admission_policy_binding(binding("Deny"))
    config_map(kube_client, {"a": "1", "b": "2"})  # not matched: the error is never heard
    api.delete_validating_admission_policy(POLICY)
    api.create_validating_admission_policy(policy(SMALL, matchConditions=[erroring]))
    with pytest.raises(ApiException) as denied:  # the error alone, failurePolicy Fail
        client.CoreV1Api(kube_client).create_namespaced_config_map(
            "ml", {"metadata": {"name": "d"}, "data": {"a": "1"}}
        )
    assert denied.value.status == 422
    assert "Key not found" in json.loads(denied.value.body)["message"]
