"""Journeys of the dataset controller alone, on the session's real control plane: kube-apiserver
with the real scheduler, Job controller, garbage collector and PV controller, a played kubelet
(a node agent) and a played provisioner; no webhooks (tests/e2e/real_node.py).

PVCs are created already labelled, as the PVC mutating webhook leaves them; consumer pods are
created with the gate already set, as the pod webhook leaves them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.real_node import node_agent, workload_namespace
from tests.world.kubelet.node import FakeKubelet


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    """This journey's namespace; emptied afterwards, so the next starts from nothing."""
    return workload_namespace(kube_client)


@pytest.fixture
def kubelet(
    kube_client: client.ApiClient, tmp_path: Path, core: client.CoreV1Api
) -> Iterator[FakeKubelet]:
    with node_agent(kube_client, tmp_path / "pvcs") as node:
        yield node


@pytest.fixture
async def controllers(kube_client: client.ApiClient) -> AsyncIterator[list[DatasetController]]:
    started: list[DatasetController] = []
    yield started
    for controller in started:
        await controller.stop()
