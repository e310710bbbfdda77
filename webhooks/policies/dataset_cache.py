"""Dataset PVCs as a cache: a new dataset PVC whose source is already held by a ready snapshot
starts as a clone of it, which its loader keeps if the source is unchanged.

At PVC CREATE, when the user set no data source and did not opt out (`data-cache: "false"`),
the newest ready dataset snapshot in the namespace that holds the same content read with the
same credentials (the content's cache key, gpu_admission.datasets.load), taken from a PVC of
the same StorageClass, and small enough for the PVC's request, becomes the PVC's
`dataSourceRef` (and `dataSource`, equal to it, as kube-apiserver would mirror it). The PVC
records which snapshot in `data-cloned-from`, and the digest of the source that snapshot's load
read in `data-cloned-digest` (its loader compares it with the source's digest then:
loaders.reuse), and the webhook says so in a warning.

Same StorageClass: a CSI driver restores a snapshot only into volumes it provisions, and a
class fixes the driver; the class name is the simple sure test.
"""

from __future__ import annotations

from gpu_admission.cluster.dataset_snapshots import SNAPSHOT_GROUP, SnapshotInfo
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.model import Config
from gpu_admission.datasets.load import content_of
from gpu_admission.names import Names
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest
from webhooks.policies.interface import MutatingPolicy, Scope

SCOPE = Scope("PersistentVolumeClaim", operations=frozenset({"CREATE"}))


def choose_snapshot(
    snapshots: list[SnapshotInfo], storage_class: str, requested: str
) -> SnapshotInfo | None:
    """The newest ready snapshot a PVC of this class and size can be restored from."""
    usable = [
        s
        for s in snapshots
        if s.ready and s.storage_class == storage_class and s.restore_size and s.fits(requested)
    ]
    return max(usable, key=lambda s: (s.created, s.name), default=None)


def clone_from_cache(
    request: AdmissionRequest, patch: Patch, view: ClusterView, names: Names
) -> None:
    obj = patch.obj
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = obj.get("spec") or {}
    content = content_of(annotations, names)
    if content is None or annotations.get(names.data_cache, "").strip().lower() == "false":
        return
    if spec.get("dataSource") or spec.get("dataSourceRef"):
        return  # the user chose where the volume starts from
    storage_class = spec.get("storageClassName")
    requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if not storage_class or not requested:
        return  # no class to match (the default class is applied later by the API server)
    # No key for a hub branch or tag: it may have moved, and snapshots hold commits.
    key = content.kept_key()
    if key is None:
        return
    snapshots = list(view.dataset_snapshots(request.namespace, key))
    chosen = choose_snapshot(snapshots, storage_class, str(requested))
    if chosen is None:
        return
    ref = {"apiGroup": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": chosen.name}
    patch.ensure_object("/spec")
    patch.add("/spec/dataSourceRef", ref)
    patch.add("/spec/dataSource", dict(ref))
    patch.set_annotation(names.data_cloned_from, chosen.name)
    if chosen.digest:
        patch.set_annotation(names.data_cloned_digest, chosen.digest)
    patch.warn(
        f"{names.data_source}: {content.source} was loaded before; this PVC starts as a clone of "
        f"VolumeSnapshot {chosen.name}, kept as it is if the source still lists as it did then, "
        f'else loaded afresh. Set {names.data_cache}: "false" to load it in full'
    )


def policies(config: Config) -> list[MutatingPolicy]:
    if not config.dataset.cache.enabled:
        return []
    names = config.names
    return [
        MutatingPolicy(
            name="dataset-pvc-cache",
            scope=SCOPE,
            mutate=lambda request, patch, view: clone_from_cache(request, patch, view, names),
        )
    ]
