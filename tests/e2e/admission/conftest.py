"""Journeys through the real webhook service: the API emulator calls it as kube-apiserver would,
registered from the rendered manifests (tests/world/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.datasets import kubelet_images
from tests.world.harness import AdmissionCluster, AdmissionClusterFactory
from tests.world.kubelet.node import FakeKubelet
from tests.world.snapshotter import FakeSnapshotter

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
STORAGE_CLASS = "shared-fs"


@pytest.fixture
def cluster(admission_cluster_factory: AdmissionClusterFactory) -> AdmissionCluster:
    return admission_cluster_factory()


@pytest.fixture
def kubelet(cluster: AdmissionCluster, tmp_path: Path) -> Iterator[FakeKubelet]:
    node = FakeKubelet(
        cluster.api, pvc_base_dir=tmp_path / "pvcs", run_all_pods=True, images=kubelet_images()
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def storage(cluster: AdmissionCluster, tmp_path: Path) -> Iterator[FakeKubelet]:
    snapshots = FakeSnapshotter(cluster.api, pvc_base_dir=tmp_path / "pvcs").start()
    kubelet = FakeKubelet(
        cluster.api,
        pvc_base_dir=tmp_path / "pvcs",
        volume_source=snapshots.restore,
        images=kubelet_images(),
    ).start()
    storage_api = client.StorageV1Api(cluster.api)
    storage_api.create_storage_class(
        {"metadata": {"name": STORAGE_CLASS}, "provisioner": snapshots.driver}
    )
    client.CustomObjectsApi(cluster.api).create_cluster_custom_object(
        GROUP,
        VERSION,
        "volumesnapshotclasses",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": "csi-snapshots"},
            "driver": snapshots.driver,
            "deletionPolicy": "Delete",
        },
    )
    try:
        yield kubelet
    finally:
        kubelet.stop()
        snapshots.stop()
