"""Journeys through the real webhook service: the API emulator calls it as kube-apiserver would,
registered from the rendered manifests (tests/world/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.datasets import kubelet_images
from tests.world.harness import AdmissionCluster, AdmissionClusterFactory
from tests.world.kubelet.node import FakeKubelet


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
