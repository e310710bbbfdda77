"""Journeys through the real webhook service: the session's real kube-apiserver calls it, as
registered from the rendered manifests (tests/world/harness.py). Where a journey's pods must run
here (a cluster without snapshots, whose controller runs in-process), they run on a played node
agent beside the real scheduler and Job controller (tests/e2e/real_node.py), with the played CSI
snapshotter on the real external-snapshotter CRDs; every other journey with pods runs on the real
node, through the installed product (tests/install/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.real_node import node_agent
from tests.world.harness import AdmissionCluster, AdmissionClusterFactory
from tests.world.kubelet.node import FakeKubelet
from tests.world.snapshotter import FakeSnapshotter

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
STORAGE_CLASS = "shared-fs"


@pytest.fixture
def cluster(admission_cluster_factory: AdmissionClusterFactory) -> AdmissionCluster:
    return admission_cluster_factory()


@pytest.fixture
def storage(cluster: AdmissionCluster, tmp_path: Path, crds: None) -> Iterator[FakeKubelet]:
    snapshots = FakeSnapshotter(cluster.api, pvc_base_dir=tmp_path / "pvcs").start()
    try:
        with node_agent(cluster.api, tmp_path / "pvcs", snapshots.restore) as kubelet:
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
            yield kubelet
    finally:
        snapshots.stop()
