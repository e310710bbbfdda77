"""Indexed Jobs in the emulator and the fake Job controller, as Kubernetes 1.36 runs them: one pod
per index with JOB_COMPLETION_INDEX, completedIndexes/failedIndexes, backoffLimitPerIndex
retrying one index alone, and the API server's validation of the completion-mode fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.world.kubelet.jobs import intervals
from tests.world.tests.workloads import NAMESPACE, job, job_condition, job_pods, wait_for

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

INDEX = "batch.kubernetes.io/job-completion-index"
FAILURES = "batch.kubernetes.io/job-index-failure-count"
DATA = {"volumeMounts": [{"name": "data", "mountPath": "/data/shards"}]}
VOLUMES = [{"name": "data", "persistentVolumeClaim": {"claimName": "shards"}}]


def indexed(name: str, script: str, completions: int, **spec: Any) -> dict[str, Any]:
    container = {"name": "work", "command": ["sh", "-c", script], **DATA}
    return job(
        name,
        container,
        completionMode="Indexed",
        completions=completions,
        parallelism=completions,
        pod={"volumes": VOLUMES},
        **spec,
    )


def finished(batch: client.BatchV1Api, name: str) -> client.V1Job:
    return wait_for(batch.list_namespaced_job, name, lambda j: job_condition(j) is not None)


def test_each_index_runs_once_with_its_index_and_hostname(kubelet, core, batch):
    script = 'echo "$JOB_COMPLETION_INDEX $HOSTNAME" > /data/shards/$JOB_COMPLETION_INDEX'
    batch.create_namespaced_job(NAMESPACE, indexed("fan", script, 3))
    done = finished(batch, "fan")
    assert job_condition(done) == "Complete"
    assert done.status.completed_indexes == "0-2" and done.status.succeeded == 3
    pods = job_pods(core, "fan")
    assert sorted(p.metadata.annotations[INDEX] for p in pods) == ["0", "1", "2"]
    assert all(p.metadata.labels[INDEX] == p.metadata.annotations[INDEX] for p in pods)
    assert all(p.metadata.name.startswith(f"fan-{p.metadata.labels[INDEX]}-") for p in pods)
    directory = kubelet.pvc_dir(NAMESPACE, "shards")
    for index in range(3):
        assert (directory / str(index)).read_text().split()[0] == str(index)


def test_backoff_limit_per_index_retries_the_failed_index_alone(kubelet, core, batch):
    # Index 1 fails its first attempt (no marker yet), then succeeds.
    script = (
        'if [ "$JOB_COMPLETION_INDEX" = 1 ] && [ ! -e /data/shards/tried ]; then '
        "touch /data/shards/tried; exit 1; fi"
    )
    batch.create_namespaced_job(NAMESPACE, indexed("retry", script, 3, backoffLimitPerIndex=1))
    done = finished(batch, "retry")
    assert job_condition(done) == "Complete"
    assert done.status.failed == 1 and done.status.failed_indexes == ""
    attempts = sorted(
        (p.metadata.labels[INDEX], p.metadata.annotations[FAILURES], p.status.phase)
        for p in job_pods(core, "retry")
    )
    assert attempts == [
        ("0", "0", "Succeeded"),
        ("1", "0", "Failed"),
        ("1", "1", "Succeeded"),
        ("2", "0", "Succeeded"),
    ]


def test_an_index_out_of_retries_fails_the_job_with_failed_indexes(kubelet, core, batch):
    script = '[ "$JOB_COMPLETION_INDEX" != 1 ]'
    batch.create_namespaced_job(NAMESPACE, indexed("broken", script, 3, backoffLimitPerIndex=1))
    done = finished(batch, "broken")
    assert job_condition(done) == "Failed"
    failed = next(c for c in done.status.conditions if c.type == "Failed")
    assert (failed.reason, failed.message) == ("FailedIndexes", "Job has failed indexes")
    assert done.status.failed_indexes == "1" and done.status.completed_indexes == "0,2"
    assert done.spec.backoff_limit == 2**31 - 1  # defaulted: the per-index limit governs


def rejected(batch: client.BatchV1Api, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job(NAMESPACE, body)
    assert caught.value.status == 422
    return json.loads(caught.value.body)


def test_validation_of_completion_mode_fields(batch, core):
    container = {"name": "c", "command": ["true"]}
    status = rejected(batch, job("a", container, backoffLimitPerIndex=1))
    assert status["message"] == (
        'Job.batch "a" is invalid: spec.backoffLimitPerIndex: Invalid value: 1: '
        "requires indexed completion mode"
    )
    status = rejected(batch, job("b", container, completionMode="Indexed", parallelism=2))
    assert (
        "spec.completions: Required value: when completion mode is Indexed" in (status["message"])
    )
    status = rejected(batch, job("c", container, completionMode="Sorted", completions=1))
    assert 'spec.completionMode: Unsupported value: "Sorted"' in status["message"]


@pytest.mark.parametrize(
    ("indexes", "text"), [(set(), ""), ({0}, "0"), ({0, 1, 2, 4}, "0-2,4"), ({3, 5, 6}, "3,5-6")]
)
def test_intervals_are_written_like_the_job_controller(indexes, text):
    assert intervals(indexes) == text
