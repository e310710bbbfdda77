"""Pytest fixtures for the Kubernetes API emulator (the root conftest lists this plugin)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from .runner import KubeAPIHandle, start_kubeapi

# Small on purpose: tests see bookmarks and 410 Gone without generating much traffic.
TEST_BOOKMARK_INTERVAL = 0.2
TEST_HISTORY_SIZE = 100


@pytest.fixture
def kubeapi() -> Iterator[KubeAPIHandle]:
    """A fresh emulator per test (starts in well under a second; TLS material is cached)."""
    handle = start_kubeapi(history_size=TEST_HISTORY_SIZE, bookmark_interval=TEST_BOOKMARK_INTERVAL)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def kube_client(kubeapi: KubeAPIHandle) -> Iterator[client.ApiClient]:
    """The official client configured from the emulator's kubeconfig."""
    api_client = config.new_client_from_config(str(kubeapi.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()
