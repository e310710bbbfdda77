"""Garbage collection of dependents by ownerReference, observed through watches."""

from __future__ import annotations

from kubernetes import client, watch


def _owned_configmap(name: str, owner: client.V1ConfigMap, block: bool = False) -> dict:
    return {
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": owner.metadata.name,
                    "uid": owner.metadata.uid,
                    "blockOwnerDeletion": block,
                }
            ],
        }
    }


def _wait_deleted(core: client.CoreV1Api, names: set[str], rv: str) -> None:
    """Watch from ``rv`` until every name has a DELETED event (bounded by timeoutSeconds)."""
    pending = set(names)
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
    ):
        if event["type"] == "DELETED":
            pending.discard(event["object"].metadata.name)
        if not pending:
            stream.stop()
    assert not pending, f"not deleted: {pending}"


def test_background_deletes_dependents(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map("default", _owned_configmap("child", owner))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.delete_namespaced_config_map("owner", "default")
    _wait_deleted(core, {"owner", "child"}, rv)


def test_foreground_deletes_owner_after_blocking_dependents(
    kube_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_client)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map("default", _owned_configmap("child", owner, block=True))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.delete_namespaced_config_map(
        "owner", "default", body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    order = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=10
    ):
        meta = event["object"].metadata
        if meta.name == "owner" and event["type"] == "MODIFIED":
            assert "foregroundDeletion" in meta.finalizers
        if event["type"] == "DELETED":
            order.append(meta.name)
        if order == ["child", "owner"]:
            stream.stop()
    assert order == ["child", "owner"]


def test_orphan_keeps_dependents_without_owner(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    owner = core.create_namespaced_config_map("default", {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map("default", _owned_configmap("child", owner))
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    core.delete_namespaced_config_map(
        "owner", "default", body=client.V1DeleteOptions(propagation_policy="Orphan")
    )
    _wait_deleted(core, {"owner"}, rv)
    child = core.read_namespaced_config_map("child", "default")
    assert child.metadata.owner_references is None
