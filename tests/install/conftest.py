"""The install tier: the product installed with `kubectl apply -k manifests/` onto the real
control plane and a real node, then used as a researcher would. Where a real node cannot run
(no kubelet in KUBEBUILDER_ASSETS, no containerd, not root) or the image cannot be built, the tier
is skipped with the reason; under CI it fails instead."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.install.cluster import InstallCluster, start
from tests.world import control_plane
from tests.world.containers.engine import Unavailable, build_image
from tests.world.node import network
from tests.world.node import node as real_node
from tests.world.stand_ins.holding_proxy import ThreadedHoldingProxy

# The kubelet versions the tier ran on, or why it did not run: the run's summary says which.
RAN_ON: list[str] = []
NOT_RUN: list[str] = []


def _unavailable(reason: str) -> None:
    NOT_RUN.append(reason)
    if os.environ.get("CI"):
        pytest.fail(f"the install tier cannot run in CI: {reason}")
    pytest.skip(f"install tier: {reason}")


@pytest.fixture(scope="session")
def install_cluster() -> Iterator[InstallCluster]:
    reason = real_node.unavailable_reason()  # cheap: before the image is built
    if reason:
        _unavailable(reason)
    built = build_image()
    if isinstance(built, Unavailable):
        _unavailable(built.reason)
    try:
        cluster = start()
    except control_plane.Unavailable as error:
        _unavailable(str(error))
        raise
    RAN_ON.append(cluster.node.version)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def held_store(install_cluster: InstallCluster) -> Iterator[ThreadedHoldingProxy]:
    """A proxy in front of the S3 stand-in, on the pod network, that holds a load's requests
    until the test releases them: the loader really runs while the test acts, with no sleeps."""
    proxy = ThreadedHoldingProxy(install_cluster.s3.endpoint, host=network.HOST).start()
    try:
        yield proxy
    finally:
        proxy.stop()
