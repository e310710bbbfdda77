"""The dataset cache, controller side: a loaded dataset PVC is kept as a VolumeSnapshot, and a
few snapshots per (source, credentials) are kept in each namespace.

After a load succeeds, the PVC gets a VolumeSnapshot named after its load (`ds-...`, one per
load, so a restarted controller finds it rather than taking another), labelled with the cache
key (gpu_admission.datasets.load: content and credentials), annotated with the
source, the credentials' name and the PVC's StorageClass, and owned by the PVC, so that deleting
the PVC deletes its snapshots (nothing dangles). Its class is `dataset.cache.volume_snapshot_class`
or the VolumeSnapshotClass whose driver provisions the PVC's StorageClass (the default-marked one
if several). Older snapshots of the same key beyond `keep_per_source` are deleted, oldest first.

Clusters without the snapshot CRDs (the informer's list is answered 404), or without a class
for a StorageClass, keep loading every PVC in full: each says so once in the log, nothing fails.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from controllers.dataset.records import PvcRecord
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.dataset_snapshots import (
    SNAPSHOT_GROUP,
    SNAPSHOT_VERSION,
    snapshot_informer,
)
from gpu_admission.cluster.informer import describe_error
from gpu_admission.config.model import Config
from gpu_admission.names import MANAGED_BY, MANAGED_BY_LABEL

log = logging.getLogger(__name__)

DEFAULT_CLASS_ANNOTATION = "snapshot.storage.kubernetes.io/is-default-class"
CLASS_CACHE_SECONDS = 300.0


def snapshot_name(job_name: str) -> str:
    """The snapshot of one load: its Job's name with `ds-` for `dl-` (same length, <= 63)."""
    return "ds-" + job_name.removeprefix("dl-")


def choose_class(classes: list[dict[str, Any]], driver: str) -> str | None:
    """The VolumeSnapshotClass for a driver: the one marked default, else the only one."""
    matching = [c for c in classes if c.get("driver") == driver]
    default = [
        c
        for c in matching
        if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)
        == "true"
    ]
    chosen = default or (matching if len(matching) == 1 else [])
    return (chosen[0].get("metadata") or {}).get("name") if chosen else None


class SnapshotKeeper:
    def __init__(self, api_client: ApiClient, api: ApiWriter, config: Config) -> None:
        self.api, self.config, self.names = api, config, config.names
        self.settings = config.dataset.cache
        names = self.names
        self.informer = snapshot_informer(api_client, names, "dataset-snapshots")
        self._classes: dict[str, tuple[float, str | None]] = {}  # storage class -> class
        self._said: set[str] = set()

    @property
    def active(self) -> bool:
        return self.settings.enabled and self.informer.served

    async def announce(self) -> None:
        """Once the informer has listed: say (once) if loaded datasets will not be kept."""
        if not self.settings.enabled:
            self._once("off", "dataset.cache.enabled is false: loaded datasets are not snapshotted")
        elif not self.informer.served:
            self._once(
                "unserved",
                "the snapshot API (snapshot.storage.k8s.io/v1) is not served: loaded datasets "
                "are not kept as VolumeSnapshots, and every dataset PVC loads in full",
            )
        elif not self.settings.volume_snapshot_class:
            try:
                classes = await self.api.snapshot_classes()
            except ApiException as exc:
                self._once("classes", "cannot list VolumeSnapshotClasses (%s)", describe_error(exc))
                return
            if not classes:
                self._once(
                    "classes",
                    "no VolumeSnapshotClass exists: loaded datasets are not kept as "
                    "VolumeSnapshots, and every dataset PVC loads in full",
                )

    def _once(self, what: str, message: str, *args: Any) -> None:
        if what not in self._said:
            self._said.add(what)
            log.info(message, *args)

    async def keep(
        self, pvc: PvcRecord, commit: str | None = None, digest: str | None = None
    ) -> str | None:
        """Snapshot a PVC whose load just succeeded; the snapshot's name, or None if it is not
        kept (cache off or opted out, no snapshot API, no class for its storage, a hub load
        whose commit is not known). `commit`: what a hub source's revision resolved to; the
        snapshot is keyed by it, so only PVCs naming that very commit are cloned from it.
        `digest`: the source's digest as the load read it, which a clone's loader compares with
        the source's digest then (loaders.reuse)."""
        if not self.active or not pvc.cache:
            return None
        key = pvc.content.kept_key(commit)
        if key is None:
            return None
        name = snapshot_name(pvc.current_job)
        if self.informer.get(f"{pvc.namespace}/{name}") is None:
            snapshot_class = await self._snapshot_class(pvc.storage_class)
            if snapshot_class is None:
                return None
            body = self._body(pvc, name, snapshot_class, key, digest)
            await self.api.create_snapshot(pvc.namespace, body)
        await self._prune(pvc, name, key)
        return name

    def _body(
        self, pvc: PvcRecord, name: str, snapshot_class: str, key: str, digest: str | None
    ) -> dict[str, Any]:
        names = self.names
        annotations = {
            names.data_source: pvc.source,
            names.data_storage_class: pvc.storage_class or "",
        }
        if pvc.credentials:
            annotations[names.data_credentials] = pvc.credentials
        if digest:
            annotations[names.data_digest] = digest
        return {
            "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": name,
                "namespace": pvc.namespace,
                "labels": {
                    names.dataset_cache_label: "true",
                    names.dataset_key_label: key,
                    MANAGED_BY_LABEL: MANAGED_BY,
                },
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "name": pvc.name,
                        "uid": pvc.uid,
                    }
                ],
            },
            "spec": {
                "volumeSnapshotClassName": snapshot_class,
                "source": {"persistentVolumeClaimName": pvc.name},
            },
        }

    async def _snapshot_class(self, storage_class: str | None) -> str | None:
        if self.settings.volume_snapshot_class:
            return self.settings.volume_snapshot_class
        if not storage_class:
            self._once(
                "no-class",
                "a dataset PVC has no storageClassName (and no default StorageClass was "
                "applied): it cannot be snapshotted; set dataset.cache.volume_snapshot_class",
            )
            return None
        cached = self._classes.get(storage_class)
        if cached is not None and time.monotonic() - cached[0] < CLASS_CACHE_SECONDS:
            return cached[1]
        driver = await self.api.storage_class_provisioner(storage_class)
        chosen = choose_class(await self.api.snapshot_classes(), driver) if driver else None
        self._classes[storage_class] = (time.monotonic(), chosen)
        if chosen is None and "classes" not in self._said:  # "none at all" was said at start
            self._once(
                f"class:{storage_class}",
                "no VolumeSnapshotClass for StorageClass %s (driver %s): its dataset PVCs are "
                "not snapshotted; create one for the driver, or set "
                "dataset.cache.volume_snapshot_class",
                storage_class,
                driver or "unknown",
            )
        return chosen

    async def _prune(self, pvc: PvcRecord, newest: str, key: str) -> None:
        """Delete the oldest snapshots of this PVC's key beyond keep_per_source."""
        others = sorted(
            (
                s
                for s in self.informer.values()
                if s.namespace == pvc.namespace and s.key == key and s.name != newest
            ),
            key=lambda s: (s.created, s.name),
            reverse=True,
        )
        for stale in others[self.settings.keep_per_source - 1 :]:
            await self.api.delete_snapshot(stale.namespace, stale.name)
