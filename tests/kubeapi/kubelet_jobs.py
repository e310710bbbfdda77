"""The Job controller's decisions, as pure functions of a Job, its pods and the time.

Supports what the loader Jobs use: parallelism and completions of 1 (larger values are treated
as 1), ``backoffLimit`` (default 6: a new pod after each failure until failures exceed it) and
``activeDeadlineSeconds``. Conditions follow the Job controller of Kubernetes 1.31+: a
``FailureTarget``/``SuccessCriteriaMet`` condition, then ``Failed``/``Complete``. Pods with
``restartPolicy: OnFailure`` are replaced like ``Never`` pods rather than restarted in place.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass
from typing import Any

DEFAULT_BACKOFF_LIMIT = 6
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_LABELS = ("job-name", "controller-uid")


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def pod_for_job(job: dict[str, Any]) -> dict[str, Any]:
    """A pod from the Job's template, owned by the Job and labelled like the controller does."""
    metadata = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update(
        {
            CONTROLLER_UID_LABEL: metadata["uid"],
            JOB_NAME_LABEL: metadata["name"],
            "controller-uid": metadata["uid"],
            "job-name": metadata["name"],
        }
    )
    pod_metadata = {
        "generateName": f"{metadata['name']}-",
        "namespace": metadata["namespace"],
        "labels": labels,
        "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": template["spec"]}


@dataclass
class JobDecision:
    status: dict[str, Any]
    create_pod: bool = False
    kill_active: list[str] | None = None  # names of pods to delete
    deadline: dt.datetime | None = None  # when to look again for activeDeadlineSeconds


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def decide(job: dict[str, Any], pods: list[dict[str, Any]], now: dt.datetime) -> JobDecision:
    spec = job.get("spec") or {}
    old = job.get("status") or {}
    stamp = rfc3339(now)
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods]
    active = [
        p for p in live if (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Running")
    ]
    succeeded = phases.count("Succeeded")
    failed = phases.count("Failed")
    status: dict[str, Any] = {
        "startTime": old.get("startTime") or stamp,
        "active": len(active),
        "succeeded": succeeded,
        "failed": failed,
        "ready": sum(1 for p in active if (p.get("status") or {}).get("phase") == "Running"),
        "terminating": 0,
        "uncountedTerminatedPods": {},
    }
    conditions = list(old.get("conditions") or [])
    backoff_limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    deadline_seconds = spec.get("activeDeadlineSeconds")
    started = parse_time(status["startTime"])
    deadline = started + dt.timedelta(seconds=deadline_seconds) if deadline_seconds else None

    def finish(target: str, final: str, reason: str, message: str) -> JobDecision:
        status["conditions"] = [
            *conditions,
            _condition(target, reason, message, stamp),
            _condition(final, reason, message, stamp),
        ]
        if final == "Complete":
            status["completionTime"] = stamp
        status["active"] = 0
        status["ready"] = 0
        return JobDecision(status, kill_active=[p["metadata"]["name"] for p in active])

    completions = spec.get("completions", 1) or 1
    if succeeded >= min(completions, 1):
        return finish(
            "SuccessCriteriaMet",
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    if failed > backoff_limit:
        return finish(
            "FailureTarget",
            "Failed",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    if deadline is not None and now >= deadline:
        return finish(
            "FailureTarget",
            "Failed",
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        )
    status["conditions"] = conditions
    if not status["conditions"]:
        del status["conditions"]
    parallelism = min(spec.get("parallelism", 1), 1)
    return JobDecision(status, create_pod=len(active) < parallelism, deadline=deadline)
