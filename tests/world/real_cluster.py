"""The real control plane, once per test session: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler 1.36 from KUBEBUILDER_ASSETS (`control_plane.py`). Tests share it, so each
gives itself its own namespaces and removes the cluster-scoped objects it made.

Without KUBEBUILDER_ASSETS the tests that need it are skipped with the reason; under CI (which
sets it from ../shared/kube/unpack.sh) they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from tests.world import control_plane


def unavailable(reason: str) -> None:
    control_plane.SKIPPED.append(reason)
    if os.environ.get("CI"):
        pytest.fail(f"the real control plane cannot run in CI: {reason}")
    pytest.skip(f"real control plane: {reason}")


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[control_plane.ControlPlane]:
    try:
        plane = control_plane.start(controller_manager=True, scheduler=True)
    except control_plane.Unavailable as error:
        unavailable(str(error))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def api(real_cluster: control_plane.ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(str(real_cluster.kubeconfig))
