"""What the API server runs itself, as the policy modes call for: every admission policy and its
binding (`admission_policy_objects`, what `gpu-admission admission-policy` prints).

The stateless pod checks as ValidatingAdmissionPolicies:

A ValidatingAdmissionPolicyBinding's `validationActions` apply to every validation of its policy,
so the two checks share one policy (and the user hears of both problems at once) while they share
a mode; when `policies.gpu-env-guard.mode` and `policies.shared-gpu-limit.mode` differ, each gets
a policy and binding of its own. Modes become actions as the API allows them combined
(admissionregistration.k8s.io/v1: Deny and Warn never together):

- enforce: `[Deny]`, the request is refused;
- warn: `[Warn, Audit]`, admitted with a `Warning:` and recorded in the audit event;
- audit: `[Audit]`, admitted silently, recorded in the audit event
  (`validation.policy.admission.k8s.io/validation_failure`).

GPU visibility as a MutatingAdmissionPolicy (enforce), or a ValidatingAdmissionPolicy that records
(audit): `visibility_mutation`. The guard of GPU-sharing schedulers' ConfigMaps
(`scheduler_configmaps`) follows `gpu-env-guard`, where a scheduler is configured. The two guards
of the routing of ServiceAccount-bound credentials (`credential_namespaces`) follow
`cloud-credentials`: `[Deny]`, or `[Audit]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.apiserver_policies.credential_namespaces import (
    BINDING_POLICY,
    LABEL_POLICY,
    binding_policy,
    label_policy,
)
from webhooks.apiserver_policies.pod_checks import (
    ENV_GUARD,
    POD_CHECKS,
    POLICY_NAME,
    admission_policy,
    admission_policy_binding,
    policy_denial,
)
from webhooks.apiserver_policies.scheduler_configmaps import POLICY_NAME as CONFIGMAP_POLICY
from webhooks.apiserver_policies.scheduler_configmaps import configmap_policy
from webhooks.apiserver_policies.visibility_mutation import POLICY_NAME as VISIBILITY_POLICY
from webhooks.apiserver_policies.visibility_mutation import (
    visibility_audit_policy,
    visibility_policy,
    visibility_policy_binding,
)
from webhooks.apiserver_policies.workload_templates import (
    WORKLOAD_POLICY_NAME,
    workload_admission_policy,
)

GPU_VISIBILITY, CLOUD_CREDENTIALS = "gpu-visibility", "cloud-credentials"
ACTIONS: dict[PolicyMode, tuple[str, ...]] = {
    PolicyMode.ENFORCE: ("Deny",),
    PolicyMode.WARN: ("Warn", "Audit"),
    PolicyMode.AUDIT: ("Audit",),
}


@dataclass(frozen=True)
class PodCheckPolicy:
    """One ValidatingAdmissionPolicy (and its binding, of the same name)."""

    name: str
    mode: PolicyMode
    checks: tuple[str, ...]


def pod_check_policies(config: Config) -> list[PodCheckPolicy]:
    modes = {check: config.mode_of(check) for check in POD_CHECKS}
    if len(set(modes.values())) == 1:
        return [PodCheckPolicy(POLICY_NAME, modes[ENV_GUARD], POD_CHECKS)]
    return [PodCheckPolicy(f"gpu-admission-{c}", modes[c], (c,)) for c in POD_CHECKS]


def workload_check_policies(config: Config) -> list[PodCheckPolicy]:
    """The same split for workloads' templates (`workload_admission_policy`)."""
    pods = pod_check_policies(config)
    if len(pods) == 1:
        return [PodCheckPolicy(WORKLOAD_POLICY_NAME, pods[0].mode, pods[0].checks)]
    return [PodCheckPolicy(f"{WORKLOAD_POLICY_NAME}-{p.checks[0]}", p.mode, p.checks) for p in pods]


def admission_policy_objects(config: Config) -> list[dict[str, Any]]:
    """Every policy and its binding, in the order to apply them: pods', workloads', GPU
    visibility's, GPU-sharing schedulers' ConfigMaps', then the guards of ServiceAccount-bound
    credentials' routing."""
    objects = []
    for policy in pod_check_policies(config):
        objects.append(admission_policy(config, policy.checks, policy.name))
        objects.append(admission_policy_binding(ACTIONS[policy.mode], policy.name))
    for policy in workload_check_policies(config):
        objects.append(workload_admission_policy(config, policy.checks, policy.name))
        objects.append(admission_policy_binding(ACTIONS[policy.mode], policy.name))
    objects += visibility_objects(config)
    if config.gpu.schedulers:
        objects.append(configmap_policy(config))
        objects.append(
            admission_policy_binding(ACTIONS[config.mode_of(ENV_GUARD)], CONFIGMAP_POLICY)
        )
    guards = ACTIONS[config.mode_of(CLOUD_CREDENTIALS)]
    objects.append(binding_policy(config))
    objects.append(admission_policy_binding(guards, BINDING_POLICY))
    objects.append(label_policy(config))
    objects.append(admission_policy_binding(guards, LABEL_POLICY))
    return objects


def visibility_objects(config: Config) -> list[dict[str, Any]]:
    """GPU visibility in the API server: the MutatingAdmissionPolicy that makes the change
    (enforce), or the ValidatingAdmissionPolicy that records it (audit); none where the policy
    is off (`gpu.visibility_policy`)."""
    if not config.gpu.visibility_policy:
        return []
    if config.mode_of(GPU_VISIBILITY) is PolicyMode.AUDIT:
        return [
            visibility_audit_policy(config),
            admission_policy_binding(ACTIONS[PolicyMode.AUDIT], VISIBILITY_POLICY),
        ]
    return [visibility_policy(config), visibility_policy_binding()]


def failed_policies(pod: Mapping[str, Any], config: Config) -> list[tuple[PodCheckPolicy, str]]:
    """Each policy whose validation fails for `pod`, with the message the API server gives."""
    failed = []
    for policy in pod_check_policies(config):
        message = policy_denial(pod, config, policy.checks)
        if message is not None:
            failed.append((policy, message))
    return failed
