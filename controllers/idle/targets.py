"""What the controller acts on for an idle workload, and how (pure).

The node agent names a pod's workload by its controller (gpu_usage/workloads.py): Deployment,
StatefulSet, Job, JobSet, Pod, or any other controller's kind. Here each becomes the object
that is announced and, where its namespace opts in, given back:

- Deployment, StatefulSet: scaled to zero, its replicas before kept in an annotation;
- a StatefulSet whose controller is a Kubeflow Notebook: the Notebook, stopped as Kubeflow stops
  it (its stop annotation; the Notebook controller then scales the StatefulSet to zero);
- Job, JobSet: suspended (`spec.suspend`; the Job controller deletes the active pods, JobSet
  suspends its Jobs);
- a bare Pod, or any other kind: named only (deleting a pod loses its work; an unknown
  controller would undo a change).

A Deployment, StatefulSet or Job that another controller manages (an operator's InferenceService,
a RayCluster) is named only too: the operator would put the replicas back. A CronJob's Job is
suspended like any Job (the CronJob leaves its Jobs' spec alone).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpu_admission.names import KUBEFLOW_STOP_ANNOTATION, Names


class Action(StrEnum):
    SCALE = "scaled to zero"
    SUSPEND = "suspended"
    STOP = "stopped"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    action: Action | None  # None: named only

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    k.kind: k
    for k in (
        Kind("Deployment", "apps", "v1", "deployments", Action.SCALE),
        Kind("StatefulSet", "apps", "v1", "statefulsets", Action.SCALE),
        Kind("Job", "batch", "v1", "jobs", Action.SUSPEND),
        Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", Action.SUSPEND),
        Kind("Notebook", "kubeflow.org", "v1", "notebooks", Action.STOP),
        Kind("Pod", "", "v1", "pods", None),
    )
}
NOTEBOOK = KINDS["Notebook"]
# Controllers whose Jobs may be suspended: they leave a Job's spec alone once made.
_JOB_OWNERS_LEFT_ALONE = ("CronJob",)


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def notebook_of(stateful_set: Mapping[str, Any]) -> str | None:
    """The Kubeflow Notebook that runs this StatefulSet, if one does."""
    owner = controller_of(stateful_set)
    if owner is None or owner.get("kind") != NOTEBOOK.kind:
        return None
    is_kubeflow = str(owner.get("apiVersion", "")).startswith(f"{NOTEBOOK.group}/")
    return str(owner.get("name", "")) if is_kubeflow else None


def managed_elsewhere(kind: Kind, obj: Mapping[str, Any]) -> str | None:
    """The controller that would undo a change to `obj`, as `Kind/name`; None if none would."""
    owner = controller_of(obj)
    if owner is None or kind.action is None or kind is NOTEBOOK:
        return None
    if kind.kind == "Job" and owner.get("kind") in _JOB_OWNERS_LEFT_ALONE:
        return None
    return f"{owner.get('kind')}/{owner.get('name')}"


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def already_given_back(kind: Kind, obj: Mapping[str, Any]) -> bool:
    """Nothing left to give: no replicas, suspended, stopped."""
    spec = obj.get("spec") or {}
    if kind.action is Action.SCALE:
        return spec.get("replicas", 1) == 0
    if kind.action is Action.SUSPEND:
        return bool(spec.get("suspend"))
    if kind.action is Action.STOP:
        return KUBEFLOW_STOP_ANNOTATION in annotations(obj)
    return False


def give_back_patch(kind: Kind, obj: Mapping[str, Any], now: str, names: Names) -> dict[str, Any]:
    """The merge patch that gives `obj`'s GPUs back. It carries the resourceVersion read, so the
    API server refuses it (409) if the object changed since; and it drops the announcement."""
    meta = obj.get("metadata") or {}
    patch_meta: dict[str, Any] = {
        "resourceVersion": meta.get("resourceVersion"),
        "annotations": {names.idle_announced: None},
    }
    patch: dict[str, Any] = {"metadata": patch_meta}
    if kind.action is Action.SCALE:
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        patch_meta["annotations"][names.replicas_before_idle] = str(replicas)
        patch["spec"] = {"replicas": 0}
    elif kind.action is Action.SUSPEND:
        patch["spec"] = {"suspend": True}
    elif kind.action is Action.STOP:
        patch_meta["annotations"][KUBEFLOW_STOP_ANNOTATION] = now
    return patch


def restore_command(kind: Kind, namespace: str, name: str, obj: Mapping[str, Any]) -> str:
    """The one command that brings a given-back workload back."""
    ref = f"{kind.kind.lower()}/{name}"
    if kind.action is Action.SCALE:
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        return f"kubectl -n {namespace} scale {ref} --replicas={replicas}"
    if kind.action is Action.SUSPEND:
        resume = json.dumps({"spec": {"suspend": False}}, separators=(",", ":"))
        return f"kubectl -n {namespace} patch {ref} --type=merge -p '{resume}'"
    if kind.action is Action.STOP:
        return f"kubectl -n {namespace} annotate {ref} {KUBEFLOW_STOP_ANNOTATION}-"
    return ""
