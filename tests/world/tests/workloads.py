"""Helpers for the fake kubelet's and Job controller's tests: Jobs to create, waits on watches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

NAMESPACE = "ml"
WAIT_SECONDS = 30


def wait_for(list_call: Callable[..., Any], name: str, predicate: Callable[[Any], bool]) -> Any:
    """Watch one object until predicate holds (bounded), returning it."""
    stream = watch.Watch()
    for event in stream.stream(
        list_call, NAMESPACE, field_selector=f"metadata.name={name}", timeout_seconds=WAIT_SECONDS
    ):
        if event["type"] != "DELETED" and predicate(event["object"]):
            stream.stop()
            return event["object"]
    raise AssertionError(f"{name} did not reach the expected state within {WAIT_SECONDS} s")


def job_condition(job: client.V1Job) -> str | None:
    for condition in (job.status and job.status.conditions) or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.type
    return None


def job(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod_spec = {"restartPolicy": "Never", "containers": [{"image": "busybox", **container}]}
    pod_spec.update(spec.pop("pod", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }


def job_pods(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    selector = f"batch.kubernetes.io/job-name={name}"
    return core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
