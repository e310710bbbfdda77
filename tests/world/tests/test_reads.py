"""Lists, selectors, pagination and watches through the official client."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException


def _cm(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def _names(items: list) -> list[str]:
    return [i.metadata.name for i in items]


def test_label_selectors(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", _cm("a", tier="gpu", team="x"))
    core.create_namespaced_config_map("default", _cm("b", tier="cpu"))
    core.create_namespaced_config_map("default", _cm("c"))

    def names(selector: str) -> list[str]:
        items = core.list_namespaced_config_map("default", label_selector=selector).items
        return [n for n in _names(items) if n != "kube-root-ca.crt"]

    assert names("tier=gpu") == ["a"]
    assert names("tier==gpu") == ["a"]
    assert names("tier!=gpu") == ["b", "c"]
    assert names("tier in (gpu,cpu)") == ["a", "b"]
    assert names("tier notin (gpu)") == ["b", "c"]
    assert names("team") == ["a"]
    assert names("!team,tier") == ["b"]


def test_field_selectors(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": "ml"}})
    core.create_namespaced_secret("default", {"metadata": {"name": "g"}, "type": "gcp-credential"})
    core.create_namespaced_secret("ml", {"metadata": {"name": "o"}})
    assert _names(
        core.list_secret_for_all_namespaces(field_selector="type=gcp-credential").items
    ) == ["g"]
    assert _names(
        core.list_secret_for_all_namespaces(field_selector="metadata.namespace=ml").items
    ) == ["o"]
    assert _names(
        core.list_secret_for_all_namespaces(
            field_selector="metadata.name!=g,metadata.namespace=ml"
        ).items
    ) == ["o"]
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=,status.phase=Pending")
    assert pods.items == []
    with pytest.raises(ApiException) as err:
        core.list_namespaced_secret("default", field_selector="data.x=1")
    assert err.value.status == 400


def test_limit_and_continue(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    for i in range(5):
        core.create_namespaced_config_map("default", _cm(f"cm-{i}", page="yes"))
    seen, token = [], None
    while True:
        page = core.list_namespaced_config_map(
            "default", label_selector="page=yes", limit=2, _continue=token
        )
        seen.extend(_names(page.items))
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 5 - len(seen)
    assert seen == [f"cm-{i}" for i in range(5)]


def test_watch_resumes_from_resource_version(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", _cm("w"))
    core.patch_namespaced_config_map("w", "default", {"data": {"k": "v"}})
    core.delete_namespaced_config_map("w", "default")
    events = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=5
    ):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 3:
            stream.stop()
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_sends_deleted_when_object_leaves_selector(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", _cm("sel", keep="yes"))
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.patch_namespaced_config_map("sel", "default", {"metadata": {"labels": {"keep": "no"}}})
    core.patch_namespaced_config_map("sel", "default", {"metadata": {"labels": {"keep": "yes"}}})
    events = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map,
        "default",
        label_selector="keep=yes",
        resource_version=start,
        timeout_seconds=5,
    ):
        events.append(event["type"])
        if len(events) == 2:
            stream.stop()
    assert events == ["DELETED", "ADDED"]


def test_watch_from_compacted_version_is_gone(kubeapi, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", _cm("later"))
    kubeapi.faults.compact()
    response = core.list_namespaced_config_map(
        "default", watch=True, resource_version=old, _preload_content=False
    )
    first = json.loads(response.readline())
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410 and first["object"]["reason"] == "Expired"
    assert first["object"]["message"].startswith(f"too old resource version: {old} (")
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
        ):
            pass
    assert err.value.status == 410


def test_history_size_bounds_watch_resume(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    old = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", _cm("churn"))
    for i in range(120):  # the test emulator keeps 100 events
        core.patch_namespaced_config_map("churn", "default", {"data": {"i": str(i)}})
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
        ):
            pass
    assert err.value.status == 410


def test_bookmarks_carry_current_version(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    rv = core.list_namespaced_pod("default").metadata.resource_version
    response = core.list_namespaced_pod(
        "default",
        watch=True,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
        _preload_content=False,
    )
    event = json.loads(response.readline())
    response.close()
    assert event["type"] == "BOOKMARK"
    assert event["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": rv},
    }


def test_watch_without_version_starts_with_current_state(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", _cm("present"))
    stream = watch.Watch()
    names = []
    for event in stream.stream(
        core.list_namespaced_config_map,
        "default",
        field_selector="metadata.name=present",
        timeout_seconds=5,
    ):
        names.append((event["type"], event["object"].metadata.name))
        stream.stop()
    assert names == [("ADDED", "present")]
