"""Which webhooks exist and which policies each runs.

The table of webhook paths lives here, once: the HTTPS service routes by it and the offline
`review` command follows it, so both run the same chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from gpu_admission.config.model import Config
from webhooks.core.review import WORKLOAD
from webhooks.policies.interface import MutatingPolicy, PolicySet, ValidatingPolicy


@dataclass(frozen=True)
class Webhook:
    path: str
    kind: str  # the object kind this path reviews
    mutating: bool


WEBHOOKS: tuple[Webhook, ...] = (
    Webhook("/mutate/pods", "Pod", mutating=True),
    Webhook("/validate/pods", "Pod", mutating=False),
    Webhook("/validate/secrets", "Secret", mutating=False),
    Webhook("/mutate/persistentvolumeclaims", "PersistentVolumeClaim", mutating=True),
    Webhook("/validate/persistentvolumeclaims", "PersistentVolumeClaim", mutating=False),
    # Deployments, Jobs, JobSets, ... through their pod templates
    # (webhooks.dispatch.workload_checks).
    Webhook("/validate/workloads", WORKLOAD, mutating=False),
)


def webhook_for(kind: str, mutating: bool) -> Webhook | None:
    for webhook in WEBHOOKS:
        if webhook.kind == kind and webhook.mutating == mutating:
            return webhook
    return None


def build_policy_set(config: Config) -> PolicySet:
    """Every policy, in the order it runs. Order matters for mutating policies only where one
    reads what another wrote; each is reinvocation-safe on its own."""
    from webhooks.dispatch.workload_checks import workload_policies

    modules = _policy_modules()
    policies = [p for module in modules for p in module.policies(config)]
    objects = PolicySet(
        mutating=tuple(p for p in policies if isinstance(p, MutatingPolicy)),
        validating=tuple(p for p in policies if isinstance(p, ValidatingPolicy)),
    )
    # Workloads last: each pod policy's twin judges the pods a workload would make.
    twins = tuple(workload_policies(config, objects))
    return PolicySet(objects.mutating, objects.validating + twins)


def _policy_modules() -> list[ModuleType]:
    # Imported here so that importing the webhook table does not load every policy.
    from webhooks.policies import (
        credential_injection,
        credential_secrets,
        dataset_cache,
        dataset_gate,
        dataset_pvc,
        gpu_env_guard,
        gpu_visibility,
        memory_share,
        shared_gpu_limit,
    )

    return [
        # Pods, mutating: credentials first (they add env and mounts), then GPU visibility and
        # memory share (env per container), then the dataset gate (spec-level changes).
        credential_injection,
        gpu_visibility,
        memory_share,
        dataset_gate,
        # Pods, validating.
        gpu_env_guard,
        shared_gpu_limit,
        # Secrets and PVCs.
        credential_secrets,
        dataset_pvc,
        dataset_cache,  # after the PVC label: it reads only the user's annotations and spec
    ]
