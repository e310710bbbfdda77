"""The cert-manager component on the real node, with cert-manager played through the API as its
source makes it (tests/world/stand_ins/cert_manager.py): the base and the component applied as
docs/install.md composes them, in another namespace than gpu-admission as its "Another
namespace" says (one `namespace:` line and the replacements block), cert-manager issues the
component's Certificates and injects its CA into both webhook configurations, and a pod that
needs the service is admitted through it, TLS and all (the API server checks the name
`gpu-admission.<namespace>.svc`). Then a renewal: cert-manager rewrites the Secret in place with
a new key, every replica serves the new certificate without a restart, and the API server still
trusts it."""

from __future__ import annotations

import json
import re
from base64 import b64decode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from kubernetes import client

from tests import ROOT
from tests.install.cluster import IMAGE, ROLLOUT_SECONDS, InstallCluster, wait_for
from tests.install.journeys import install_crds
from tests.manifests.compositions import namespace_replacements
from tests.world.stand_ins.cert_manager import CertManager

NS = "certified"
HOME = "ml-platform"  # the install's namespace, not the base's
SERVICE = "gpu-admission"  # the Deployment
LOADED = re.compile(r"serving certificate loaded \(serial ([0-9a-f]+)\)")


def _kustomization(folder: Path) -> Path:
    name, _, tag = IMAGE.partition(":")
    (folder / "gpu-admission").symlink_to(ROOT)
    mine = folder / "my-install"
    mine.mkdir()
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": HOME,
        "resources": ["../gpu-admission/manifests/base"],
        "components": ["../gpu-admission/manifests/components/cert-manager"],
        "images": [{"name": "gpu-admission", "newName": name, "newTag": tag}],
        "replacements": namespace_replacements(),
    }
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return mine


@pytest.fixture(scope="module")
def cluster(install_cluster: InstallCluster) -> InstallCluster:
    return install_cluster.moved_to(HOME)


@pytest.fixture(scope="module")
def cert_manager(
    cluster: InstallCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CertManager]:
    install_crds(cluster, "cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml")
    mine = _kustomization(tmp_path_factory.mktemp("cert-manager"))
    played = CertManager(cluster.api)
    cluster.kubectl("apply", "-k", str(mine))
    try:
        # What cert-manager does once the objects exist: the CA, the serving certificate it
        # signs; then, once the controller has written the webhook configurations (with the
        # annotation that asks for it), the CA injected into both.
        played.issue(HOME, "gpu-admission-ca")
        played.issue(HOME, "gpu-admission-serving")
        cluster.rolled_out("gpu-admission-controller")
        injected = [
            "MutatingWebhookConfiguration/gpu-admission",
            "ValidatingWebhookConfiguration/gpu-admission",
        ]
        wait_for(
            lambda: sorted(played.inject()) == injected,
            "the controller to write both webhook configurations, asking for cert-manager's CA",
            diagnosis=cluster.diagnosis,
        )
        cluster.rolled_out(SERVICE)
        cluster.wait_written()
        cluster.namespace(NS)
        yield played
    finally:
        cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
        cluster.uninstall(str(mine))


def _serials(cluster: InstallCluster) -> dict[str, str]:
    """Each ready replica of the service -> the serial of the certificate it last loaded."""
    serials = {}
    for pod in cluster.core.list_namespaced_pod(
        HOME, label_selector="app.kubernetes.io/name=gpu-admission"
    ).items:
        if pod.metadata.deletion_timestamp or not pod.metadata.name.startswith(f"{SERVICE}-"):
            continue
        if pod.metadata.name.startswith("gpu-admission-controller-"):
            continue
        log = cluster.core.read_namespaced_pod_log(pod.metadata.name, HOME)
        if found := LOADED.findall(log):
            serials[pod.metadata.name] = found[-1]
    return serials


def _restarts(cluster: InstallCluster) -> dict[str, int]:
    return {
        p.metadata.name: sum(s.restart_count for s in p.status.container_statuses or [])
        for p in cluster.core.list_namespaced_pod(
            HOME, label_selector="app.kubernetes.io/name=gpu-admission"
        ).items
    }


def _admitted_with_credentials(cluster: InstallCluster, name: str) -> dict[str, Any]:
    """A pod that names cloud credentials: only the service's webhook can admit it (the
    mutating webhook is called, failing closed), and what it adds proves it answered."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"gpu-admission.io/cloud-credentials": "s3-reader"},
        },
        "spec": {
            "schedulingGates": [{"name": "test.gpu-admission.io/hold"}],
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    created = cluster.kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(pod), check=False)
    assert created.returncode == 0, created.stderr
    return json.loads(created.stdout)


def _secret_key_refs(pod: dict[str, Any]) -> set[str]:
    return {
        e["valueFrom"]["secretKeyRef"]["name"]
        for c in pod["spec"]["containers"]
        for e in c.get("env") or []
        if "secretKeyRef" in (e.get("valueFrom") or {})
    }


def test_a_pod_that_needs_the_service_is_admitted_with_cert_managers_certificate(
    cluster: InstallCluster, cert_manager: CertManager
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s3-reader", "namespace": NS},
        "type": "aws-credential",
        "stringData": {
            "AWS_ACCESS_KEY_ID": "datasets",
            "AWS_SECRET_ACCESS_KEY": "not-a-real-key",
            "AWS_ENDPOINT_URL": "https://minio.storage.svc:9000",
        },
    }
    cluster.apply([secret])  # the Secrets webhook is called too
    pod = _admitted_with_credentials(cluster, "reader")
    assert _secret_key_refs(pod) == {"s3-reader"}, pod["spec"]["containers"]
    # The service serves cert-manager's certificate, not one of its own.
    issued = cert_manager.core.read_namespaced_secret("gpu-admission-serving", HOME)
    assert (issued.metadata.annotations or {}).get("cert-manager.io/certificate-name") == (
        "gpu-admission-serving"
    )
    served = wait_for(lambda: _serials(cluster) or None, "the replicas' serials")
    assert set(served.values()) == {_serial(issued)}, served
    secrets = {s.metadata.name for s in cluster.core.list_namespaced_secret(HOME).items}
    assert "gpu-admission-tls" not in secrets  # no Secret of the service's own


def _serial(secret: client.V1Secret) -> str:
    certificate = x509.load_pem_x509_certificate(b64decode(secret.data["tls.crt"]))
    return f"{certificate.serial_number:x}"


def test_a_renewal_is_served_without_a_restart(
    cluster: InstallCluster, cert_manager: CertManager
) -> None:
    restarts = _restarts(cluster)
    renewed = f"{cert_manager.issue(HOME, 'gpu-admission-serving').serial_number:x}"
    cert_manager.inject()  # the same CA: nothing new to merge, as cert-manager finds it
    # The kubelet refreshes the mounted Secret (its sync period), the service polls the files.
    wait_for(
        lambda: (s := _serials(cluster)) and set(s.values()) == {renewed},
        "every replica to load the renewed certificate",
        timeout=ROLLOUT_SECONDS,
        diagnosis=cluster.diagnosis,
    )
    pod = _admitted_with_credentials(cluster, "after-renewal")
    assert _secret_key_refs(pod) == {"s3-reader"}
    assert _restarts(cluster) == restarts
