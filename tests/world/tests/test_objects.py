"""Object semantics of the emulator through the official client: names, versions, errors."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client
from kubernetes.client import ApiException


def _pod(name: str = "p", **spec: object) -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_create_fills_identity_and_generated_name(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    pod = core.create_namespaced_pod(
        "default", {"metadata": {"generateName": "train-"}, "spec": _pod()["spec"]}
    )
    assert pod.metadata.name.startswith("train-") and len(pod.metadata.name) == len("train-") + 5
    assert pod.metadata.uid and pod.metadata.creation_timestamp
    assert pod.metadata.generation == 1
    assert pod.status.phase == "Pending" and pod.status.qos_class == "BestEffort"
    other = core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    assert int(other.metadata.resource_version) > int(pod.metadata.resource_version)


def test_not_found_already_exists_and_stale_write(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("nope", "default")
    assert missing.value.status == 404
    assert _status(missing.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "configmaps"},
        "code": 404,
    }
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert exists.value.status == 409 and _status(exists.value)["reason"] == "AlreadyExists"
    core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}})
    stale = first.to_dict()
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map(
            "cm",
            "default",
            {
                "metadata": {"name": "cm", "resourceVersion": first.metadata.resource_version},
                "data": {"a": "2"},
            },
        )
    assert conflict.value.status == 409 and _status(conflict.value)["reason"] == "Conflict"
    assert "the object has been modified" in _status(conflict.value)["message"]
    assert stale["data"] is None


def test_missing_namespace_is_not_found(kube_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube_client).create_namespaced_config_map(
            "absent", {"metadata": {"name": "x"}}
        )
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "absent" not found'


def test_missing_name_is_invalid(kube_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube_client).create_namespaced_config_map("default", {"metadata": {}})
    status = _status(err.value)
    assert err.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]


def test_adding_scheduling_gate_is_rejected_removing_is_accepted(
    kube_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod("default", _pod("notebook-shared-1"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "notebook-shared-1",
            "default",
            {"spec": {"schedulingGates": [{"name": "gpu-admission.io/quota"}]}},
        )
    status = _status(err.value)
    assert err.value.status == 422
    assert status["message"] == (
        'Pod "notebook-shared-1" is invalid: spec.schedulingGates[0].name: Forbidden: only '
        "deletion is allowed, but found new scheduling gate 'gpu-admission.io/quota'"
    )
    assert status["details"]["causes"][0] == {
        "reason": "FieldValueForbidden",
        "message": "Forbidden: only deletion is allowed, but found new scheduling gate "
        "'gpu-admission.io/quota'",
        "field": "spec.schedulingGates[0].name",
    }
    gated = core.create_namespaced_pod(
        "default", _pod("gated", schedulingGates=[{"name": "a"}, {"name": "b"}])
    )
    assert [(c.type, c.status, c.reason, c.message) for c in gated.status.conditions] == [
        (
            "PodScheduled",
            "False",
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        )
    ]
    one = core.patch_namespaced_pod(
        "gated", "default", [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    )
    assert [g.name for g in one.spec.scheduling_gates] == ["b"]
    assert one.metadata.generation == 2


def test_pod_with_node_name_and_gates_is_rejected(kube_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(kube_client).create_namespaced_pod(
            "default",
            _pod(
                "pinned-gated",
                nodeName="gpu-node-1",
                schedulingGates=[{"name": "gpu-admission.io/quota"}],
            ),
        )
    status = _status(err.value)
    assert err.value.status == 422
    assert status["message"] == (
        'Pod "pinned-gated" is invalid: spec.nodeName: Forbidden: cannot be set until all '
        "schedulingGates have been cleared"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: cannot be set until all schedulingGates have been cleared",
            "field": "spec.nodeName",
        }
    ]


def test_secret_string_data_and_immutable_type(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    secret = core.create_namespaced_secret(
        "default",
        {
            "metadata": {"name": "s"},
            "type": "aws-credential",
            "stringData": {"AWS_REGION": "us-east-1"},
        },
    )
    assert secret.data == {"AWS_REGION": base64.b64encode(b"us-east-1").decode()}
    assert secret.string_data is None
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_secret("s", "default", {"type": "Opaque"})
    assert err.value.status == 422
    assert _status(err.value)["message"] == (
        'Secret "s" is invalid: type: Invalid value: "Opaque": field is immutable'
    )


def test_generation_tracks_spec_only(kube_client: client.ApiClient) -> None:
    batch = client.BatchV1Api(kube_client)
    job = batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "x:1"}],
                    }
                }
            },
        },
    )
    assert job.metadata.generation == 1
    labelled = batch.patch_namespaced_job("j", "default", {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 1
    status = batch.patch_namespaced_job_status("j", "default", {"status": {"active": 1}})
    assert status.metadata.generation == 1
    changed = batch.patch_namespaced_job("j", "default", {"spec": {"backoffLimit": 1}})
    assert changed.metadata.generation == 2


def test_status_subresource_isolation(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    # A main-resource write cannot touch status...
    main = core.patch_namespaced_persistent_volume_claim(
        "data",
        "default",
        {"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Bound"}},
    )
    assert main.status.phase == "Pending" and main.metadata.labels == {"x": "y"}
    # ...and a status write cannot touch the spec. The PVC status strategy resets only the spec
    # (persistentvolumeclaimStatusStrategy.PrepareForUpdate), so its metadata may change.
    condition = {"type": "Loading", "status": "True", "reason": "Loading", "message": "copying"}
    updated = core.patch_namespaced_persistent_volume_claim_status(
        "data",
        "default",
        {
            "metadata": {"labels": {"x": "z"}},
            "spec": {"volumeName": "v"},
            "status": {"conditions": [condition]},
        },
    )
    assert updated.metadata.labels == {"x": "z"} and updated.spec.volume_name is None
    assert updated.status.phase == "Pending"
    assert updated.status.conditions[0].type == "Loading"
    assert updated.metadata.finalizers == ["kubernetes.io/pvc-protection"]


def test_dry_run_stores_nothing(kubeapi, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    before = core.list_namespaced_pod("default").metadata.resource_version
    pod = core.create_namespaced_pod("default", _pod("dry"), dry_run="All")
    assert pod.metadata.name == "dry" and pod.metadata.uid
    assert core.list_namespaced_pod("default").items == []
    assert core.list_namespaced_pod("default").metadata.resource_version == before
    assert kubeapi.server.get_object("pods", "default", "dry") is None


def test_finalizers_hold_deletion_until_removed(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}
    )
    core.delete_namespaced_config_map("held", "default")
    held = core.read_namespaced_config_map("held", "default")
    assert held.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "held", "default", {"metadata": {"finalizers": ["example.com/keep", "new/one"]}}
        )
    assert err.value.status == 422
    core.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("held", "default")
    assert gone.value.status == 404


def test_status_writes_keep_metadata_as_each_kinds_strategy_does(kube_client) -> None:
    core = client.CoreV1Api(kube_client)
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-1"}
    core.create_namespaced_pod(
        "default", {**_pod("p"), "metadata": {"name": "p", "ownerReferences": [owner]}}
    )
    pod = core.patch_namespaced_pod_status(
        "p",
        "default",
        {
            "metadata": {"labels": {"seen": "yes"}, "ownerReferences": None},
            "status": {"phase": "Running"},
        },
    )
    # podStatusStrategy keeps ownerReferences (old kubelets corrupted them) but not labels.
    assert pod.metadata.labels == {"seen": "yes"}
    assert [o.uid for o in pod.metadata.owner_references] == ["u-1"]
    dra = client.ResourceV1Api(kube_client)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    dra.create_namespaced_resource_claim(
        "default", {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [request]}}}
    )
    claim = dra.patch_namespaced_resource_claim_status(
        "c", "default", {"metadata": {"labels": {"x": "y"}}, "status": {}}
    )
    assert claim.metadata.labels is None  # ResetObjectMetaForStatus


def test_a_uid_in_a_patch_is_a_precondition(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    made = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"uid": made.metadata.uid}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("cm", "default", {"metadata": {"uid": "someone-else"}})
    status = _status(err.value)
    assert err.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"].endswith(
        f"Precondition failed: UID in precondition: someone-else, UID in object meta: "
        f"{made.metadata.uid}"
    )
