"""Journeys of the dataset controller alone: the API emulator, the fake kubelet, no webhooks.

PVCs are created already labelled, as the PVC mutating webhook leaves them; consumer pods are
created with the gate already set, as the pod webhook leaves them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.datasets import NS, kubelet_images
from tests.world.kubelet.node import FakeKubelet


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    api = client.CoreV1Api(kube_client)
    for name in (NS, "gpu-admission"):
        api.create_namespace({"metadata": {"name": name}})
    return api


@pytest.fixture
def kubelet(
    kube_client: client.ApiClient, tmp_path: Path, core: client.CoreV1Api
) -> Iterator[FakeKubelet]:
    node = FakeKubelet(kube_client, pvc_base_dir=tmp_path / "pvcs", images=kubelet_images())
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
async def controllers(kube_client: client.ApiClient) -> AsyncIterator[list[DatasetController]]:
    started: list[DatasetController] = []
    yield started
    for controller in started:
        await controller.stop()
