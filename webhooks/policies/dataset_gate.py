"""Pods that mount a dataset PVC wait for its data, and see it read-only.

A pod created while one of its dataset PVCs has not loaded gets the scheduling gate (and a label
so the controller finds it); the controller removes the gate once every dataset PVC of the pod has
loaded. Gates can be added only at creation (the API forbids adding one later), and the API
rejects a pod that has both `spec.nodeName` and a gate, so a pinned pod is denied with the reason
instead of failing with the API's less helpful message.

Dataset volumes are mounted read-only (volume and every mount) unless the pod opts out: the data
is shared by every pod of the PVC and a stray write would change it for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpu_admission.cluster.view import ClusterView, ObjectRef, PVCInfo
from gpu_admission.config.model import Config
from gpu_admission.datasets.load import DatasetLoad, dataset_load
from gpu_admission.names import PHASE_FAILED, Names
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import iter_containers
from webhooks.policies.interface import MutatingPolicy, Scope

CREATE_SCOPE = Scope("Pod")
EPHEMERAL_SCOPE = Scope(
    "Pod", operations=frozenset({"UPDATE"}), subresources=frozenset({"ephemeralcontainers"})
)
WAIT_LABEL_VALUE = "true"


@dataclass(frozen=True, slots=True)
class DatasetVolume:
    index: int  # in spec.volumes
    name: str  # the volume's name in the pod
    pvc: PVCInfo
    load: DatasetLoad


def load_of(pvc: PVCInfo, names: Names) -> DatasetLoad | None:
    """The PVC's current load (gpu_admission.datasets.load, as the controller reads it); None
    for a PVC that is not a dataset."""
    return dataset_load(pvc.name, pvc.uid, pvc.annotations, names)


def _claim_volumes(pod: dict[str, Any]) -> Iterator[tuple[int, str, str]]:
    for index, volume in enumerate((pod.get("spec") or {}).get("volumes") or []):
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            yield index, volume.get("name", ""), claim


def dataset_volumes(
    pod: dict[str, Any], namespace: str, view: ClusterView, names: Names
) -> list[DatasetVolume]:
    found = []
    for index, volume_name, claim in _claim_volumes(pod):
        pvc = view.pvc(namespace, claim)
        load = load_of(pvc, names) if pvc is not None else None
        if pvc is not None and load is not None:
            found.append(DatasetVolume(index, volume_name, pvc, load))
    return found


def pvc_refs(request: AdmissionRequest, view: ClusterView | None = None) -> Iterable[ObjectRef]:
    return [
        ObjectRef("PersistentVolumeClaim", request.namespace, claim)
        for _, _, claim in _claim_volumes(request.object)
    ]


def is_loader_pod(pod: dict[str, Any], names: Names) -> bool:
    """The loader Job's own pod writes the dataset: it must not wait for itself. (A user who
    copies the label only skips the wait, which `dataset-writable` already allows.)"""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(names.data_load_label) == "true"


def _writable(pod: dict[str, Any], names: Names) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(names.dataset_writable) == "true"


def _mount_read_only(patch: Patch, volumes: list[DatasetVolume], lists: tuple[str, ...]) -> None:
    names = {v.name for v in volumes}
    for ref in iter_containers(patch.obj, lists=lists):
        for i, mount in enumerate(ref.container.get("volumeMounts") or []):
            if mount.get("name") in names and mount.get("readOnly") is not True:
                path = f"{ref.path}/volumeMounts/{i}/readOnly"
                (patch.replace if "readOnly" in mount else patch.add)(path, True)


def _volume_read_only(patch: Patch, volume: DatasetVolume) -> None:
    source = patch.obj["spec"]["volumes"][volume.index]["persistentVolumeClaim"]
    if source.get("readOnly") is not True:
        path = f"/spec/volumes/{volume.index}/persistentVolumeClaim/readOnly"
        (patch.replace if "readOnly" in source else patch.add)(path, True)


def _describe_waiting(waiting: list[tuple[DatasetVolume, str]]) -> str:
    return ", ".join(f"PVC {v.pvc.name!r} ({phase})" for v, phase in waiting)


def gate_for_datasets(
    request: AdmissionRequest, patch: Patch, view: ClusterView, names: Names
) -> Verdict | None:
    pod = patch.obj
    volumes = dataset_volumes(pod, request.namespace, view, names)
    if not volumes or is_loader_pod(pod, names):
        return None
    waiting = [(v, v.load.phase) for v in volumes if not v.load.loaded]
    spec = pod.get("spec") or {}
    if waiting and spec.get("nodeName"):
        return Verdict.deny(
            f"this pod is pinned to node {spec['nodeName']!r} (spec.nodeName), but its dataset "
            f"{_describe_waiting(waiting)} has not finished loading, and a pinned pod cannot "
            "wait behind a scheduling gate; remove spec.nodeName (use a nodeSelector or node "
            "affinity to choose the node) or create the pod after the load has succeeded"
        )
    if waiting:
        gates = spec.get("schedulingGates") or []
        if not any(g.get("name") == names.data_load_gate for g in gates):
            patch.append("/spec/schedulingGates", {"name": names.data_load_gate})
        patch.set_label(names.data_wait_label, WAIT_LABEL_VALUE)
        failed = [v.pvc.name for v, phase in waiting if phase == PHASE_FAILED]
        if failed:
            patch.warn(
                f"dataset PVC {', '.join(failed)} failed to load; the pod waits until a new load "
                "succeeds (see the PVC's events)"
            )
    if not _writable(pod, names):
        for volume in volumes:
            _volume_read_only(patch, volume)
        _mount_read_only(patch, volumes, ("initContainers", "containers", "ephemeralContainers"))
    return None


def ephemeral_mounts_read_only(
    request: AdmissionRequest, patch: Patch, view: ClusterView, names: Names
) -> None:
    """An ephemeral (debug) container added later sees the dataset read-only too; only
    ephemeral containers may change in this request."""
    volumes = dataset_volumes(patch.obj, request.namespace, view, names)
    if volumes and not _writable(patch.obj, names):
        _mount_read_only(patch, volumes, ("ephemeralContainers",))


def policies(config: Config) -> list[MutatingPolicy]:
    names = config.names
    return [
        MutatingPolicy(
            name="dataset-gate",
            scope=CREATE_SCOPE,
            mutate=lambda request, patch, view: gate_for_datasets(request, patch, view, names),
            references=pvc_refs,
        ),
        MutatingPolicy(
            name="dataset-read-only-ephemeral",
            scope=EPHEMERAL_SCOPE,
            mutate=lambda request, patch, view: ephemeral_mounts_read_only(
                request, patch, view, names
            ),
            references=pvc_refs,
        ),
    ]
