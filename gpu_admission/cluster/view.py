"""The read-only cluster view that policies consult, and the records it holds.

Policies read only these small records (never whole API objects, never secret values), with no I/O.
`StaticClusterView` holds fixed records: tests and the offline `review` command use it; the running
service uses the informer-fed view in `gpu_admission.cluster.live_view`.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpu_admission.cluster.dataset_snapshots import SnapshotInfo
from gpu_admission.cluster.dra import ClaimInfo, DeviceClassInfo
from gpu_admission.keyless import TokenRequest, gcp_token_request_from
from gpu_admission.names import GCP_CREDENTIAL_TYPE, GCP_KEY_FILE

RefKind = Literal[
    "Secret",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "DeviceClass",
]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """A credential Secret's shape: its type and key names. Values are never kept, with one
    exception that is not secret: a keyless Google file's token path and audience."""

    namespace: str
    name: str
    type: str
    keys: frozenset[str] = frozenset()
    token: TokenRequest | None = None  # the projected token a keyless gcp-credential needs


@dataclass(frozen=True, slots=True)
class ServiceAccountInfo:
    namespace: str
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PVCInfo:
    namespace: str
    name: str
    uid: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object a policy needs to see; the service edge may fetch it on a cache miss.
    Cluster-scoped objects (DeviceClasses) have namespace ""."""

    kind: RefKind
    namespace: str
    name: str


class ClusterView(Protocol):
    """Read-only, in-memory, I/O-free lookups of what the informers hold."""

    def nodes(self) -> Iterable[NodeInfo]: ...

    def nodes_generation(self) -> int:
        """Changes whenever any node record changes, so policies may memoize what they derive
        from nodes (a pod path that scans every node would not scale to large clusters)."""
        ...

    def node(self, name: str) -> NodeInfo | None: ...

    def generation(self) -> int:
        """Changes whenever any record of the view changes (any kind), so the whole outcome of
        a review may be memoized against it."""
        ...

    def secret(self, namespace: str, name: str) -> SecretInfo | None: ...

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None: ...

    def pvc(self, namespace: str, name: str) -> PVCInfo | None: ...

    def resource_claim(self, namespace: str, name: str) -> ClaimInfo | None: ...

    def resource_claim_template(self, namespace: str, name: str) -> ClaimInfo | None: ...

    def device_class(self, name: str) -> DeviceClassInfo | None: ...

    def dataset_snapshots(self, namespace: str, key: str) -> Iterable[SnapshotInfo]:
        """The dataset cache snapshots in `namespace` holding `key` (ready or not)."""
        ...


class MissResolver(Protocol):
    """Fills the view on a cache miss (bounded wait for the informer, then one direct GET)."""

    async def resolve(self, refs: Iterable[ObjectRef]) -> None: ...


class StaticClusterView:
    """A view over fixed records."""

    def __init__(
        self,
        nodes: Iterable[NodeInfo] = (),
        secrets: Iterable[SecretInfo] = (),
        service_accounts: Iterable[ServiceAccountInfo] = (),
        pvcs: Iterable[PVCInfo] = (),
        claims: Iterable[ClaimInfo] = (),
        device_classes: Iterable[DeviceClassInfo] = (),
        snapshots: Iterable[SnapshotInfo] = (),
    ) -> None:
        self._nodes = {n.name: n for n in nodes}
        self._secrets = {(s.namespace, s.name): s for s in secrets}
        self._service_accounts = {(s.namespace, s.name): s for s in service_accounts}
        self._pvcs = {(p.namespace, p.name): p for p in pvcs}
        self._claims = {(c.kind, c.namespace, c.name): c for c in claims}
        self._device_classes = {c.name: c for c in device_classes}
        self._snapshots = list(snapshots)

    def nodes(self) -> Iterable[NodeInfo]:
        return self._nodes.values()

    def nodes_generation(self) -> int:
        return 0  # the records never change

    def generation(self) -> int:
        return 0

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def secret(self, namespace: str, name: str) -> SecretInfo | None:
        return self._secrets.get((namespace, name))

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        return self._service_accounts.get((namespace, name))

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self._pvcs.get((namespace, name))

    def resource_claim(self, namespace: str, name: str) -> ClaimInfo | None:
        return self._claims.get(("ResourceClaim", namespace, name))

    def resource_claim_template(self, namespace: str, name: str) -> ClaimInfo | None:
        return self._claims.get(("ResourceClaimTemplate", namespace, name))

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return self._device_classes.get(name)

    def dataset_snapshots(self, namespace: str, key: str) -> Iterable[SnapshotInfo]:
        return [s for s in self._snapshots if s.namespace == namespace and s.key == key]


# Converters from API objects (plain dicts as the API serves them) to records. The informers and
# the offline `review` command share them, so both see the cluster the same way.


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    meta = _meta(obj)
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable={
            k: str(v) for k, v in ((obj.get("status") or {}).get("allocatable") or {}).items()
        },
    )


def secret_info(obj: Mapping[str, Any]) -> SecretInfo:
    meta = _meta(obj)
    data = obj.get("data") or {}
    keys = set(data) | set(obj.get("stringData") or {})
    kind = obj.get("type") or "Opaque"
    token = None
    if kind == GCP_CREDENTIAL_TYPE and isinstance(data.get(GCP_KEY_FILE), str):
        try:
            token = gcp_token_request_from(base64.b64decode(data[GCP_KEY_FILE]))
        except ValueError:
            token = None
    return SecretInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        type=kind,
        keys=frozenset(keys),
        token=token,
    )


def service_account_info(obj: Mapping[str, Any]) -> ServiceAccountInfo:
    meta = _meta(obj)
    return ServiceAccountInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        annotations=dict(meta.get("annotations") or {}),
    )


def pvc_info(obj: Mapping[str, Any]) -> PVCInfo:
    meta = _meta(obj)
    return PVCInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        annotations=dict(meta.get("annotations") or {}),
        labels=dict(meta.get("labels") or {}),
    )


# The informers keep only the annotations (and labels) under the configured prefix: others, such
# as kubectl's last-applied-configuration, can be large and no policy reads them.


def _prefixed(annotations: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k.startswith(prefix)}


def service_account_record(prefix: str) -> Callable[[dict[str, Any]], ServiceAccountInfo]:
    def transform(obj: dict[str, Any]) -> ServiceAccountInfo:
        info = service_account_info(obj)
        return dataclasses.replace(info, annotations=_prefixed(info.annotations, prefix))

    return transform


def pvc_record(prefix: str) -> Callable[[dict[str, Any]], PVCInfo]:
    def transform(obj: dict[str, Any]) -> PVCInfo:
        info = pvc_info(obj)
        return dataclasses.replace(
            info,
            annotations=_prefixed(info.annotations, prefix),
            labels=_prefixed(info.labels, prefix),
        )

    return transform
