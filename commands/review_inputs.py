"""What `gpu-admission review` reads: the manifests to review, and the cluster they are reviewed
against (a cluster-state file, a live cluster, plus the claims among the manifests)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpu_admission.cluster.dra import (
    ClaimInfo,
    device_class_info,
    resource_claim_info,
    resource_claim_template_info,
)
from gpu_admission.cluster.view import (
    StaticClusterView,
    node_info,
    pvc_info,
    secret_info,
    service_account_info,
)
from gpu_admission.config.model import Config
from webhooks.offline.state import ClusterState, Document

LIVE_SYNC_TIMEOUT_SECONDS = 30.0
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# Dynamic Resource Allocation objects a pod's claims name: from the cluster state, and from the
# reviewed manifests too (applied together, they exist before the pods that use them).
CLAIM_KINDS = {
    "ResourceClaim": resource_claim_info,
    "ResourceClaimTemplate": resource_claim_template_info,
}
CLUSTER_STATE_KINDS = {
    "Node",
    "ServiceAccount",
    "Secret",
    "PersistentVolumeClaim",
    "Namespace",
    "DeviceClass",
    *CLAIM_KINDS,
}


class UsageError(Exception):
    """Bad input from the user of the command; exit status 2."""


def _parse_stream(text: str, source: str) -> Iterator[Document]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: not valid YAML or JSON: {exc}") from exc
    # A document may also be a plain YAML list of objects (as cluster-state files are).
    flattened = [item for doc in documents for item in (doc if isinstance(doc, list) else [doc])]
    for doc in flattened:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise UsageError(f"{source}: every document must be a Kubernetes object (a mapping)")
        if doc.get("kind") == "List" or (
            str(doc.get("kind", "")).endswith("List") and "items" in doc
        ):
            for item in doc.get("items") or []:
                yield Document(source, item)
        else:
            yield Document(source, doc)


def load_documents(paths: Iterable[str], stdin: TextIO) -> list[Document]:
    documents: list[Document] = []
    for raw in paths:
        if raw == "-":
            documents.extend(_parse_stream(stdin.read(), "<stdin>"))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in MANIFEST_SUFFIXES)
        elif path.is_file():
            files = [path]
        else:
            raise UsageError(f"{raw}: no such file or directory")
        for file in files:
            documents.extend(_parse_stream(file.read_text(), str(file)))
    return documents


def load_cluster_state(path: Path, config: Config) -> ClusterState:
    try:
        documents = list(_parse_stream(path.read_text(), str(path)))
    except OSError as exc:
        raise UsageError(f"cannot read cluster state {path}: {exc.strerror}") from exc
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in documents:
        by_kind.setdefault(str(doc.obj.get("kind")), []).append(doc.obj)
    unknown = set(by_kind) - CLUSTER_STATE_KINDS
    if unknown:
        raise UsageError(
            f"{path}: cluster state holds Nodes, ServiceAccounts, Secrets, PersistentVolumeClaims, "
            "Namespaces, DeviceClasses, ResourceClaims and ResourceClaimTemplates; found "
            f"{', '.join(sorted(unknown))}"
        )
    view = StaticClusterView(
        nodes=[node_info(o) for o in by_kind.get("Node", [])],
        secrets=[secret_info(o) for o in by_kind.get("Secret", [])],
        service_accounts=[service_account_info(o) for o in by_kind.get("ServiceAccount", [])],
        pvcs=[pvc_info(o) for o in by_kind.get("PersistentVolumeClaim", [])],
        claims=[convert(o) for kind, convert in CLAIM_KINDS.items() for o in by_kind.get(kind, [])],
        device_classes=[device_class_info(o) for o in by_kind.get("DeviceClass", [])],
    )
    namespaces = by_kind.get("Namespace", [])
    return ClusterState(
        view,
        labelled(namespaces, config.exempt_label),
        credential_namespaces=labelled(namespaces, config.names.serviceaccount_credentials_label),
    )


def labelled(namespaces: Iterable[dict[str, Any]], label: str) -> set[str]:
    """The names of the Namespace objects that carry `label` as "true"."""
    return {
        str((ns.get("metadata") or {}).get("name", ""))
        for ns in namespaces
        if ((ns.get("metadata") or {}).get("labels") or {}).get(label) == "true"
    }


def in_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of a manifest's object with its namespace set (`default` when it names none), as
    `kubectl apply` creates it."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"] = obj.get("metadata") or {}
    meta.setdefault("namespace", "default")
    return obj


def manifest_claims(documents: Iterable[Document]) -> list[ClaimInfo]:
    claims = []
    for document in documents:
        convert = CLAIM_KINDS.get(str(document.obj.get("kind")))
        if convert is not None:
            claims.append(convert(in_namespace(document.obj)))
    return claims


async def live_state(kubeconfig: Path, config: Config) -> tuple[ClusterState, Any]:
    from kubernetes.client import CoreV1Api

    from gpu_admission.cluster.kube import api_client
    from gpu_admission.cluster.live_view import LiveClusterView

    client = api_client(kubeconfig)
    view = LiveClusterView(client, config)
    view.start()
    for informer in view.informers:
        if not await asyncio.to_thread(informer.wait_synced, LIVE_SYNC_TIMEOUT_SECONDS):
            view.stop()
            raise UsageError(f"could not read {informer.name} from the cluster: {view.ready()}")

    def labelled_namespaces(label: str) -> set[str]:
        found = CoreV1Api(client).list_namespace(label_selector=f"{label}=true")
        return {ns.metadata.name for ns in found.items}

    exempt = await asyncio.to_thread(labelled_namespaces, config.exempt_label)
    marked = await asyncio.to_thread(
        labelled_namespaces, config.names.serviceaccount_credentials_label
    )
    return ClusterState(view, exempt, resolver=view, credential_namespaces=marked), view
