"""Datasets as a cache, end to end: the real webhooks, the controller, the fake kubelet with a
snapshot-capable fake CSI driver, real rclone against moto. A loaded PVC is snapshotted; a second
PVC of the same source starts as a clone, kept as it is while the source lists to the digest its
snapshot's load read, and loaded afresh once an object changed."""

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


async def load_first(
    cluster: AdmissionCluster, s3: S3Store, bucket: str, files: dict[str, bytes]
) -> tuple[dict[str, Any], str]:
    """Load `files` into PVC "first" and wait for admission to see its snapshot ready."""
    core = cluster.core
    s3.put(bucket, files, public=True)
    create_pvc(core, dataset_pvc("first", f"s3://{bucket}"))
    first, _ = await load(core, "first")
    annotations = first["metadata"]["annotations"]
    kept = annotations[f"{PREFIX}data-snapshot"]
    assert f"kept as VolumeSnapshot {kept}" in first["status"]["conditions"][0]["message"]
    [snapshot] = snapshots(cluster)
    assert snapshot["metadata"]["name"] == kept
    assert snapshot["metadata"]["ownerReferences"][0]["name"] == "first"  # nothing dangles
    assert snapshot["spec"]["volumeSnapshotClassName"] == "csi-snapshots"
    # What the load read is recorded on the PVC and on its snapshot.
    digest = annotations[f"{PREFIX}data-digest"]
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert annotations[f"{PREFIX}data-digest-files"] == str(len(files))
    assert annotations[f"{PREFIX}data-digest-bytes"] == str(sum(map(len, files.values())))
    assert snapshot["metadata"]["annotations"][f"{PREFIX}data-digest"] == digest
    key = cache_key(f"s3://{bucket}", None)
    await eventually(
        lambda: any(s.ready for s in cluster.view.dataset_snapshots(NS, key)),
        what="the webhook to see the ready snapshot",
    )
    return first, kept


def create_clone(core: client.CoreV1Api, bucket: str, kept: str, digest: str) -> None:
    created = create_pvc(core, dataset_pvc("second", f"s3://{bucket}"))
    ref = {"apiGroup": GROUP, "kind": "VolumeSnapshot", "name": kept}
    assert created["spec"]["dataSourceRef"] == ref and created["spec"]["dataSource"] == ref
    assert created["metadata"]["annotations"][f"{PREFIX}data-cloned-from"] == kept
    assert created["metadata"]["annotations"][f"{PREFIX}data-cloned-digest"] == digest


async def test_a_clone_of_an_unchanged_source_is_reused_without_copying(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
) -> None:
    core = cluster.core
    files = dataset_files(files=300, large_bytes=24 * 1024 * 1024)
    await controller.start()
    first, kept = await load_first(cluster, s3, "cached-data", files)
    digest = first["metadata"]["annotations"][f"{PREFIX}data-digest"]

    create_clone(core, "cached-data", kept, digest)
    second, _ = await load(core, "second")
    assert tree(storage.pvc_dir(NS, "second")) == files
    annotations = second["metadata"]["annotations"]
    assert annotations[f"{PREFIX}data-load-files"] == "0"  # nothing copied
    assert annotations[f"{PREFIX}data-digest"] == digest
    message = second["status"]["conditions"][0]["message"]
    assert message.startswith(
        f"reused VolumeSnapshot {kept}: s3://cached-data lists as it did when the snapshot was "
        f"taken ({len(files)} files, {sum(map(len, files.values()))} bytes, digest "
        f"{digest.removeprefix('sha256:')[:12]}); nothing copied"
    )


async def test_a_clone_of_a_changed_source_is_loaded_afresh(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
) -> None:
    core = cluster.core
    files = dataset_files(files=60, large_bytes=4 * 1024 * 1024)
    await controller.start()
    first, kept = await load_first(cluster, s3, "changing-data", files)
    then = first["metadata"]["annotations"][f"{PREFIX}data-digest"]

    # Two objects change at the source, each to new bytes of the same size; one goes.
    changed = {key: bytes(b ^ 0xFF for b in files[key]) for key in CHANGED}
    s3.put("changing-data", changed, public=True)
    files.update(changed)
    gone = sorted(files)[-1]
    s3.client().delete_object(Bucket="changing-data", Key=gone)
    del files[gone]

    create_clone(core, "changing-data", kept, then)
    second, _ = await load(core, "second")
    assert tree(storage.pvc_dir(NS, "second")) == files  # current data, byte for byte
    annotations = second["metadata"]["annotations"]
    now = annotations[f"{PREFIX}data-digest"]
    assert now != then
    assert annotations[f"{PREFIX}data-load-files"] == str(len(files))  # every object again
    message = second["status"]["conditions"][0]["message"]
    short = (then.removeprefix("sha256:")[:12], now.removeprefix("sha256:")[:12])
    assert message.startswith(
        f"loaded s3://changing-data afresh into a clone of VolumeSnapshot {kept}, since the "
        f"source changed since the snapshot was taken (digest {short[0]} then, {short[1]} now): "
        f"{len(files)} files"
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
