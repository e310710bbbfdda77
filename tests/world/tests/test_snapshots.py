"""Volume snapshots on the real kube-apiserver with the real external-snapshotter CRDs (their
validation is the CRDs' own), and the played snapshotter: a snapshot is a point-in-time copy of
the PVC's data, and a PVC whose dataSourceRef names a ready snapshot starts with it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e.real_node import node_agent
from tests.world.kubelet.node import FakeKubelet
from tests.world.snapshotter import FakeSnapshotter

NS = "ml"
GROUP, VERSION = "snapshot.storage.k8s.io", "v1"


@pytest.fixture
def custom(kube_client: client.ApiClient, crds: None) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


@pytest.fixture
def storage(
    kube_client: client.ApiClient, tmp_path: Path, core: client.CoreV1Api
) -> Iterator[tuple[FakeSnapshotter, FakeKubelet]]:
    snapshots = FakeSnapshotter(kube_client, pvc_base_dir=tmp_path / "pvcs").start()
    try:
        with node_agent(kube_client, tmp_path / "pvcs", snapshots.restore) as kubelet:
            yield snapshots, kubelet
    finally:
        snapshots.stop()


def pvc(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "2Gi"}},
            **spec,
        },
    }


def snapshot(name: str, source: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VolumeSnapshot",
        "metadata": {"name": name},
        "spec": {"source": source},
    }


def wait_ready(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", name)
        if (found.get("status") or {}).get("readyToUse"):
            return found
        time.sleep(0.02)
    raise AssertionError(f"snapshot {name} never became ready")


def test_snapshot_is_a_point_in_time_copy_that_new_pvcs_start_with(storage, core, custom):
    _, kubelet = storage
    core.create_namespaced_persistent_volume_claim(NS, pvc("source"))
    data = kubelet.pvc_dir(NS, "source")
    (data / "a.txt").write_text("before")
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "volumesnapshots",
        snapshot("snap", {"persistentVolumeClaimName": "source"}),
    )
    ready = wait_ready(custom, "snap")
    assert ready["status"]["restoreSize"] == "2Gi"
    content_name = ready["status"]["boundVolumeSnapshotContentName"]
    contents = (GROUP, VERSION, "volumesnapshotcontents")
    content = custom.get_cluster_custom_object(*contents, content_name)
    assert content["spec"]["volumeSnapshotRef"]["name"] == "snap"
    assert content["status"]["readyToUse"] is True
    (data / "a.txt").write_text("after")  # the snapshot does not see later writes

    ref = {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": "snap"}
    created = core.create_namespaced_persistent_volume_claim(NS, pvc("clone", dataSourceRef=ref))
    # kube-apiserver mirrors dataSourceRef into dataSource when only the former is given.
    assert (
        created.spec.data_source.name == "snap"
        and created.spec.data_source.kind == "VolumeSnapshot"
    )
    assert (kubelet.pvc_dir(NS, "clone") / "a.txt").read_text() == "before"

    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", "snap")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            custom.get_cluster_custom_object(*contents, content_name)
        except ApiException as error:
            assert error.status == 404
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the content outlived its snapshot")


def rejected(custom: client.CustomObjectsApi, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots", body)
    assert caught.value.status == 422
    return json.loads(caught.value.body)["message"]


def test_snapshot_validation_as_the_crds_have_it(custom, core):
    both = {"persistentVolumeClaimName": "a", "volumeSnapshotContentName": "b"}
    assert rejected(custom, snapshot("x", both)) == (
        'VolumeSnapshot.snapshot.storage.k8s.io "x" is invalid: spec.source: Invalid value: '
        "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"
    )
    body = snapshot("y", {"persistentVolumeClaimName": "a"})
    body["spec"]["volumeSnapshotClassName"] = ""
    assert "volumeSnapshotClassName must not be the empty string when set" in rejected(custom, body)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, "volumesnapshots", snapshot("z", {"persistentVolumeClaimName": "a"})
    )
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "volumesnapshots", "z",
            {"spec": {"source": {"persistentVolumeClaimName": "b"}}},
        )  # fmt: skip
    assert "persistentVolumeClaimName is immutable" in json.loads(caught.value.body)["message"]


def test_a_cluster_without_the_snapshot_crds_answers_404(kube_api, custom, core):
    kube_api.unserved_groups.add(GROUP)  # the fault proxy: the CRDs are installed for the session
    with pytest.raises(ApiException) as caught:
        custom.list_namespaced_custom_object(GROUP, VERSION, NS, "volumesnapshots")
    assert caught.value.status == 404
