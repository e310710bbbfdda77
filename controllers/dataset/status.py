"""The state a load leaves on its PVC: annotations and the `Loading` condition. Pure builders.

The condition is written through the status subresource with a JSON Patch that first tests the
resourceVersion it was computed from, so a concurrent writer's conditions are never lost (a
failed test means: read again and retry). lastTransitionTime changes only when the status does;
the API server does not fill it in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from gpu_admission.names import LOADING_CONDITION, PHASE_FAILED, PHASE_SUCCEEDED, Names


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotation_patch(
    names: Names, phase: str, job: str, summary: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A merge patch for the phase annotations; figures are cleared when not known."""
    summary = summary or {}
    figures = {
        names.data_load_bytes: summary.get("bytes"),
        names.data_load_files: summary.get("files"),
        names.data_load_duration: summary.get("durationSeconds"),
    }
    annotations: dict[str, Any] = {names.data_load_phase: phase, names.data_load_job: job}
    annotations.update({k: None if v is None else str(v) for k, v in figures.items()})
    return {"metadata": {"annotations": annotations}}


def loading_condition(phase: str, reason: str, message: str) -> dict[str, Any]:
    done = phase in (PHASE_SUCCEEDED, PHASE_FAILED)
    return {
        "type": LOADING_CONDITION,
        "status": "False" if done else "True",
        "reason": reason or phase,
        "message": message[:1024],
    }


def merged_conditions(
    current: list[Mapping[str, Any]] | None, wanted: Mapping[str, Any], now: str
) -> list[dict[str, Any]] | None:
    """Conditions with ours set to `wanted`, others untouched; None if nothing changes."""
    conditions = [dict(c) for c in current or []]
    for i, condition in enumerate(conditions):
        if condition.get("type") != wanted["type"]:
            continue
        same = all(condition.get(k) == wanted[k] for k in ("status", "reason", "message"))
        if same and condition.get("lastTransitionTime"):
            return None
        changed = condition.get("status") != wanted["status"]
        transition = condition.get("lastTransitionTime")
        conditions[i] = {
            **wanted,
            "lastProbeTime": None,
            "lastTransitionTime": now if changed or not transition else transition,
        }
        return conditions
    return [*conditions, {**wanted, "lastProbeTime": None, "lastTransitionTime": now}]


def condition_patch(
    obj: Mapping[str, Any], wanted: Mapping[str, Any], now: str
) -> list[dict[str, Any]] | None:
    """JSON Patch for the status subresource, guarded by the object's resourceVersion."""
    status = obj.get("status") or {}
    conditions = merged_conditions(status.get("conditions"), wanted, now)
    if conditions is None:
        return None
    version = (obj.get("metadata") or {}).get("resourceVersion")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version}
    ]
    if "status" not in obj or obj.get("status") is None:
        ops.append({"op": "add", "path": "/status", "value": {"conditions": conditions}})
    else:
        ops.append({"op": "add", "path": "/status/conditions", "value": conditions})
    return ops
