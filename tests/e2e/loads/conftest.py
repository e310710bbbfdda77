"""Journeys of the dataset controller alone, on the session's real control plane: kube-apiserver
with the real scheduler, Job controller, garbage collector and PV controller; no node and no
webhooks. PVCs are created already labelled, as the PVC mutating webhook leaves them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.real_node import workload_namespace


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    """This journey's namespace; emptied afterwards, so the next starts from nothing."""
    return workload_namespace(kube_client)


@pytest.fixture
async def controllers(kube_client: client.ApiClient) -> AsyncIterator[list[DatasetController]]:
    started: list[DatasetController] = []
    yield started
    for controller in started:
        await controller.stop()
