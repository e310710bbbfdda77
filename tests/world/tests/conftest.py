"""Fixtures for the test world's own tests, on the session's real control plane: a namespace of
their own, the batch API, and a node agent (the played kubelet) beside the real scheduler and
Job controller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.real_node import node_agent
from tests.world.kubelet.node import FakeKubelet
from tests.world.namespaces import namespace_ready
from tests.world.tests.workloads import NAMESPACE


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    namespace_ready(kube_client, NAMESPACE)
    return client.CoreV1Api(kube_client)


@pytest.fixture
def batch(kube_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(kube_client)


@pytest.fixture
def kubelet(
    kube_client: client.ApiClient, core: client.CoreV1Api, tmp_path: Path
) -> Iterator[FakeKubelet]:
    with node_agent(kube_client, tmp_path / "pvcs") as running:
        yield running
