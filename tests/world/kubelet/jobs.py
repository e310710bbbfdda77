"""The Job controller's decisions, as pure functions of a Job, its pods and the time.

Supports what the loader Jobs use. NonIndexed Jobs: parallelism and completions of 1 (larger
values are treated as 1). Indexed Jobs (pkg/controller/job/indexed_job_utils.go): one pod per
index up to ``parallelism``, each with the index as annotation and label
``batch.kubernetes.io/job-completion-index``, ``JOB_COMPLETION_INDEX`` from that label, hostname
``<job>-<index>``; ``status.completedIndexes`` as intervals ("0-2,4"); with
``backoffLimitPerIndex`` an index is retried alone (its pods carry
``batch.kubernetes.io/job-index-failure-count``) until its failures exceed the limit, it is then
listed in ``status.failedIndexes``, and once every index has succeeded or failed the Job fails
with reason ``FailedIndexes``. Both modes: ``backoffLimit`` (default 6, or MaxInt32 with
``backoffLimitPerIndex``), ``activeDeadlineSeconds`` and ``podFailurePolicy`` (first matching
rule: ``FailJob`` fails the Job with reason ``PodFailurePolicy``, ``Ignore`` does not count the
pod, ``FailIndex`` fails its index, ``Count`` counts it). Failed pods are replaced at once (the
real controller waits 10 s, doubling, before each replacement). Conditions follow the Job
controller of Kubernetes 1.31+: a ``FailureTarget``/``SuccessCriteriaMet`` condition, then
``Failed``/``Complete``. Pods with ``restartPolicy: OnFailure`` are replaced like ``Never`` pods
rather than restarted in place.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BACKOFF_LIMIT = 6
MAX_FAILURES = 2**31 - 1  # an index failed by a FailIndex rule: out of retries at once
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation and label
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_LABELS = ("job-name", "controller-uid")


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def pod_for_job(job: dict[str, Any], index: int | None = None, failures: int = 0) -> dict[str, Any]:
    """A pod from the Job's template, owned by the Job and labelled like the controller does;
    for an Indexed Job, the pod of `index` (`failures`: that index's failed pods so far)."""
    metadata = job["metadata"]
    template = copy.deepcopy(job["spec"]["template"])
    if index is not None:
        _index_template(template, metadata["name"], index)
        if (job.get("spec") or {}).get("backoffLimitPerIndex") is not None:
            template["metadata"]["annotations"][INDEX_FAILURE_COUNT] = str(failures)
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels.update(
        {
            CONTROLLER_UID_LABEL: metadata["uid"],
            JOB_NAME_LABEL: metadata["name"],
            "controller-uid": metadata["uid"],
            "job-name": metadata["name"],
        }
    )
    prefix = metadata["name"] if index is None else f"{metadata['name']}-{index}"
    pod_metadata = {
        "generateName": f"{prefix}-",
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


def _index_template(template: dict[str, Any], job_name: str, index: int) -> None:
    meta = template.setdefault("metadata", {})
    meta.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
    meta.setdefault("labels", {})[COMPLETION_INDEX] = str(index)
    spec = template["spec"]
    spec.setdefault("hostname", f"{job_name}-{index}")
    env_ref = {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}}
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            env = container.setdefault("env", [])
            if not any(e.get("name") == COMPLETION_INDEX_ENV for e in env):
                env.append({"name": COMPLETION_INDEX_ENV, "valueFrom": env_ref})


def _exit_codes(pod: dict[str, Any], container: str | None) -> list[tuple[str, int]]:
    status = pod.get("status") or {}
    found = []
    for group in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(group) or []:
            terminated = (item.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            if isinstance(code, int) and code != 0 and container in (None, item.get("name")):
                found.append((item.get("name", ""), code))
    return found


def policy_action(job: dict[str, Any], pod: dict[str, Any]) -> tuple[str, str] | None:
    """The first podFailurePolicy rule a failed pod matches: (action, the Job's message)."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    meta = pod.get("metadata") or {}
    who = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    conditions = (pod.get("status") or {}).get("conditions") or []
    for index, rule in enumerate(rules):
        action = rule.get("action", "")
        codes = rule.get("onExitCodes")
        if codes is not None:
            values = set(codes.get("values") or [])
            for name, code in _exit_codes(pod, codes.get("containerName")):
                if (code in values) == (codes.get("operator") == "In"):
                    message = (
                        f"Container {name} for pod {who} failed with exit code {code} matching "
                        f"{action} rule at index {index}"
                    )
                    return action, message
        for pattern in rule.get("onPodConditions") or []:
            if any(
                c.get("type") == pattern.get("type")
                and c.get("status") == pattern.get("status", "True")
                for c in conditions
            ):
                message = (
                    f"Pod {who} has condition {pattern.get('type')} matching {action} rule at "
                    f"index {index}"
                )
                return action, message
    return None


def pod_index(pod: dict[str, Any]) -> int | None:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX, "")
    return int(value) if value.isdigit() else None


def intervals(indexes: set[int]) -> str:
    """{0, 1, 2, 4} -> "0-2,4", as the Job controller writes completedIndexes."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = prev = None
    for i in [*ordered, None]:
        if i is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ",".join(parts)


@dataclass
class JobDecision:
    status: dict[str, Any]
    create_pods: list[tuple[int | None, int]] = field(default_factory=list)  # (index, failures)
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
    verdicts = {
        id(p): policy_action(job, p)
        for p, phase in zip(pods, phases, strict=True)
        if phase == "Failed"
    }
    ignored = {key for key, verdict in verdicts.items() if verdict and verdict[0] == "Ignore"}
    fail_job = next((v[1] for v in verdicts.values() if v and v[0] == "FailJob"), None)
    fail_index = {key for key, verdict in verdicts.items() if verdict and verdict[0] == "FailIndex"}
    failed = len(verdicts) - len(ignored)
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
    per_index = spec.get("backoffLimitPerIndex")
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
    indexed = spec.get("completionMode") == "Indexed"
    done_indexes: set[int] = set()
    failed_indexes: set[int] = set()
    failures: dict[int, int] = {}
    if indexed:
        for pod, phase in zip(pods, phases, strict=True):
            index = pod_index(pod)
            if index is None or index >= completions or id(pod) in ignored:
                continue
            if phase == "Succeeded":
                done_indexes.add(index)
            elif phase == "Failed":
                failures[index] = failures.get(index, 0) + 1
                if id(pod) in fail_index:
                    failures[index] = MAX_FAILURES
        if per_index is not None:
            failed_indexes = {
                i for i, n in failures.items() if n > per_index and i not in done_indexes
            }
            status["failedIndexes"] = intervals(failed_indexes)
        status["completedIndexes"] = intervals(done_indexes)
        status["succeeded"] = len(done_indexes)
    if fail_job is not None:
        return finish("FailureTarget", "Failed", "PodFailurePolicy", fail_job)
    if (len(done_indexes) >= completions) if indexed else succeeded >= min(completions, 1):
        return finish(
            "SuccessCriteriaMet",
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        )
    if failed_indexes and len(failed_indexes) + len(done_indexes) >= completions:
        return finish("FailureTarget", "Failed", "FailedIndexes", "Job has failed indexes")
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
    if not indexed:
        parallelism = min(spec.get("parallelism", 1), 1)
        create = [(None, 0)] if len(active) < parallelism else []
        return JobDecision(status, create_pods=create, deadline=deadline)
    running = {pod_index(p) for p in active}
    waiting = [
        i
        for i in range(completions)
        if i not in done_indexes and i not in failed_indexes and i not in running
    ]
    room = max(spec.get("parallelism", 1) - len(active), 0)
    create = [(i, failures.get(i, 0)) for i in waiting[:room]]
    return JobDecision(status, create_pods=create, deadline=deadline)
