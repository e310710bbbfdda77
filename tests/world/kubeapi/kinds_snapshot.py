"""Volume snapshots (snapshot.storage.k8s.io/v1, the external-snapshotter CRDs), StorageClasses,
and PVC data sources, with the defaults and validation a 1.36 cluster applies.

The snapshot kinds are CRDs: their checks are the CRDs' schema and CEL rules
(client/config/crd in kubernetes-csi/external-snapshotter v8), whose messages kube-apiserver
reports as `<field>: Invalid value: "object": <message>`. PVC data sources follow
pkg/api/persistentvolumeclaim NormalizeDataSources: `dataSource` and `dataSourceRef` are kept
equal when only one is given.
"""

from __future__ import annotations

from typing import Any

from .errors import cause

Causes = list[dict[str, str]]
SNAPSHOT_GROUP = "snapshot.storage.k8s.io"
DELETION_POLICIES = ("Delete", "Retain")


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if kind == "PersistentVolumeClaim" and isinstance(spec, dict):
        source, ref = spec.get("dataSource"), spec.get("dataSourceRef")
        if source and not ref:
            spec["dataSourceRef"] = dict(source)
        elif ref and not source and not ref.get("namespace"):
            spec["dataSource"] = {k: v for k, v in ref.items() if k != "namespace"}
    elif kind == "StorageClass":
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")


def _object_rule(field: str, message: str) -> dict[str, str]:
    return cause("FieldValueInvalid", field, f'Invalid value: "object": {message}')


def validate_create(kind: str, obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    causes: Causes = []
    if kind == "VolumeSnapshot":
        source = spec.get("source")
        if not isinstance(source, dict):
            causes.append(cause("FieldValueRequired", "spec.source", "Required value"))
        elif ("persistentVolumeClaimName" in source) == ("volumeSnapshotContentName" in source):
            causes.append(
                _object_rule(
                    "spec.source",
                    "exactly one of volumeSnapshotContentName and persistentVolumeClaimName "
                    "must be set",
                )
            )
        if spec.get("volumeSnapshotClassName") == "":
            causes.append(
                _object_rule(
                    "spec", "volumeSnapshotClassName must not be the empty string when set"
                )
            )
    elif kind == "VolumeSnapshotClass":
        if not obj.get("driver"):
            causes.append(cause("FieldValueRequired", "driver", "Required value"))
        policy = obj.get("deletionPolicy")
        if policy is None:
            causes.append(cause("FieldValueRequired", "deletionPolicy", "Required value"))
        elif policy not in DELETION_POLICIES:
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    "deletionPolicy",
                    f'Unsupported value: "{policy}": supported values: "Delete", "Retain"',
                )
            )
    elif kind == "VolumeSnapshotContent":
        for name in ("driver", "deletionPolicy", "source", "volumeSnapshotRef"):
            if not spec.get(name):
                causes.append(cause("FieldValueRequired", f"spec.{name}", "Required value"))
    elif kind == "StorageClass" and not obj.get("provisioner"):
        causes.append(cause("FieldValueRequired", "provisioner", "Required value"))
    return causes


def validate_update(
    kind: str, subresource: str, new: dict[str, Any], old: dict[str, Any]
) -> Causes:
    if kind != "VolumeSnapshot" or subresource:
        return []
    causes: Causes = []
    new_source = (new.get("spec") or {}).get("source") or {}
    old_source = (old.get("spec") or {}).get("source") or {}
    for name in ("persistentVolumeClaimName", "volumeSnapshotContentName"):
        if name in old_source and name not in new_source:
            causes.append(_object_rule("spec.source", f"{name} is required once set"))
        elif name in old_source and new_source.get(name) != old_source[name]:
            message = f'Invalid value: "string": {name} is immutable'
            causes.append(cause("FieldValueInvalid", f"spec.source.{name}", message))
    return causes
