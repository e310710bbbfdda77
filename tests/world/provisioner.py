"""A volume provisioner for the real control plane: a client of kube-apiserver that gives each new
PersistentVolumeClaim a PersistentVolume, as an external provisioner (a CSI driver's sidecar)
does, and lets kube-controller-manager's PV controller bind the two.

    provisioner = Provisioner(api_client, pvc_base_dir=base).start()
    kubelet = FakeKubelet(api_client, pvc_base_dir=base)

Without it a claim stays Pending and kube-scheduler keeps every pod that mounts it unscheduled
("unbound immediate PersistentVolumeClaims"), as in a cluster with no provisioner. The volume is
the claim's directory under `pvc_base_dir` (the same one the played kubelet mounts; filled from
a VolumeSnapshot first when the claim names one and `volume_source` is given), described as
a `hostPath` PersistentVolume pre-bound to the claim (`claimRef` with its uid), of the claim's
class, size and access modes. Reclaim policy Retain: when the claim goes, the provisioner deletes
the volume object itself, as a provisioner deletes what it provisioned.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.world.kubelet.watch import Watcher

SYNC_TIMEOUT_SECONDS = 10
_BINARY_SUFFIXES = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
_DECIMAL_SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity_bytes(quantity: str) -> int:
    """A storage request's bytes: `4Mi`, `1Gi`, `500M`, `1048576`."""
    for suffixes in (_BINARY_SUFFIXES, _DECIMAL_SUFFIXES):
        for suffix, factor in suffixes.items():
            if quantity.endswith(suffix):
                return int(float(quantity[: -len(suffix)]) * factor)
    return int(quantity)


def volume_name(claim: dict[str, Any]) -> str:
    return f"pvc-{claim['metadata']['uid']}"  # as external-provisioner names its volumes


class Provisioner:
    def __init__(
        self,
        api_client: client.ApiClient,
        pvc_base_dir: Path,
        make_directories: bool = False,
        sized: bool = False,
        volume_source: Callable[[str, str, Path], None] | None = None,
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self._base = Path(pvc_base_dir)
        # For a real kubelet: it mounts a hostPath as it is, with no fsGroup, so the directory is
        # made world-writable first, as local-path-provisioner does (`mkdir -m 0777`).
        self._make_directories = make_directories or sized
        # For a real kubelet too: each volume a filesystem of the claim's size (tmpfs), so the
        # free space a pod sees is the claim's, as with a CSI driver's volume.
        self._sized = sized
        # Fills a new volume from the snapshot its claim names (dataSourceRef), before it is
        # bound, as a CSI driver's CreateVolume restores one (tests/world/snapshotter.py).
        self._volume_source = volume_source
        self._mounted: dict[str, Path] = {}  # claim uid -> its mount
        self._lock = threading.Lock()
        self._made: dict[str, str] = {}  # claim uid -> volume name
        self._watcher = Watcher(
            self._core.list_persistent_volume_claim_for_all_namespaces, self._on_claim, "claims"
        )

    def start(self) -> Provisioner:
        self._watcher.start()
        if not self._watcher.synced.wait(SYNC_TIMEOUT_SECONDS):
            raise TimeoutError("the provisioner's watch did not list within 10 s")
        return self

    def stop(self) -> None:
        self._watcher.stop()
        with self._lock:
            mounts, self._mounted = list(self._mounted.values()), {}
        for mount in mounts:
            subprocess.run(["umount", "-l", str(mount)], check=False)

    def _on_claim(self, event: str, claim: dict[str, Any]) -> None:
        meta, spec = claim.get("metadata") or {}, claim.get("spec") or {}
        uid = meta.get("uid", "")
        if event == "DELETED":
            with self._lock:
                name = self._made.pop(uid, None)
                mount = self._mounted.pop(uid, None)
            if mount is not None:
                subprocess.run(["umount", "-l", str(mount)], check=False)
            if name is not None:
                self._delete(name)
            return
        if spec.get("volumeName") or meta.get("deletionTimestamp"):
            return
        with self._lock:
            if uid in self._made:
                return
            self._made[uid] = volume_name(claim)
        directory = self._base / meta.get("namespace", "") / meta.get("name", "")
        if self._make_directories:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o777)
        if self._sized:
            size = quantity_bytes(spec["resources"]["requests"]["storage"])
            options = f"size={size},mode=0777"
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True
            )
            self._mounted[uid] = directory
        if self._volume_source is not None:
            self._volume_source(meta.get("namespace", ""), meta.get("name", ""), directory)
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume_name(claim)},
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": spec.get("storageClassName") or "",
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "hostPath": {"path": str(directory)},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "uid": uid,
                },
            },
        }
        try:
            self._core.create_persistent_volume(volume, _preload_content=False)
        except ApiException as error:
            if error.status != 409:
                raise

    def _delete(self, name: str) -> None:
        try:
            self._core.delete_persistent_volume(name, _preload_content=False)
        except ApiException as error:
            if error.status != 404:
                raise
