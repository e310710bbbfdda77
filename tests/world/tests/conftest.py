"""Fixtures for the test world's own tests: a namespace, the batch API, a running fake kubelet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.world.kubelet.node import FakeKubelet
from tests.world.tests.workloads import NAMESPACE


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    api = client.CoreV1Api(kube_client)
    api.create_namespace({"metadata": {"name": NAMESPACE}})
    return api


@pytest.fixture
def batch(kube_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(kube_client)


@pytest.fixture
def kubelet(
    kube_client: client.ApiClient, core: client.CoreV1Api, tmp_path: Path
) -> Iterator[FakeKubelet]:
    with FakeKubelet(kube_client, pvc_base_dir=tmp_path / "pvcs") as running:
        yield running
