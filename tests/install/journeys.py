"""What the install tier's journeys share: the product installed for a module, a researcher's
pods and dataset PVCs, and reading what the product wrote on them."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.names import LEADER_LEASE_NAME
from tests import ROOT
from tests.install.cluster import IMAGE, SNAPSHOT_STORAGE_CLASS, InstallCluster, wait_for
from tests.world.crds import wait_established

BASE = "manifests"
NS = "ml"
PREFIX = "gpu-admission.io/"
LOAD_SECONDS = 240


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


def encoded(values: dict[str, str]) -> dict[str, str]:
    """A Secret's `data`: each value base64-encoded."""
    return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}


def credential_secret(
    cluster: InstallCluster, name: str, kind: str, values: dict[str, str], namespace: str = NS
) -> None:
    """A credential Secret of type `kind` (aws-credential, ...), in the researchers' namespace
    unless another is named."""
    cluster.core.create_namespaced_secret(
        namespace, {"metadata": {"name": name}, "type": kind, "data": encoded(values)}
    )


def s3_secret(
    cluster: InstallCluster, name: str, endpoint: str | None = None, namespace: str = NS
) -> None:
    """Keys for the S3 stand-in (or whatever stands at `endpoint` in front of it)."""
    keys = {
        "AWS_ACCESS_KEY_ID": "team-a",
        "AWS_SECRET_ACCESS_KEY": "team-a-secret",
        "AWS_ENDPOINT_URL": endpoint or cluster.s3.endpoint,
    }
    credential_secret(cluster, name, "aws-credential", keys, namespace)


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


def load_finished(cluster: InstallCluster, name: str) -> dict[str, str]:
    def phase() -> str | None:
        found = pvc_annotations(cluster, name).get(f"{PREFIX}data-load-phase")
        return found if found in ("Succeeded", "Failed") else None

    wait_for(phase, f"the load of {name} to end", timeout=LOAD_SECONDS)
    return pvc_annotations(cluster, name)


def load_succeeded(cluster: InstallCluster, name: str) -> dict[str, str]:
    """The PVC's annotations once its load has succeeded (its Loading message if it failed)."""
    found = load_finished(cluster, name)
    assert found[f"{PREFIX}data-load-phase"] == "Succeeded", loading_message(cluster, name)
    return found


def failed_attempts(cluster: InstallCluster, claim: str) -> int:
    """Loader pods of the claim's Jobs that failed, as the Job controller counts them."""
    return sum(j.status.failed or 0 for j in jobs_of(cluster, claim))


def cached_pvc(name: str, source: str, **annotations: str) -> dict[str, Any]:
    """A dataset PVC whose storage class can be snapshotted (so its load is kept, and a new PVC
    of the same source may start as a clone); `annotations` by their names after the prefix,
    `_` for `-`."""
    values = {f"{PREFIX}data-source": source}
    values.update({PREFIX + k.replace("_", "-"): v for k, v in annotations.items()})
    return {
        "metadata": {"name": name, "namespace": NS, "annotations": values},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": SNAPSHOT_STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def volume_of(cluster: InstallCluster, name: str) -> Path:
    claim = cluster.core.read_namespaced_persistent_volume_claim(name, NS)
    return Path(cluster.core.read_persistent_volume(claim.spec.volume_name).spec.host_path.path)


def jobs_of(cluster: InstallCluster, claim: str) -> list[client.V1Job]:
    found = client.BatchV1Api(cluster.api).list_namespaced_job(NS).items
    return [j for j in found if any(o.name == claim for o in j.metadata.owner_references or [])]


def consumer(name: str, claim: str, command: str, **spec: Any) -> dict[str, Any]:
    mount = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    return pod(name, command, container=mount, volumes=[volume], **spec)


def waiting(cluster: InstallCluster, name: str) -> bool:
    """Gated, labelled for the controller, neither bound nor run."""
    found = cluster.core.read_namespaced_pod(name, NS)
    return (
        [g.name for g in found.spec.scheduling_gates or []] == [f"{PREFIX}data-load"]
        and (found.metadata.labels or {}).get(f"{PREFIX}data-wait") == "true"
        and not found.spec.node_name
        and found.status.phase == "Pending"
        and not found.status.container_statuses
    )


def mount_of(cluster: InstallCluster, name: str) -> client.V1VolumeMount:
    return cluster.core.read_namespaced_pod(name, NS).spec.containers[0].volume_mounts[0]


def created_as_clone(
    cluster: InstallCluster, claim: dict[str, Any]
) -> client.V1PersistentVolumeClaim:
    """`claim` created once admission clones it: its dry runs show when the webhook has seen
    the ready snapshot (its informer follows the snapshot controller's write)."""
    core = cluster.core
    wait_for(
        lambda: (
            core.create_namespaced_persistent_volume_claim(
                NS, claim, dry_run="All"
            ).spec.data_source_ref
        ),
        "admission to clone from the ready snapshot",
        timeout=60,
    )
    return core.create_namespaced_persistent_volume_claim(NS, claim)


def warnings_on(cluster: InstallCluster, name: str) -> list[client.CoreV1Event]:
    events = cluster.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}")
    return [e for e in events.items if e.type == "Warning"]


def consumers_of_a_loaded_dataset_run(cluster: InstallCluster, claim: str) -> None:
    """Pods created after `claim` loaded: never gated, and one pinned to the node (which
    cannot wait behind a gate) admitted and run: the webhook reads the load the controller
    recorded as loaded (gpu_admission.datasets.load)."""
    cluster.apply([consumer(f"{claim}-after", claim, "true")])
    after = cluster.core.read_namespaced_pod(f"{claim}-after", NS)
    assert not after.spec.scheduling_gates, after.spec.scheduling_gates
    assert f"{PREFIX}data-wait" not in (after.metadata.labels or {})
    pinned = consumer(f"{claim}-pinned", claim, "true", nodeName=cluster.node.name)
    cluster.apply([pinned])
    finished(cluster, f"{claim}-pinned")


def consumers_of_a_failed_dataset_are_warned(cluster: InstallCluster, claim: str) -> None:
    """A pod created after `claim` failed to load: admitted behind the gate with the
    webhook's warning, then warned on the pod by the controller; never run."""
    created = cluster.apply([consumer(f"{claim}-waits", claim, "true")])
    assert f"dataset PVC {claim} failed to load" in created.stderr, created.stderr
    assert waiting(cluster, f"{claim}-waits")
    [warning] = wait_for(
        lambda: warnings_on(cluster, f"{claim}-waits"), "the controller's warning on the pod"
    )
    assert warning.reason == "DatasetLoadFailed" and f"'{claim}' failed to load" in warning.message
    assert waiting(cluster, f"{claim}-waits")


CRDS = ROOT.parent / "shared" / "crds"


def install_crds(cluster: InstallCluster, *names: str) -> None:
    """The CRDs of the projects a component feeds, from ../shared/crds (their own YAML)."""
    for name in names:
        path = CRDS / name
        if not path.is_file():
            pytest.fail(f"the CRD {name} is not in {CRDS}")
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    wait_established(cluster.api)


def controller_metrics(cluster: InstallCluster) -> str:
    """The leading controller's /metrics, through the API server's pod proxy (where a
    PodMonitor points Prometheus)."""
    lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease(
        LEADER_LEASE_NAME, cluster.install_namespace
    )
    leader = (lease.spec.holder_identity or "").rpartition("_")[0]
    path = f"/api/v1/namespaces/{cluster.install_namespace}/pods/{leader}:9090/proxy/metrics"
    return cluster.kubectl("get", "--raw", path, check=False).stdout


def object_states(cluster: InstallCluster) -> dict[str, int]:
    """state -> how many admission objects the install's self-check finds in it."""
    counted: dict[str, int] = {}
    for line in controller_metrics(cluster).splitlines():
        if line.startswith("gpu_admission_admission_object_state{") and line.endswith(" 1.0"):
            state = line.split('state="', 1)[1].split('"', 1)[0]
            counted[state] = counted.get(state, 0) + 1
    return counted
