"""Which pods the pods webhooks must see, now that the API server makes the stateless checks and
changes itself: their matchConditions, in CEL for kube-apiserver and in Python for `review`.

The validating webhook sees two kinds of pod, no more:
- pods with DRA claims: whether a claim's device is a GPU depends on the claim and its
  DeviceClass, which only the service can look up;
- pods asking for more than 1 of a GPU resource under its plain name (`nvidia.com/gpu`): NVIDIA's
  device plugin advertises a time-sliced or MPS-shared GPU under that name by default, and only
  the nodes' labels say whether it is shared (`policies/gpu_sharing.py`).

The mutating webhook sees the pods whose admission needs cluster state, no others (every other
pod is admitted by the API server alone, the service up or not):
- a pod that names credential Secrets (`cloud-credentials`): they must exist, of the right type;
- a pod that mounts a PVC (not a loader's own pod): a dataset PVC gates it until loaded, and is
  mounted read-only; so does a debug container added to such a pod (`pods/ephemeralcontainers`);
- a pod with a GPU resource in an init or regular container: whether it is shared, and its share
  of the memory, depends on the nodes' labels;
- a pod with DRA claims: whether a container's claim is a GPU depends on the claim;
- every pod of a namespace labelled for ServiceAccount-bound credentials (`credential_namespaces`:
  a matchCondition cannot read a ServiceAccount): an entry of its own, by namespaceSelector.

And never a pod the ValidatingAdmissionPolicy refuses without state (two shared GPUs, a GPU
container that sets `NVIDIA_VISIBLE_DEVICES`), for the checks it enforces: that one is refused in
the policy's words even while the service is down, never with "failed calling webhook". (The
policy judges the pod as the webhooks leave it; they never touch what it reads: a GPU container's
guarded env names, or any resources.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.config.model import Config, GpuConfig
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.apiserver_policies.cel import cel_string, is_gpu_test, requests_gpu_test
from webhooks.apiserver_policies.credential_namespaces import binds
from webhooks.apiserver_policies.pod_checks import (
    POD_CHECKS,
    object_lists,
    policy_denial,
    refused_condition,
)
from webhooks.policies.containers import iter_containers
from webhooks.policies.quantity import parse_quantity

CLAIM_POD_CONDITION = (
    "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0) || "
    + " || ".join(
        f"(has(object.spec.{lst}) && object.spec.{lst}.exists(c, has(c.resources) && "
        "has(c.resources.claims) && size(c.resources.claims) > 0))"
        for lst in ("initContainers", "containers", "ephemeralContainers")
    )
)


def _plain_gpu_over_one(field: str, gpu: GpuConfig) -> str:
    renamed = " || ".join(f"n.endsWith({cel_string(s)})" for s in gpu.shared_suffixes)
    values = f"c.resources.{field}"
    return (
        f"(has({values}) && {values}.exists(n, {is_gpu_test('n', gpu)} && !({renamed}) && "
        f"isQuantity({values}[n]) && quantity({values}[n]).compareTo(quantity('1')) > 0))"
    )


def webhook_condition(gpu: GpuConfig) -> str:
    """The pods webhook's matchCondition for this GPU configuration."""
    asks = " || ".join(_plain_gpu_over_one(f, gpu) for f in ("limits", "requests"))
    plain = " || ".join(
        f"(has(object.spec.{lst}) && object.spec.{lst}.exists(c, has(c.resources) && ({asks})))"
        for lst in ("initContainers", "containers")  # ephemeral containers have no resources
    )
    return f"{CLAIM_POD_CONDITION} || {plain}"


def has_resource_claims(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    return any((ref.container.get("resources") or {}).get("claims") for ref in iter_containers(pod))


def webhook_sees(pod: Mapping[str, Any], gpu: GpuConfig) -> bool:
    """`webhook_condition` in Python: whether the validating webhook is called for the pod."""
    if has_resource_claims(pod):
        return True
    for ref in iter_containers(pod, ("initContainers", "containers")):
        resources = ref.container.get("resources") or {}
        for field in ("limits", "requests"):
            values = resources.get(field) or {}
            for name, value in values.items() if isinstance(values, Mapping) else ():
                if gpu.is_gpu_resource(name) and not gpu.is_shared_resource(name):
                    quantity = parse_quantity(value)
                    if quantity is not None and quantity > 1:
                        return True
    return False


# -- the mutating webhook ---------------------------------------------------------------------


def _annotation_names(key: str) -> str:
    """CEL true when the pod's annotation `key` names any Secret (comma-separated)."""
    at = cel_string(key)
    return (
        f"(has(object.metadata.annotations) && {at} in object.metadata.annotations && "
        f"object.metadata.annotations[{at}].split(',').exists(n, n.trim() != ''))"
    )


def _label_is(key: str, value: str) -> str:
    at = cel_string(key)
    return (
        f"(has(object.metadata.labels) && {at} in object.metadata.labels && "
        f"object.metadata.labels[{at}] == {cel_string(value)})"
    )


MOUNTS_A_PVC = (
    "(has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.persistentVolumeClaim)))"
)


def needs_state_condition(config: Config) -> str:
    """CEL true for the pods whose admission needs cluster state (the module's list)."""
    names = config.names
    gpu = " || ".join(
        # GPU resources alone: a companion (HAMi's memory) needs no state of the webhook's.
        f"{object_lists(lst)}.exists(c, {requests_gpu_test(config.gpu, companions=False)})"
        for lst in ("initContainers", "containers")
    )
    loader = _label_is(names.data_load_label, "true")
    created = (
        f"{_annotation_names(names.cloud_credentials)} || ({MOUNTS_A_PVC} && !{loader}) || "
        f"{gpu} || {CLAIM_POD_CONDITION}"
    )
    return f"request.operation == 'CREATE' ? ({created}) : {MOUNTS_A_PVC}"


def enforced_checks(config: Config) -> tuple[str, ...]:
    """The stateless pod checks the ValidatingAdmissionPolicy enforces (refuses for)."""
    return tuple(c for c in POD_CHECKS if config.mode_of(c) is PolicyMode.ENFORCE)


def checks_pass_condition(config: Config) -> str | None:
    """CEL true when the enforced stateless checks pass (None: none is enforced): a pod they
    refuse is left to the policy, whose own condition this negates."""
    checks = enforced_checks(config)
    if not checks:
        return None
    return f"!({refused_condition(config, checks)})"


NOT_A_MIRROR_POD = (
    "!has(object.metadata.annotations) || "
    "!('kubernetes.io/config.mirror' in object.metadata.annotations)"
)


def mutating_conditions(config: Config, every_pod: bool = False) -> list[dict[str, str]]:
    """The pods mutating webhook's matchConditions (all must hold): `every_pod` for the entry
    of the namespaces labelled for ServiceAccount-bound credentials."""
    conditions = [{"name": "not-a-mirror-pod", "expression": NOT_A_MIRROR_POD}]
    passing = checks_pass_condition(config)
    if not every_pod:
        # One condition, so that the checks (the costlier part) run only for the pods that need
        # state: kube-apiserver evaluates every condition of a webhook for every request.
        needs = needs_state_condition(config)
        expression = needs if passing is None else f"({needs}) && ({passing})"
        conditions.append({"name": "needs-cluster-state", "expression": expression})
    elif passing is not None:
        conditions.append({"name": "not-refused-by-the-policy", "expression": passing})
    return conditions


def _mounts_a_pvc(pod: Mapping[str, Any]) -> bool:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return any(isinstance(v, Mapping) and "persistentVolumeClaim" in v for v in volumes)


def needs_state(pod: Mapping[str, Any], operation: str, config: Config) -> bool:
    """`needs_state_condition` in Python."""
    if operation != "CREATE":
        return _mounts_a_pvc(pod)
    names = config.names
    meta = pod.get("metadata") or {}
    if binds(meta.get("annotations"), config):  # the same reading as a ServiceAccount's
        return True
    loader = (meta.get("labels") or {}).get(names.data_load_label) == "true"
    if _mounts_a_pvc(pod) and not loader:
        return True
    for ref in iter_containers(pod, ("initContainers", "containers")):
        if any(config.gpu.is_gpu_resource(n) for n in ref.resource_names()):
            return True
    return has_resource_claims(pod)


def mutating_webhook_sees(
    pod: Mapping[str, Any], operation: str, namespace_labelled: bool, config: Config
) -> bool:
    """Whether the pods mutating webhook is called for the pod (a mirror pod never), as the
    base manifests route it: `namespace_labelled` for ServiceAccount-bound credentials."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if "kubernetes.io/config.mirror" in annotations:
        return False
    if not namespace_labelled and not needs_state(pod, operation, config):
        return False
    checks = enforced_checks(config)
    return operation != "CREATE" or not checks or policy_denial(pod, config, checks) is None


POD_MUTATIONS = "pods.mutate.gpu-admission.io"
CREDENTIAL_NAMESPACE_POD_MUTATIONS = "serviceaccount-pods.mutate.gpu-admission.io"


def _namespaces(config: Config, labelled: bool) -> dict[str, Any]:
    """Not exempt, and labelled (or not) for ServiceAccount-bound credentials."""
    label = config.names.serviceaccount_credentials_label
    return {
        "matchExpressions": [
            {"key": config.exempt_label, "operator": "NotIn", "values": ["true"]},
            {"key": label, "operator": "In" if labelled else "NotIn", "values": ["true"]},
        ]
    }


def mutating_pod_webhooks(config: Config) -> list[dict[str, Any]]:
    """Where the pods mutating webhook's two entries differ: which namespaces, which pods.
    Every other field of theirs is in manifests/base/webhooks.yaml."""
    return [
        {
            "name": POD_MUTATIONS,
            "namespaceSelector": _namespaces(config, labelled=False),
            "matchConditions": mutating_conditions(config),
        },
        {
            "name": CREDENTIAL_NAMESPACE_POD_MUTATIONS,
            "namespaceSelector": _namespaces(config, labelled=True),
            "matchConditions": mutating_conditions(config, every_pod=True),
        },
    ]
