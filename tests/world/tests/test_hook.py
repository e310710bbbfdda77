"""The emulator's admission hook contract: order, what each phase sees, warnings, rejections."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.errors import StatusError


class RecordingHook:
    def __init__(self, deny_validate: bool = False) -> None:
        self.calls: list[tuple[str, AdmissionAttributes]] = []
        self.deny_validate = deny_validate

    async def mutate(self, attrs: AdmissionAttributes) -> tuple[dict | None, list[str]]:
        self.calls.append(("mutate", attrs))
        obj = attrs.object
        if obj is not None and attrs.operation == "CREATE":
            obj["metadata"].setdefault("labels", {})["mutated"] = "yes"
        return obj, ["from mutate"]

    async def validate(self, attrs: AdmissionAttributes) -> list[str]:
        self.calls.append(("validate", attrs))
        if self.deny_validate:
            raise StatusError(403, "", 'admission webhook "deny" denied the request: no')
        return ["from validate"]


def test_create_phases_see_what_kube_apiserver_shows(kubeapi, kube_client) -> None:
    hook = RecordingHook()
    kubeapi.server.admission = hook
    core = client.CoreV1Api(kube_client)
    pod, _code, headers = core.create_namespaced_pod_with_http_info(
        "default",
        {
            "metadata": {"generateName": "w-"},
            "spec": {"containers": [{"name": "c", "image": "x:1"}]},
        },
    )
    assert pod.metadata.labels == {"mutated": "yes"}
    assert [phase for phase, _ in hook.calls] == ["mutate", "validate"]
    mutating, validating = hook.calls[0][1], hook.calls[1][1]
    assert mutating.name == "" and "uid" not in mutating.object["metadata"]
    assert mutating.object["status"] == {}
    assert mutating.object["spec"]["serviceAccountName"] == "default"
    assert validating.name == pod.metadata.name and validating.object["metadata"]["uid"]
    assert validating.object["status"]["phase"] == "Pending"
    assert mutating.user_info["username"] == "admin"
    assert "system:masters" in mutating.user_info["groups"]
    assert mutating.options == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert '299 - "from mutate"' in headers["Warning"]
    assert '299 - "from validate"' in headers["Warning"]


def test_builtin_validation_runs_between_phases(kubeapi, kube_client) -> None:
    hook = RecordingHook()
    kubeapi.server.admission = hook
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube_client).create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "pinned"},
                "spec": {
                    "nodeName": "n",
                    "schedulingGates": [{"name": "g"}],
                    "containers": [{"name": "c", "image": "x:1"}],
                },
            },
        )
    assert err.value.status == 422
    assert [phase for phase, _ in hook.calls] == ["mutate"]


def test_validate_rejection_and_subresource_attributes(kubeapi, kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "d"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    hook = RecordingHook()
    kubeapi.server.admission = hook
    core.patch_namespaced_persistent_volume_claim_status(
        "d", "default", {"status": {"conditions": [{"type": "Loading", "status": "True"}]}}
    )
    attrs = hook.calls[0][1]
    assert (attrs.operation, attrs.resource, attrs.subresource) == (
        "UPDATE",
        "persistentvolumeclaims",
        "status",
    )
    assert attrs.old_object["status"] == {"phase": "Pending"}
    kubeapi.server.admission = RecordingHook(deny_validate=True)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == (
        'admission webhook "deny" denied the request: no'
    )
    assert kubeapi.server.get_object("configmaps", "default", "x") is None
