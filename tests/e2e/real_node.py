"""A journey's world on the session's real control plane: its workload namespace (emptied
afterwards, so the next journey starts from nothing) and a node (the played kubelet as a node
agent, with the played provisioner for its claims). Journeys' fixtures call these."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from kubernetes import client

from tests.e2e.datasets import NS, kubelet_images
from tests.support.waits import while_running
from tests.world.kubelet.node import FakeKubelet
from tests.world.namespaces import namespace_ready
from tests.world.provisioner import Provisioner

NODE = "journey-node"
SCHEDULABLE_SECONDS = 60


def workload_namespace(api: client.ApiClient) -> client.CoreV1Api:
    """The journey's namespace, and the controller's (for its Lease); `kube_api` empties them
    after the journey (tests/world/sweep.py)."""
    namespace_ready(api, NS)
    namespace_ready(api, "gpu-admission")
    return client.CoreV1Api(api)


@contextlib.contextmanager
def node_agent(
    api: client.ApiClient,
    pvc_base: Path,
    volume_source: Callable[[str, str, Path], None] | None = None,
) -> Iterator[FakeKubelet]:
    """A Ready node whose pods run here; `volume_source` fills a new claim's volume (a
    snapshot restore). Returns once the scheduler may place pods on it: kube-controller-manager
    has lifted the not-ready taint every new Node starts with (until then a journey's first pod
    is briefly unschedulable, and the controller rightly says so)."""
    provisioner = Provisioner(api, pvc_base).start()
    node = FakeKubelet(
        api,
        node_name=NODE,
        pvc_base_dir=pvc_base,
        images=kubelet_images(),
        volume_source=volume_source,
    )
    try:
        node.start()
        core = client.CoreV1Api(api)
        while_running(
            lambda: not core.read_node(NODE).spec.taints,
            f"node {NODE} to lose its not-ready taint",
            {},
            SCHEDULABLE_SECONDS,
        )
        yield node
    finally:
        node.stop()
        provisioner.stop()
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(api).delete_node(NODE)
