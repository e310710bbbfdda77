"""PATCH content types against the emulator, sent by the official client with explicit types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _patch(api: client.ApiClient, path: str, body: Any, content_type: str) -> dict:
    """PATCH ``path`` with an explicit content type through the client's typed methods."""
    parts = path.strip("/").split("/")
    namespace, plural, name = parts[-3], parts[-2], parts[-1]
    if parts[-1] == "status":
        namespace, plural, name = parts[-4], parts[-3], parts[-2]
    method = {
        "jobs": client.BatchV1Api(api).patch_namespaced_job,
        "pods": client.CoreV1Api(api).patch_namespaced_pod,
    }[plural]
    if parts[-1] == "status":
        method = client.CoreV1Api(api).patch_namespaced_pod_status
    response = method(name, namespace, body, _content_type=content_type, _preload_content=False)
    if response.status >= 400:
        raise client.ApiException(status=response.status, reason=response.reason)
    return json.loads(response.data)


JOB = "/apis/batch/v1/namespaces/default/jobs/j"


@pytest.fixture
def job(kube_client: client.ApiClient) -> dict:
    container = {
        "name": "main",
        "image": "x:1",
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "ports": [{"containerPort": 80}, {"containerPort": 81}],
        "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "w", "mountPath": "/b"}],
    }
    body = {
        "metadata": {"name": "j", "finalizers": ["one"]},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [{"name": "init", "image": "x:1"}],
                    "containers": [container, {"name": "side", "image": "y:1"}],
                    "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
                }
            }
        },
    }
    return client.BatchV1Api(kube_client).create_namespaced_job("default", body).to_dict()


def test_strategic_merge_keys(kube_client: client.ApiClient, job: dict) -> None:
    patched = _patch(
        kube_client,
        JOB,
        {
            "metadata": {"finalizers": ["two"]},
            "spec": {
                "template": {
                    "spec": {
                        "initContainers": [{"name": "init", "image": "x:2"}],
                        "containers": [
                            {
                                "name": "main",
                                "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                                "ports": [{"containerPort": 81, "name": "metrics"}],
                                "volumeMounts": [{"mountPath": "/b", "readOnly": True}],
                            }
                        ],
                        "volumes": [{"name": "x", "emptyDir": {}}],
                    }
                }
            },
        },
        STRATEGIC,
    )
    spec = patched["spec"]["template"]["spec"]
    main, side = spec["containers"]
    assert side["name"] == "side" and spec["initContainers"][0]["image"] == "x:2"
    assert main["image"] == "x:1"
    assert [(e["name"], e["value"]) for e in main["env"]] == [("A", "1"), ("B", "20"), ("C", "3")]
    assert [p.get("name") for p in main["ports"]] == [None, "metrics"]
    assert main["volumeMounts"][1] == {"name": "w", "mountPath": "/b", "readOnly": True}
    assert [v["name"] for v in spec["volumes"]] == ["v", "w", "x"]
    assert patched["metadata"]["finalizers"] == ["one", "two"]


def test_strategic_directives(kube_client: client.ApiClient, job: dict) -> None:
    patched = _patch(
        kube_client,
        JOB,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "side", "$patch": "delete"},
                            {
                                "name": "main",
                                "env": [{"name": "A", "$patch": "delete"}],
                                "volumeMounts": None,
                            },
                        ],
                        "volumes": [{"name": "only", "emptyDir": {}}, {"$patch": "replace"}],
                    }
                }
            },
        },
        STRATEGIC,
    )
    spec = patched["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["main"]
    assert [e["name"] for e in spec["containers"][0]["env"]] == ["B"]
    assert "volumeMounts" not in spec["containers"][0]
    assert spec["volumes"] == [{"name": "only", "emptyDir": {}}]
    replaced = _patch(
        kube_client,
        JOB,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "resources": {"$patch": "replace", "limits": {"cpu": "1"}},
                            }
                        ]
                    }
                }
            },
        },
        STRATEGIC,
    )
    assert replaced["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "requests": {"cpu": "1"},
    }


def test_strategic_conditions_and_owner_references(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    # Owners must exist, or the garbage collector removes the pod.
    u1, u2 = (
        core.create_namespaced_config_map("default", {"metadata": {"name": n}}).metadata.uid
        for n in ("a", "b")
    )
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {
                "name": "p",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": u1}
                ],
            },
            "spec": {
                "containers": [{"name": "c", "image": "x:1"}],
                "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
            },
        },
    )
    path = "/api/v1/namespaces/default/pods/p"
    status = _patch(
        kube_client,
        path + "/status",
        {
            "status": {
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                ]
            }
        },
        STRATEGIC,
    )["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("PodScheduled", "True"),
        ("Ready", "False"),
    ]
    assert status["conditions"][0]["reason"] == "SchedulingGated"  # merged, not replaced
    pod = _patch(
        kube_client,
        path,
        {
            "metadata": {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": u2}
                ]
            },
            "spec": {"schedulingGates": [{"name": "g1", "$patch": "delete"}]},
        },
        STRATEGIC,
    )
    assert [r["uid"] for r in pod["metadata"]["ownerReferences"]] == [u1, u2]
    assert pod["spec"]["schedulingGates"] == [{"name": "g2"}]


def test_merge_and_json_patch(kube_client: client.ApiClient, job: dict) -> None:
    merged = _patch(
        kube_client,
        JOB,
        {
            "metadata": {"labels": {"a": "b"}, "finalizers": None},
            "spec": {"template": {"spec": {"volumes": [{"name": "z", "emptyDir": {}}]}}},
        },
        MERGE,
    )
    assert merged["metadata"]["labels"] == {"a": "b"}
    assert "finalizers" not in merged["metadata"]
    assert merged["spec"]["template"]["spec"]["volumes"] == [{"name": "z", "emptyDir": {}}]
    patched = _patch(
        kube_client,
        JOB,
        [
            {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
            {"op": "replace", "path": "/spec/backoffLimit", "value": 2},
            {"op": "test", "path": "/metadata/labels/a", "value": "b"},
        ],
        JSON_PATCH,
    )
    assert patched["metadata"]["annotations"] == {"x": "y"}
    assert patched["spec"]["backoffLimit"] == 2
    with pytest.raises(client.ApiException) as err:
        _patch(
            kube_client,
            JOB,
            [{"op": "test", "path": "/metadata/labels/a", "value": "c"}],
            JSON_PATCH,
        )
    assert err.value.status == 422
