"""Which pods the validating pods webhook must see when the ValidatingAdmissionPolicy runs the
stateless checks: its matchCondition, in CEL for kube-apiserver and in Python for `review`.

Two kinds, no more:
- pods with DRA claims: whether a claim's device is a GPU depends on the claim and its
  DeviceClass, which only the service can look up;
- pods asking for more than 1 of a GPU resource under its plain name (`nvidia.com/gpu`): NVIDIA's
  device plugin advertises a time-sliced or MPS-shared GPU under that name by default, and only
  the nodes' labels say whether it is shared (`policies/gpu_sharing.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.config import GpuConfig
from webhooks.apiserver_policies.cel import cel_string, is_gpu_test
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
