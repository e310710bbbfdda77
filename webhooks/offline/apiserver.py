"""What the API server does itself, offline, for `gpu-admission review`: the admission policies of
the default manifests (webhooks.apiserver_policies) as their bindings take them, in the words
kube-apiserver says them in."""

from __future__ import annotations

from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.apiserver_policies import visibility_mutation as visibility
from webhooks.apiserver_policies.bindings import PodCheckPolicy
from webhooks.apiserver_policies.credential_namespaces import (
    BINDING_POLICY,
    binding_refusal,
    binds,
)
from webhooks.apiserver_policies.pod_checks import denial_text, warning_text
from webhooks.offline.state import ClusterState, Result
from webhooks.policies.credential_injection import service_account_name

GPU_VISIBILITY = "gpu-visibility"


def visibility_policy(obj: dict[str, Any], config: Config, result: Result) -> dict[str, Any]:
    """The GPU visibility policy in the API server: the change (enforce), or its record
    (audit), in the webhook's words."""
    if config.mode_of(GPU_VISIBILITY) is PolicyMode.AUDIT:
        would = visibility.would_change(obj, None, config)
        if would:
            result.recorded.append(f"{GPU_VISIBILITY} (audit): {would}")
        return obj
    changed, ops = visibility.changes(obj, None, config)
    result.changes += len(ops)
    return changed


def unseen_binding(
    pod: dict[str, Any], namespace: str, state: ClusterState, config: Config, result: Result
) -> None:
    """A pod the webhook does not see whose ServiceAccount is bound to credentials (a binding
    from before the label's routing, or only in the state reviewed against): it starts without
    them, and the user hears why."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if (annotations.get(config.names.inject_cloud_credentials) or "").strip().lower() == "false":
        return
    name = service_account_name(pod)
    account = state.view.service_account(namespace, name)
    if account is not None and binds(account.annotations, config):
        label = config.names.serviceaccount_credentials_label
        result.warnings.append(
            f'ServiceAccount "{name}" names cloud credentials, but namespace "{namespace}" is '
            f"not labelled {label}=true, so gpu-admission is not asked about this pod: it starts "
            "without them. Ask your platform team to label the namespace"
        )


def admit_service_account(
    obj: dict[str, Any], namespace: str, state: ClusterState, config: Config, result: Result
) -> None:
    """A ServiceAccount's CREATE, as the binding guard judges it (1.36+ base manifests)."""
    label = config.names.serviceaccount_credentials_label
    labels = {label: "true"} if namespace in state.credential_namespaces else {}
    message = binding_refusal(in_namespace_of(obj, namespace), None, labels, config)
    if message is not None:
        guard = PodCheckPolicy(BINDING_POLICY, config.mode_of("cloud-credentials"), ())
        policy_failed(result, guard, message)


def in_namespace_of(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    meta["namespace"] = namespace
    return {**obj, "metadata": meta}


def policy_failed(result: Result, policy: PodCheckPolicy, message: str) -> None:
    """A ValidatingAdmissionPolicy's failed validation, as its binding's actions take it."""
    if policy.mode is PolicyMode.ENFORCE:
        result.allowed = False
        result.denials.append(denial_text(message, policy.name))
    elif policy.mode is PolicyMode.WARN:
        result.warnings.append(warning_text(message, policy.name))
    else:
        result.recorded.append(f"{policy.name} (audit): would refuse: {message}")
