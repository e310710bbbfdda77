"""Datasets without a snapshot cache, end to end: the real webhooks, an in-process controller
(its log is what the test reads), the played kubelet and real rclone against moto. Where the
cluster serves no snapshot API, or has no VolumeSnapshotClass for the driver, loads still
succeed and the controller says so once. The cache itself (a clone reused, or loaded afresh
once its source changed; other credentials never cloned) runs on the real node, through the
installed product: tests/install/researcher/test_dataset_cache.py."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.admission.conftest import GROUP, STORAGE_CLASS, VERSION
from tests.e2e.datasets import make_config, wait_phase
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.objectstores import S3Store, dataset_files

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
