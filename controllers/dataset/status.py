"""The state a load leaves on its PVC, written in one PATCH of the status subresource. Pure.

The PVC status strategy resets only the spec (kube-apiserver's
persistentvolumeclaimStatusStrategy.PrepareForUpdate), so one write to `persistentvolumeclaims/
status` carries both the `Loading` condition and the phase annotations. It is a strategic merge
patch: PVC conditions merge by `type`, so conditions other writers own are never touched, and no
read comes first. The patch names the PVC's uid, which the API server treats as a precondition: a
PVC deleted and re-created under the same name is never given the old one's state.
lastTransitionTime changes only when the condition's status does (the API server does not fill it
in); the last one seen comes from the informer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controllers.dataset.records import PvcRecord
from gpu_admission.datasets.progress import LoadProgress
from gpu_admission.names import LOADING_CONDITION, PHASE_FAILED, PHASE_SUCCEEDED, Names


def annotations(
    names: Names,
    phase: str,
    job: str,
    summary: Mapping[str, Any] | None,
    progress: LoadProgress | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """The phase annotations; figures are cleared (None) when not known, progress when the
    load is not running."""
    summary = summary or {}
    figures = {
        names.data_load_bytes: summary.get("bytes"),
        names.data_load_files: summary.get("files"),
        names.data_load_duration: summary.get("durationSeconds"),
        names.data_load_progress: progress.message() if progress is not None else None,
    }
    values: dict[str, str | None] = {names.data_load_phase: phase, names.data_load_job: job}
    values.update({k: None if v is None else str(v) for k, v in figures.items()})
    if summary.get("commit"):  # a hub load: the commit it read (kept until the next one)
        values[names.data_commit] = str(summary["commit"])
    if phase == PHASE_SUCCEEDED and summary.get("digest"):  # what the load read, kept as is
        values[names.data_digest] = str(summary["digest"])
        values[names.data_digest_files] = str(summary.get("digestFiles", ""))
        values[names.data_digest_bytes] = str(summary.get("digestBytes", ""))
    values.update(extra or {})
    return values


def loading_condition(phase: str, reason: str, message: str) -> dict[str, Any]:
    done = phase in (PHASE_SUCCEEDED, PHASE_FAILED)
    return {
        "type": LOADING_CONDITION,
        "status": "False" if done else "True",
        "reason": reason or phase,
        "message": message[:1024],
    }


def status_patch(
    names: Names,
    pvc: PvcRecord,
    phase: str,
    reason: str,
    message: str,
    job: str,
    summary: Mapping[str, Any] | None,
    now: str,
    progress: LoadProgress | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """The strategic merge patch for `pvc`'s status subresource; None when the PVC already
    shows all of it. A running load's progress also goes into a label, the form
    `kubectl get pvc -L` can show."""
    wanted = loading_condition(phase, reason, message)
    label = progress.label() if progress is not None else None
    current = pvc.condition
    same_condition = current is not None and (
        (current.status, current.reason, current.message)
        == (wanted["status"], wanted["reason"], wanted["message"])
        and bool(current.last_transition)
    )
    if same_condition and pvc.phase == phase and pvc.job == job and pvc.progress_label == label:
        return None
    keep_transition = current is not None and current.status == wanted["status"]
    transition = current.last_transition if keep_transition and current else ""
    condition = {**wanted, "lastProbeTime": None, "lastTransitionTime": transition or now}
    metadata: dict[str, Any] = {
        "uid": pvc.uid,
        "annotations": annotations(names, phase, job, summary, progress, extra),
    }
    if label is not None or pvc.progress_label is not None:
        metadata["labels"] = {names.data_load_progress: label}
    return {"metadata": metadata, "status": {"conditions": [condition]}}
