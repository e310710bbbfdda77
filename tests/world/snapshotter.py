"""A fake CSI driver with snapshots, with the snapshot controller and sidecar in front of it: a
client of the real kube-apiserver through the real client, beside the played kubelet.

    snapshots = FakeSnapshotter(api_client, pvc_base_dir=base).start()
    kubelet = FakeKubelet(api_client, pvc_base_dir=base, volume_source=snapshots.restore)

A VolumeSnapshot of a PVC becomes a point-in-time copy of the PVC's directory, a bound
VolumeSnapshotContent (`snapcontent-<snapshot uid>`, as the snapshot controller names it) and
the status the snapshot controller writes: `boundVolumeSnapshotContentName`, `creationTime`,
`readyToUse: true`, `restoreSize` (the source volume's size: the PVC's request, as a CSI driver
reports the volume it snapshotted). A PVC whose `dataSourceRef` names a ready VolumeSnapshot
starts with that copy: the kubelet asks `restore` when it first creates the PVC's directory, as
a provisioner fills a volume before any pod can mount it. Deleting a VolumeSnapshot deletes its
content and the copy (deletionPolicy Delete). Nothing is validated beyond what the API server
does; a snapshot of a PVC that does not exist gets `status.error`, as the controller reports it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.world.kubelet.watch import Watcher

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
DEFAULT_DRIVER = "hostpath.csi.example.com"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeSnapshotter:
    def __init__(
        self, api_client: client.ApiClient, *, pvc_base_dir: Path, driver: str = DEFAULT_DRIVER
    ) -> None:
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        self._base = Path(pvc_base_dir)
        self.driver = driver
        self._store = Path(tempfile.mkdtemp(prefix="fake-snapshots-"))
        self._lock = threading.Lock()
        self._taken: set[str] = set()  # snapshot uids already copied
        self._watcher = Watcher(
            functools.partial(
                self._custom.list_cluster_custom_object, GROUP, VERSION, "volumesnapshots"
            ),
            self._on_snapshot,
            "volumesnapshots",
        )

    def start(self) -> FakeSnapshotter:
        self._watcher.start()
        if not self._watcher.synced.wait(10):
            raise TimeoutError("the snapshotter's watch did not list within 10 s")
        return self

    def stop(self) -> None:
        self._watcher.stop()
        shutil.rmtree(self._store, ignore_errors=True)

    # -- snapshots ------------------------------------------------------------------------------

    def _on_snapshot(self, event: str, snapshot: dict[str, Any]) -> None:
        meta = snapshot.get("metadata") or {}
        content = f"snapcontent-{meta.get('uid', '')}"
        if event == "DELETED":
            self._delete_content(content)
            return
        if (snapshot.get("status") or {}).get("readyToUse"):
            return
        with self._lock:
            if meta.get("uid") in self._taken:
                return
            self._taken.add(meta.get("uid", ""))
        try:
            self._take(snapshot, content)
        except ApiException as error:
            if error.status != 404:  # the snapshot went away meanwhile
                raise

    def _take(self, snapshot: dict[str, Any], content: str) -> None:
        meta = snapshot["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        claim = ((snapshot.get("spec") or {}).get("source") or {}).get("persistentVolumeClaimName")
        if not claim:
            return  # a pre-provisioned snapshot: nothing to copy
        try:
            pvc = json.loads(
                self._core.read_namespaced_persistent_volume_claim(
                    claim, namespace, _preload_content=False
                ).data
            )
        except ApiException as error:
            if error.status != 404:
                raise
            message = (
                f'error getting PVC {namespace}/{claim}: persistentvolumeclaim "{claim}" not found'
            )
            self._status(
                namespace,
                name,
                {"readyToUse": False, "error": {"message": message, "time": _now()}},
            )
            return
        source = self._base / namespace / claim
        source.mkdir(parents=True, exist_ok=True)
        _copy_tree(source, self._store / content)
        size = (
            ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage", "0")
        )
        class_name = (snapshot.get("spec") or {}).get("volumeSnapshotClassName")
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VolumeSnapshotContent",
            "metadata": {"name": content},
            "spec": {
                "deletionPolicy": "Delete",
                "driver": self.driver,
                "source": {"volumeHandle": f"vol-{pvc['metadata']['uid']}"},
                "volumeSnapshotRef": {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "VolumeSnapshot",
                    "name": name,
                    "namespace": namespace,
                    "uid": meta["uid"],
                },
                **({"volumeSnapshotClassName": class_name} if class_name else {}),
            },
        }
        self._custom.create_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", body)
        taken = time.time_ns()
        self._custom.patch_cluster_custom_object_status(
            GROUP,
            VERSION,
            "volumesnapshotcontents",
            content,
            {
                "status": {
                    "snapshotHandle": f"snap-{meta['uid']}",
                    "readyToUse": True,
                    "creationTime": taken,
                }
            },
        )
        self._status(
            namespace,
            name,
            {
                "boundVolumeSnapshotContentName": content,
                "creationTime": _now(),
                "readyToUse": True,
                "restoreSize": size,
            },
        )

    def _status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "volumesnapshots", name, {"status": status}
        )

    def _delete_content(self, content: str) -> None:
        shutil.rmtree(self._store / content, ignore_errors=True)
        try:
            self._custom.delete_cluster_custom_object(
                GROUP, VERSION, "volumesnapshotcontents", content
            )
        except ApiException as error:
            if error.status != 404:
                raise

    # -- restores -------------------------------------------------------------------------------

    def restore(self, namespace: str, claim: str, directory: Path) -> None:
        """Fill a new PVC's directory from the snapshot its dataSourceRef names, if any."""
        try:
            pvc = json.loads(
                self._core.read_namespaced_persistent_volume_claim(
                    claim, namespace, _preload_content=False
                ).data
            )
        except ApiException as error:
            if error.status == 404:
                return
            raise
        ref = (pvc.get("spec") or {}).get("dataSourceRef") or {}
        if ref.get("kind") != "VolumeSnapshot" or ref.get("apiGroup") != GROUP:
            return
        try:
            snapshot = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, ref.get("namespace") or namespace, "volumesnapshots", ref["name"]
            )
        except ApiException as error:
            if error.status == 404:
                return
            raise
        content = (snapshot.get("status") or {}).get("boundVolumeSnapshotContentName")
        if content and (self._store / content).is_dir():
            _copy_tree(self._store / content, directory)


def _copy_tree(source: Path, target: Path) -> None:
    """Files with their owners and modes, as a volume's snapshot and restore keep them: a
    non-root loader must be able to write a restored volume as it wrote the original. The CSI
    hostpath driver does the same (pkg/hostpath/hostpath.go: `tar zxvf` of the snapshot into the
    new volume, run as root; `cp -a src/. dest/` for a clone of a volume)."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", f"{source}/.", str(target)], check=True, capture_output=True)
