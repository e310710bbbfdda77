"""The audit's judgement of existing objects, one policy at a time (pure; the real-API tier runs
the command against a real cluster)."""

from __future__ import annotations

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from webhooks.audit.objects import (
    COULD_NOT_CHECK,
    WOULD_CHANGE,
    Finding,
    audit_object,
    describe_changes,
    ordered,
)
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.interface import MutatingPolicy, PolicySet, Scope

POLICIES = build_policy_set(Config())


def cpu_pod(**env: str) -> dict:
    container: dict = {"name": "app", "image": "cuda"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [container]},
    }


def test_a_pod_already_changed_by_the_policies_has_no_finding() -> None:
    assert audit_object(cpu_pod(NVIDIA_VISIBLE_DEVICES="none"), POLICIES, StaticClusterView()) == []


def test_a_cpu_pod_without_the_env_may_see_gpus() -> None:
    (finding,) = audit_object(cpu_pod(), POLICIES, StaticClusterView())
    assert finding == Finding(
        "gpu-visibility",
        WOULD_CHANGE,
        "Pod",
        "ml",
        "p",
        'may see GPUs it was not given: add container "app" env (NVIDIA_VISIBLE_DEVICES=none)',
    )


def test_a_failing_policy_is_reported_not_raised() -> None:
    def broken(request, patch, view):  # type: ignore[no-untyped-def]
        raise KeyError("spec")

    policies = PolicySet(mutating=(MutatingPolicy("broken", Scope("Pod"), broken),))
    (finding,) = audit_object(cpu_pod(), policies, StaticClusterView())
    assert finding.result == COULD_NOT_CHECK and finding.message == "KeyError: 'spec'"


def test_changes_are_described_by_container_and_never_by_secret_value() -> None:
    pod = cpu_pod()
    ops = [
        {
            "op": "add",
            "path": "/spec/containers/0/env",
            "value": [
                {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "s"}}}
            ],
        },
        {"op": "add", "path": "/metadata/annotations/x", "value": "y"},
    ]
    assert describe_changes(ops, pod) == (
        'add container "app" env (AWS_SECRET_ACCESS_KEY); add /metadata/annotations/x (y)'
    )


def test_the_headline_policies_come_first() -> None:
    found = [
        Finding("credential-secrets", "would refuse", "Secret", "a", "s", ""),
        Finding("gpu-memory-share", WOULD_CHANGE, "Pod", "b", "p", ""),
        Finding("gpu-visibility", WOULD_CHANGE, "Pod", "c", "p", ""),
    ]
    assert [f.policy for f in ordered(found)] == [
        "gpu-visibility",
        "gpu-memory-share",
        "credential-secrets",
    ]


def test_status_and_field_managers_are_not_judged_and_the_object_is_left_as_it_was() -> None:
    pod = cpu_pod()
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.7"}
    before = repr(pod)
    assert audit_object(pod, POLICIES, StaticClusterView()) == audit_object(
        cpu_pod(), POLICIES, StaticClusterView()
    )
    assert repr(pod) == before


def test_each_finding_carries_its_policys_mode() -> None:
    config = Config.model_validate({"policies": {"gpu-visibility": {"mode": "audit"}}})
    (finding,) = audit_object(
        cpu_pod(), build_policy_set(config), StaticClusterView(), config.relaxed_modes()
    )
    assert finding.mode == "audit"
