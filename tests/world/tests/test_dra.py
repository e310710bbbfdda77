"""The emulator's resource.k8s.io/v1 kinds, answered as kube-apiserver 1.36 answers them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from tests.world.harness import KUBECTL

NVIDIA_GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": list(requests)}},
    }


def _status(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def post_raw(api: client.ApiClient, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """POST a body the client's own models would refuse to send (it checks required fields)."""
    method, url, headers, serialized, post = api.param_serialize(
        "POST",
        path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, headers, serialized, post)
    response.read()
    return response.status, json.loads(response.data)


def test_device_class_and_claim_round_trip_with_v1_defaults(kube_client: client.ApiClient) -> None:
    dra = client.ResourceV1Api(kube_client)
    created_class = dra.create_device_class(NVIDIA_GPU_CLASS)
    assert created_class.metadata.generation == 1
    made = dra.create_namespaced_resource_claim(
        "default",
        claim(
            "one-gpu",
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
            {
                "name": "any",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2},
                    {"name": "mig", "deviceClassName": "mig.nvidia.com"},
                ],
            },
        ),
    )
    exactly = made.spec.devices.requests[0].exactly
    assert (exactly.allocation_mode, exactly.count) == ("ExactCount", 1)
    subs = made.spec.devices.requests[1].first_available
    assert [(s.allocation_mode, s.count) for s in subs] == [("ExactCount", 2), ("ExactCount", 1)]
    listed = dra.list_resource_claim_for_all_namespaces()
    assert [c.metadata.name for c in listed.items] == ["one-gpu"]


@pytest.mark.parametrize(
    ("request_", "field", "message"),
    [
        (
            {"name": "gpu"},
            "spec.devices.requests[0]",
            "Required value: exactly one of `exactly` or `firstAvailable` is required",
        ),
        (
            {"name": "gpu", "exactly": {}},
            "spec.devices.requests[0].exactly.deviceClassName",
            "Required value",
        ),
        (
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "count": 0,
                    "allocationMode": "Some",
                },
            },
            "spec.devices.requests[0].exactly.allocationMode",
            'Unsupported value: "Some": supported values: "All", "ExactCount"',
        ),
        (
            {"name": "GPU", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
            "spec.devices.requests[0].name",
            'Invalid value: "GPU": a lowercase RFC 1123 label must consist of',
        ),
        (
            {"name": "gpu", "firstAvailable": [{"name": "a"}]},
            "spec.devices.requests[0].firstAvailable[0].deviceClassName",
            "Required value",
        ),
    ],
)
def test_invalid_claim_requests_are_refused_with_the_servers_words(
    kube_client: client.ApiClient, request_: dict[str, Any], field: str, message: str
) -> None:
    code, status = post_raw(
        kube_client,
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        claim("bad", request_),
    )
    assert code == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(f'ResourceClaim.resource.k8s.io "bad" is invalid: {field}')
    assert any(
        c["field"] == field and c["message"].startswith(message)
        for c in status["details"]["causes"]
    )


def test_claim_and_template_specs_are_immutable(kube_client: client.ApiClient) -> None:
    dra = client.ResourceV1Api(kube_client)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    dra.create_namespaced_resource_claim("default", claim("c", request))
    template = {
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }
    dra.create_namespaced_resource_claim_template("default", template)
    changed = {"spec": {"devices": {"requests": [{**request, "name": "other"}]}}}
    with pytest.raises(ApiException) as err:
        dra.patch_namespaced_resource_claim("c", "default", changed)
    assert "spec: Invalid value" in _status(err.value)["message"]
    assert "field is immutable" in _status(err.value)["message"]
    with pytest.raises(ApiException) as err:
        dra.patch_namespaced_resource_claim_template("t", "default", {"spec": changed})
    assert err.value.status == 422
    labelled = dra.patch_namespaced_resource_claim(
        "c", "default", {"metadata": {"labels": {"a": "b"}}}
    )
    assert labelled.metadata.labels == {"a": "b"}


def _pod(spec_extra: dict[str, Any], claims: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"claims": claims}}],
            **spec_extra,
        },
    }


def test_pod_claims_must_name_an_entry_of_spec_resource_claims(kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    pods = "/api/v1/namespaces/default/pods"
    code, status = post_raw(kube_client, pods, _pod({}, [{"name": "gpu"}]))
    assert code == 422 and status["message"] == (
        'Pod "p" is invalid: spec.containers[0].resources.claims[0]: Not found: "gpu": must be '
        "one of the names in pod.spec.resourceClaims which is empty"
    )
    neither = {"resourceClaims": [{"name": "gpu"}]}
    code, status = post_raw(kube_client, pods, _pod(neither, [{"name": "gpu"}]))
    assert code == 422 and status["message"] == (
        'Pod "p" is invalid: spec.resourceClaims[0]: Invalid value: core.PodResourceClaim{'
        'Name:"gpu", ResourceClaimName:(*string)(nil), ResourceClaimTemplateName:(*string)(nil)}'
        ": must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
    )
    good = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    pod = core.create_namespaced_pod("default", _pod(good, [{"name": "gpu", "request": "gpu"}]))
    assert pod.spec.resource_claims[0].resource_claim_template_name == "one-gpu"


def test_a_server_without_the_group_answers_404(kubeapi, kube_client) -> None:
    kubeapi.server.unserved_groups.add("resource.k8s.io")
    with pytest.raises(ApiException) as err:
        client.ResourceV1Api(kube_client).list_resource_claim_for_all_namespaces()
    assert err.value.status == 404


def test_kubectl_creates_dra_objects_from_yaml(kubeapi, tmp_path: Path) -> None:
    manifest = tmp_path / "dra.yaml"
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            }
        },
    }
    manifest.write_text(yaml.safe_dump_all([NVIDIA_GPU_CLASS, template]))
    assert KUBECTL
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeapi.kubeconfig_path), "create", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "deviceclass.resource.k8s.io/gpu.nvidia.com created" in done.stdout
    assert "resourceclaimtemplate.resource.k8s.io/one-gpu created" in done.stdout
