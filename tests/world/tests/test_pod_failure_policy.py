"""podFailurePolicy in the emulator and the fake Job controller, as Kubernetes 1.36 has it: the
first matching rule decides, FailJob ends the Job at once with reason PodFailurePolicy, other
failures count toward backoffLimit; validation and defaults as kube-apiserver's."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.world.tests.workloads import NAMESPACE, job, job_condition, job_pods, wait_for

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier


def exit_codes(values: list[int], container: str | None = "main") -> dict:
    codes: dict = {"operator": "In", "values": values}
    if container:
        codes["containerName"] = container
    return codes


POLICY = {
    "rules": [
        {"action": "FailJob", "onExitCodes": exit_codes([42])},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]
}


def test_fail_job_rule_ends_the_job_without_retries(kubelet, core, batch):
    container = {"name": "main", "command": ["sh", "-c", "exit 42"]}
    batch.create_namespaced_job(
        NAMESPACE, job("permanent", container, backoffLimit=3, podFailurePolicy=POLICY)
    )
    done = wait_for(batch.list_namespaced_job, "permanent", lambda j: job_condition(j) is not None)
    failed = next(c for c in done.status.conditions if c.type == "Failed")
    [pod] = job_pods(core, "permanent")
    assert failed.reason == "PodFailurePolicy"
    assert failed.message == (
        f"Container main for pod {NAMESPACE}/{pod.metadata.name} failed with exit code 42 "
        "matching FailJob rule at index 0"
    )
    assert done.spec.pod_replacement_policy == "Failed"  # the default with a policy


def test_other_exit_codes_count_toward_the_backoff_limit(kubelet, core, batch):
    container = {"name": "main", "command": ["sh", "-c", "exit 3"]}
    batch.create_namespaced_job(
        NAMESPACE, job("transient", container, backoffLimit=2, podFailurePolicy=POLICY)
    )
    done = wait_for(batch.list_namespaced_job, "transient", lambda j: job_condition(j) is not None)
    failed = next(c for c in done.status.conditions if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded" and len(job_pods(core, "transient")) == 3


def rejected(batch, body) -> str:
    with pytest.raises(ApiException) as caught:
        batch.create_namespaced_job(NAMESPACE, body)
    assert caught.value.status == 422
    return json.loads(caught.value.body)["message"]


def test_validation(batch, core):
    container = {"name": "main", "command": ["true"]}
    on_failure = job("a", container, podFailurePolicy=POLICY, pod={"restartPolicy": "OnFailure"})
    assert rejected(batch, on_failure) == (
        'Job.batch "a" is invalid: spec.template.spec.restartPolicy: Invalid value: "OnFailure": '
        'only "Never" is supported when podFailurePolicy is specified'
    )
    bad = {"rules": [{"action": "FailJob", "onExitCodes": exit_codes([0, 3], None)}]}
    assert (
        "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 "
        "for the In operator"
    ) in rejected(batch, job("b", container, podFailurePolicy=bad))
    other = {"rules": [{"action": "FailJob", "onExitCodes": exit_codes([3], "x")}]}
    assert 'onExitCodes.containerName: Invalid value: "x": must be one of the container' in (
        rejected(batch, job("c", container, podFailurePolicy=other))
    )
    index = {"rules": [{"action": "FailIndex", "onExitCodes": exit_codes([3], None)}]}
    assert "requires the backoffLimitPerIndex to be set" in rejected(
        batch, job("d", container, podFailurePolicy=index)
    )
