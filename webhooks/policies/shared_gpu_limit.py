"""Shared-GPU limit: at most 1 of a time-sliced GPU resource per container.

Time-sliced replicas are the same physical GPU handed out several times. Two of them give a
container no more compute (they are time-sliced against each other) and the same memory, so
asking for more than one only takes a slot from someone else.
"""

from __future__ import annotations

from gpu_admission.cluster.view import ClusterView
from gpu_admission.config import Config, GpuConfig
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.quantity import is_int64, parse_quantity
from webhooks.policy import Scope, ValidatingPolicy
from webhooks.review import AdmissionRequest, Verdict


def _shown(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _problem(ref: ContainerRef, name: str, where: str, raw: object, whole: str) -> str | None:
    # The same checks, in the same order and words, as the ValidatingAdmissionPolicy's CEL
    # (webhooks/admission_policy.py): isQuantity(), then compareTo(quantity('1')) > 0, then
    # isInteger() (Go's AsInt64: whole and within int64). The value is shown as the API holds it.
    quantity = parse_quantity(raw)
    if quantity is None:
        return (
            f"{ref.describe} has {name}: {_shown(raw)} in {where}, which is not a quantity; "
            f"set it to 1"
        )
    if quantity > 1:
        return (
            f"{ref.describe} asks for {raw} of {name} in {where}: time-sliced replicas of a "
            f"GPU give no proportional compute (they take turns on the same GPU and share its "
            f"memory), so request 1 {name}, or a whole GPU with {whole}"
        )
    if not is_int64(quantity):
        return (
            f"{ref.describe} asks for {_shown(raw)} of {name} in {where}, which is not a whole "
            f"number: a GPU replica cannot be split; request 1 {name}, or a whole GPU with {whole}"
        )
    return None


def container_problems(ref: ContainerRef, gpus: GpuResources, config: GpuConfig) -> list[str]:
    """What is wrong with one container's shared-GPU requests and limits, one line each."""
    resources = ref.container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    problems = []
    for name in gpus.shared_names(ref.resource_names()):
        values = {field: v.get(name) for field, v in (("limits", limits), ("requests", requests))}
        if values["limits"] is not None and values["limits"] == values["requests"]:
            # The API server copies extended-resource limits into requests: report once.
            values = {"limits and requests": values["limits"]}
        whole = config.base_resource_name(name)
        for where, raw in values.items():
            problem = None if raw is None else _problem(ref, name, where, raw, whole)
            if problem:
                problems.append(problem)
    return problems


def policies(config: Config) -> list[ValidatingPolicy]:
    gpus = GpuResources.from_config(config.gpu)

    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        problems: list[str] = []
        for ref in iter_containers(request.object):
            problems.extend(container_problems(ref, gpus, config.gpu))
        return Verdict.deny("; ".join(problems)) if problems else Verdict.allow()

    return [ValidatingPolicy("shared-gpu-limit", Scope("Pod"), validate)]
