"""Datasets as a cache, end to end: the real webhooks, the controller, the fake kubelet with a
snapshot-capable fake CSI driver, real rclone against moto. A loaded PVC is snapshotted; a second
PVC of the same source starts as a clone and the loader copies only what changed."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from gpu_admission.cluster.snapshots import cache_key
from tests.e2e.admission.conftest import GROUP, STORAGE_CLASS, VERSION
from tests.e2e.datasets import eventually, make_config, wait_phase
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree

NS = "ml"
PREFIX = "gpu-admission.io/"
CHANGED = ("part-1/shard-1/file-0001.bin", "part-2/shard-2/file-0002.bin")


@pytest.fixture
async def controller(cluster: AdmissionCluster, s3: S3Store) -> AsyncIterator[DatasetController]:
    started = DatasetController(cluster.api, make_config(s3.endpoint), identity="cache")
    yield started
    await started.stop()


def dataset_pvc(name: str, source: str, credentials: str | None = None) -> dict[str, Any]:
    annotations = {f"{PREFIX}data-source": source}
    if credentials:
        annotations[f"{PREFIX}data-credentials"] = credentials
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def create_pvc(core: client.CoreV1Api, body: dict[str, Any]) -> dict[str, Any]:
    response = core.create_namespaced_persistent_volume_claim(NS, body, _preload_content=False)
    return json.loads(response.data)


def snapshots(cluster: AdmissionCluster) -> list[dict[str, Any]]:
    listing = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, NS, "volumesnapshots"
    )
    return listing["items"]


async def load(core: client.CoreV1Api, name: str) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    pvc = await wait_phase(core, name, "Succeeded")
    return pvc, time.monotonic() - started


async def test_a_second_pvc_of_a_source_is_cloned_and_refreshes_only_what_changed(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
) -> None:
    core = cluster.core
    files = dataset_files(files=300, large_bytes=24 * 1024 * 1024)
    s3.put("cached-data", files, public=True)
    await controller.start()

    create_pvc(core, dataset_pvc("first", "s3://cached-data"))
    first, first_seconds = await load(core, "first")
    kept = first["metadata"]["annotations"][f"{PREFIX}data-snapshot"]
    assert f"kept as VolumeSnapshot {kept}" in first["status"]["conditions"][0]["message"]
    [snapshot] = snapshots(cluster)
    assert snapshot["metadata"]["name"] == kept
    assert snapshot["metadata"]["ownerReferences"][0]["name"] == "first"  # nothing dangles
    assert snapshot["spec"]["volumeSnapshotClassName"] == "csi-snapshots"

    # Two objects change at the source; then a second PVC asks for the same data.
    changed = {key: b"new contents of " + key.encode() for key in CHANGED}
    s3.put("cached-data", changed, public=True)
    files.update(changed)
    key = cache_key("s3://cached-data", None)
    await eventually(
        lambda: any(s.ready for s in cluster.view.dataset_snapshots(NS, key)),
        what="the webhook to see the ready snapshot",
    )
    created = create_pvc(core, dataset_pvc("second", "s3://cached-data"))
    ref = {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": kept}
    assert created["spec"]["dataSourceRef"] == ref and created["spec"]["dataSource"] == ref
    assert created["metadata"]["annotations"][f"{PREFIX}data-cloned-from"] == kept

    second, second_seconds = await load(core, "second")
    assert tree(storage.pvc_dir(NS, "second")) == files  # current data, byte for byte
    annotations = second["metadata"]["annotations"]
    assert annotations[f"{PREFIX}data-load-files"] == "2"  # only the two changed objects
    assert annotations[f"{PREFIX}data-load-bytes"] == str(sum(map(len, changed.values())))
    message = second["status"]["conditions"][0]["message"]
    assert message.startswith(
        f"refreshed s3://cached-data from VolumeSnapshot {kept}: 2 new or changed files"
    )
    assert f"{len(files)} compared with the clone" in message
    first_bytes = int(first["metadata"]["annotations"][f"{PREFIX}data-load-bytes"])
    print(
        f"\nfull load: {first_seconds:.2f} s, {first_bytes} bytes; clone + refresh: "
        f"{second_seconds:.2f} s, {annotations[f'{PREFIX}data-load-bytes']} bytes"
    )
    # The newer load is kept too; two per source by default, so both stay.
    names = {s["metadata"]["name"] for s in snapshots(cluster)}
    assert names == {kept, annotations[f"{PREFIX}data-snapshot"]}


async def test_other_credentials_for_the_same_source_are_not_cloned(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
) -> None:
    core = cluster.core
    s3.put("team-data", dataset_files(files=20, large_bytes=0), public=True)
    await controller.start()
    create_pvc(core, dataset_pvc("team-a", "s3://team-data"))
    await load(core, "team-a")
    await eventually(
        lambda: any(
            s.ready for s in cluster.view.dataset_snapshots(NS, cache_key("s3://team-data", None))
        ),
        what="the webhook to see the ready snapshot",
    )
    keys = {
        "AWS_ACCESS_KEY_ID": "team-b",
        "AWS_SECRET_ACCESS_KEY": "team-b-secret",
        "AWS_ENDPOINT_URL": s3.endpoint,
    }
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": "team-b"},
            "type": "aws-credential",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()},
        },
    )
    created = create_pvc(core, dataset_pvc("team-b", "s3://team-data", credentials="team-b"))
    assert "dataSourceRef" not in created["spec"]
    assert f"{PREFIX}data-cloned-from" not in created["metadata"]["annotations"]
    opted_out = dataset_pvc("full", "s3://team-data")
    opted_out["metadata"]["annotations"][f"{PREFIX}data-cache"] = "false"
    assert "dataSourceRef" not in create_pvc(core, opted_out)["spec"]


@pytest.mark.parametrize(
    ("missing", "words"),
    [("the snapshot API", "snapshot API"), ("a VolumeSnapshotClass", "VolumeSnapshotClass")],
)
async def test_without_snapshots_loads_still_succeed_and_say_so_once(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    caplog: pytest.LogCaptureFixture,
    missing: str,
    words: str,
) -> None:
    if missing == "the snapshot API":
        cluster.kube_api.unserved_groups.add(GROUP)
    else:
        client.CustomObjectsApi(cluster.api).delete_cluster_custom_object(
            GROUP, VERSION, "volumesnapshotclasses", "csi-snapshots"
        )
    caplog.set_level(logging.INFO, logger="controllers")
    s3.put("plain-data", dataset_files(files=10, large_bytes=0), public=True)
    controller = DatasetController(cluster.api, make_config(s3.endpoint), identity="plain")
    await controller.start()
    try:
        create_pvc(cluster.core, dataset_pvc("plain", "s3://plain-data"))
        pvc, _ = await load(cluster.core, "plain")
        assert f"{PREFIX}data-snapshot" not in pvc["metadata"]["annotations"]
        said = [r for r in caplog.records if words in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        await controller.stop()
