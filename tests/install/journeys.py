"""What the install tier's journeys share: the product installed for a module, a researcher's
pods and dataset PVCs, and reading what the product wrote on them."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from typing import Any

from tests.install.cluster import IMAGE, InstallCluster, wait_for

BASE = "manifests"
NS = "ml"
PREFIX = "gpu-admission.io/"


@contextlib.contextmanager
def installed_product(cluster: InstallCluster, kustomization: str = BASE) -> Iterator[None]:
    """`kubectl apply -k` as users do, the researchers' namespace, and the webhooks answering
    through their Service; afterwards the namespace and the product are deleted."""
    cluster.install(kustomization)
    cluster.namespace(NS)
    # The service publishes its caBundle at start; the API server applies it a moment later.
    wait_for(
        lambda: (
            cluster.apply([pod("probe", "true")], "--dry-run=server", check=False).returncode == 0
        ),
        "the webhooks to answer through their Service",
    )
    try:
        yield
    finally:
        cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
        cluster.uninstall(kustomization)


def pod(name: str, command: str, **spec: Any) -> dict[str, Any]:
    """A researcher's pod running the project's image (it has a shell), never pulled."""
    container = {
        "name": "main",
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", command],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def finished(cluster: InstallCluster, name: str, namespace: str = NS) -> str:
    """The pod's log once it has succeeded (its phase and events if it failed)."""

    def phase() -> str | None:
        current = cluster.core.read_namespaced_pod(name, namespace).status.phase
        return current if current in ("Succeeded", "Failed") else None

    final = wait_for(phase, f"pod {namespace}/{name} to finish")
    log = cluster.kubectl("-n", namespace, "logs", name).stdout
    if final != "Succeeded":
        events = cluster.kubectl("-n", namespace, "get", "events", "-o", "wide").stdout
        raise AssertionError(f"pod {name} {final}:\n{log}\n{events}")
    return log


def s3_secret(cluster: InstallCluster, name: str, endpoint: str | None = None) -> None:
    """Keys for the S3 stand-in (or whatever stands at `endpoint` in front of it)."""
    keys = {
        "AWS_ACCESS_KEY_ID": "team-a",
        "AWS_SECRET_ACCESS_KEY": "team-a-secret",
        "AWS_ENDPOINT_URL": endpoint or cluster.s3.endpoint,
    }
    data = {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()}
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "aws-credential"}
    cluster.apply([{**secret, "metadata": {"name": name, "namespace": NS}, "data": data}])


def dataset_pvc(name: str, source: str, credentials: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {
                f"{PREFIX}data-source": source,
                f"{PREFIX}data-credentials": credentials,
            },
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def pvc_annotations(cluster: InstallCluster, name: str) -> dict[str, str]:
    return cluster.core.read_namespaced_persistent_volume_claim(name, NS).metadata.annotations or {}


def loading_message(cluster: InstallCluster, name: str, namespace: str = NS) -> str:
    claim = cluster.core.read_namespaced_persistent_volume_claim(name, namespace)
    loading = [c for c in claim.status.conditions or [] if c.type == "Loading"]
    return (loading[0].message or "") if loading else ""
