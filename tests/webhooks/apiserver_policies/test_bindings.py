"""The pod checks' ValidatingAdmissionPolicies follow the checks' modes."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.config.model import Config
from webhooks.apiserver_policies.bindings import (
    admission_policy_objects,
    failed_policies,
    pod_check_policies,
)
from webhooks.apiserver_policies.pod_checks import POLICY_NAME
from webhooks.apiserver_policies.workload_templates import WORKLOAD_POLICY_NAME

BOTH_PROBLEMS: dict[str, Any] = {
    "spec": {
        "containers": [
            {
                "name": "c",
                "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            }
        ]
    }
}


def check_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pod and workload checks' policies and bindings, of all the generated objects."""
    return [
        o
        for o in objects
        if "pods" in o["metadata"]["name"]
        or "workloads" in o["metadata"]["name"]
        or o["metadata"]["name"].endswith(("gpu-env-guard", "shared-gpu-limit"))
    ]


def modes(env_guard: str, shared: str) -> Config:
    return Config.model_validate(
        {"policies": {"gpu-env-guard": {"mode": env_guard}, "shared-gpu-limit": {"mode": shared}}}
    )


@pytest.mark.parametrize(
    ("mode", "actions"),
    [("enforce", ["Deny"]), ("warn", ["Warn", "Audit"]), ("audit", ["Audit"])],
)
def test_one_policy_while_the_checks_share_a_mode(mode: str, actions: list[str]) -> None:
    objects = admission_policy_objects(modes(mode, mode))
    policy, binding, workloads, workloads_binding = check_objects(objects)
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == POLICY_NAME
    assert binding["spec"] == {"policyName": POLICY_NAME, "validationActions": actions}
    # The env guard holds GPU-sharing schedulers' pods to what their scheduler gives (notGiven).
    assert [v["name"] for v in policy["spec"]["variables"]][-4:] == [
        "envGuard",
        "notGivenProblems",
        "notGiven",
        "sharedGpuLimit",
    ]
    # Workloads' templates: the same checks, in the same mode.
    assert workloads["metadata"]["name"] == WORKLOAD_POLICY_NAME
    assert workloads_binding["spec"] == {
        "policyName": WORKLOAD_POLICY_NAME,
        "validationActions": actions,
    }
    assert [v["name"] for v in workloads["spec"]["variables"]] == [
        "templates",
        "envGuard",
        "sharedGpuLimit",
    ]


def test_a_policy_each_when_the_modes_differ() -> None:
    objects = check_objects(admission_policy_objects(modes("warn", "enforce")))
    names = [o["metadata"]["name"] for o in objects]
    assert names == (
        ["gpu-admission-gpu-env-guard"] * 2
        + ["gpu-admission-shared-gpu-limit"] * 2
        + ["gpu-admission-workloads-gpu-env-guard"] * 2
        + ["gpu-admission-workloads-shared-gpu-limit"] * 2
    )
    env_policy, env_binding, shared_policy, shared_binding = objects[:4]
    assert objects[5]["spec"]["validationActions"] == ["Warn", "Audit"]
    assert objects[7]["spec"]["validationActions"] == ["Deny"]
    assert env_binding["spec"]["validationActions"] == ["Warn", "Audit"]
    assert shared_binding["spec"]["validationActions"] == ["Deny"]
    env_vars = {v["name"] for v in env_policy["spec"]["variables"]}
    shared_vars = {v["name"] for v in shared_policy["spec"]["variables"]}
    assert "sharedGpuLimit" not in env_vars and "envGuard" in env_vars
    assert "envGuard" not in shared_vars and "sharedGpuLimit" in shared_vars
    # The real server accepts and runs both: tests/real_api/test_policy_modes.py.


def test_each_policy_reports_its_own_check() -> None:
    config = modes("audit", "enforce")
    found = {policy.name: message for policy, message in failed_policies(BOTH_PROBLEMS, config)}
    assert "sets NVIDIA_VISIBLE_DEVICES" in found["gpu-admission-gpu-env-guard"]
    assert "asks for 2 of nvidia.com/gpu.shared" in found["gpu-admission-shared-gpu-limit"]
    assert "asks for" not in found["gpu-admission-gpu-env-guard"]
    [(together, message)] = failed_policies(BOTH_PROBLEMS, Config())
    assert together.name == POLICY_NAME
    assert "NVIDIA_VISIBLE_DEVICES" in message and "asks for 2" in message


def test_other_policies_modes_do_not_split_the_pod_checks() -> None:
    config = Config.model_validate({"policies": {"gpu-visibility": {"mode": "audit"}}})
    assert [p.name for p in pod_check_policies(config)] == [POLICY_NAME]


@pytest.mark.parametrize(
    ("visibility", "credentials", "kind", "guard_actions"),
    [
        ("enforce", "enforce", "MutatingAdmissionPolicy", ["Deny"]),
        ("audit", "audit", "ValidatingAdmissionPolicy", ["Audit"]),
    ],
)
def test_visibility_and_the_routing_guards_follow_their_policies_modes(
    visibility: str, credentials: str, kind: str, guard_actions: list[str]
) -> None:
    config = Config.model_validate(
        {
            "policies": {
                "gpu-visibility": {"mode": visibility},
                "cloud-credentials": {"mode": credentials},
            }
        }
    )
    objects = {(o["kind"], o["metadata"]["name"]): o for o in admission_policy_objects(config)}
    policy = objects[(kind, "gpu-admission-gpu-visibility")]
    if kind == "ValidatingAdmissionPolicy":  # audit: records, never changes
        binding = objects[("ValidatingAdmissionPolicyBinding", "gpu-admission-gpu-visibility")]
        assert binding["spec"]["validationActions"] == ["Audit"]
        assert ("MutatingAdmissionPolicy", "gpu-admission-gpu-visibility") not in objects
    else:
        assert policy["spec"]["mutations"][0]["patchType"] == "JSONPatch"
        assert ("MutatingAdmissionPolicyBinding", "gpu-admission-gpu-visibility") in objects
    for guard in (
        "gpu-admission-serviceaccount-credentials",
        "gpu-admission-credential-namespaces",
    ):
        binding = objects[("ValidatingAdmissionPolicyBinding", guard)]
        assert binding["spec"]["validationActions"] == guard_actions
