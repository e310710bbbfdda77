"""The ConfigMaps a GPU-sharing scheduler gives its pods' GPUs through, guarded in the API server.

KAI-Scheduler's fraction container takes NVIDIA_VISIBLE_DEVICES from a ConfigMap in the pod's own
namespace (`valueFrom.configMapKeyRef`), which KAI's binder writes when it binds the pod
(gpu_admission/config/schedulers.py). The kubelet reads the value again each time the container
starts, so whoever may edit ConfigMaps in that namespace (the pod's owner, as a rule) could write
`all` there after binding and get every GPU of the node at the next restart; or delete it and
write their own. So, outside exempt namespaces, a ConfigMap may carry that key only as the
scheduler's writers (`gpu.schedulers[].config_map_writers`) left it: anyone else's create with
the key, or update that adds or changes its value, is refused. An update that leaves the value
as it is (labels, other keys) or removes the key is let through: neither widens what a pod sees.

It holds in the env guard's mode (a pod may not choose its GPUs, through its own env or through
a ConfigMap), and only where a scheduler is configured; the layout for servers before 1.30
(no admission policies) has no such guard.
"""

from __future__ import annotations

from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.names import NVIDIA_VISIBLE_DEVICES
from webhooks.apiserver_policies.cel import cel_string
from webhooks.apiserver_policies.pod_checks import exempt_selector

POLICY_NAME = "gpu-admission-scheduler-configmaps"
_KEY = cel_string(NVIDIA_VISIBLE_DEVICES)


def writers(config: Config) -> list[str]:
    """Every scheduler's writers, in the order configured, once each."""
    return list(dict.fromkeys(w for s in config.gpu.schedulers for w in s.config_map_writers))


def message(config: Config) -> str:
    """What a refused writer is told (the same whatever the ConfigMap)."""
    names = ", ".join(s.scheduler_name for s in config.gpu.schedulers)
    return (
        f"this ConfigMap sets {NVIDIA_VISIBLE_DEVICES}: outside a namespace for GPU software only "
        f"the GPU-sharing schedulers ({names}) may write it, since a pod that takes its env from "
        "the ConfigMap sees the GPUs it names at its next start. Remove the key: ask for a GPU "
        "by resource, or for a share through the scheduler's annotation"
    )


def configmap_policy(config: Config) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (bound in the env guard's mode)."""
    allowed = "[" + ", ".join(cel_string(w) for w in writers(config)) + "]"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            # Fail: a ConfigMap that may widen a pod's GPUs must not pass unjudged.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": exempt_selector(config),
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmaps"],
                    }
                ],
            },
            # Only ConfigMaps that carry the key, written by someone else: every other write
            # costs the API server this condition alone.
            "matchConditions": [
                {
                    "name": "sets-the-key",
                    "expression": f"has(object.data) && {_KEY} in object.data",
                },
                {
                    "name": "not-a-scheduler",
                    "expression": f"!(request.userInfo.username in {allowed})",
                },
            ],
            "validations": [
                {
                    "expression": (
                        f"request.operation == 'UPDATE' && has(oldObject.data) && "
                        f"{_KEY} in oldObject.data && oldObject.data[{_KEY}] == object.data[{_KEY}]"
                    ),
                    "message": message(config),
                    "reason": "Forbidden",
                }
            ],
        },
    }


def refuses(old: dict[str, Any] | None, new: dict[str, Any], username: str, config: Config) -> bool:
    """The policy in Python: whether a write of `new` (over `old`, None on create) by
    `username` is refused (in an enforced, not exempt, namespace)."""
    if not config.gpu.schedulers or username in writers(config):
        return False
    data = new.get("data") or {}
    if NVIDIA_VISIBLE_DEVICES not in data:
        return False
    before = (old or {}).get("data") or {}
    return old is None or before.get(NVIDIA_VISIBLE_DEVICES) != data[NVIDIA_VISIBLE_DEVICES]
