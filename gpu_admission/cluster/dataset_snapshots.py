"""Dataset cache snapshots: the VolumeSnapshots the loader controller takes of loaded dataset
PVCs, as the admission webhook and the controller both see them.

A snapshot holds one (content, credentials) pair's data, in one namespace: its `dataset-key`
label is a hash of both (`gpu_admission.datasets.load.DatasetContent.cache_key`), so a PVC
naming other credentials for the same source never matches a snapshot loaded with these (one
team's private data is never handed to a PVC that names other credentials), and a
VolumeSnapshot can only be restored in its own namespace anyway.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.utils import parse_quantity

from gpu_admission.cluster.informer import Informer
from gpu_admission.names import Names

SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
SNAPSHOT_VERSION = "v1"


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    namespace: str
    name: str
    key: str  # the dataset-key label: DatasetContent.cache_key of what it holds
    ready: bool
    restore_size: str  # a quantity; "" until the snapshot controller reports it
    storage_class: str  # of the PVC it was taken from
    created: str  # creationTimestamp, RFC 3339: orders snapshots of one key
    source_pvc: str = ""
    digest: str = ""  # of the source as the load it keeps read it ("": not recorded)

    def fits(self, requested: str) -> bool:
        """Whether a PVC requesting `requested` can hold a restore of this snapshot."""
        try:
            return _quantity(self.restore_size) <= _quantity(requested)
        except (ValueError, ArithmeticError):
            return False


def _quantity(text: str) -> Decimal:
    return Decimal(parse_quantity(text))


def snapshot_info(
    obj: Mapping[str, Any], key_label: str, class_annotation: str, digest_annotation: str = ""
) -> SnapshotInfo:
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = obj.get("status") or {}
    source = (obj.get("spec") or {}).get("source") or {}
    return SnapshotInfo(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        key=(meta.get("labels") or {}).get(key_label, ""),
        ready=status.get("readyToUse") is True,
        restore_size=str(status.get("restoreSize") or ""),
        storage_class=annotations.get(class_annotation, ""),
        created=str(meta.get("creationTimestamp") or ""),
        source_pvc=str(source.get("persistentVolumeClaimName") or ""),
        digest=str(annotations.get(digest_annotation) or "") if digest_annotation else "",
    )


def snapshot_informer(
    api_client: client.ApiClient, names: Names, name: str = "volumesnapshots", **options: Any
) -> Informer[SnapshotInfo]:
    """The dataset cache snapshots of every namespace, by label. Optional: clusters without the
    snapshot CRDs answer 404, which counts as none."""
    custom = client.CustomObjectsApi(api_client)
    return Informer(
        name,
        functools.partial(
            custom.list_cluster_custom_object, SNAPSHOT_GROUP, SNAPSHOT_VERSION, "volumesnapshots"
        ),
        label_selector=f"{names.dataset_cache_label}=true",
        transform=lambda obj: snapshot_info(
            obj, names.dataset_key_label, names.data_storage_class, names.data_digest
        ),
        optional=True,
        **options,
    )
