"""Shared-GPU limit: at most 1 of a shared GPU resource per container.

Time-sliced or MPS replicas are the same physical GPU handed out several times. Two of them give
a container no more compute (they take turns on the same GPU, or split its SMs) and the same
memory, so asking for more than one only takes a slot from someone else.

A renamed resource (`nvidia.com/gpu.shared`) is shared wherever it is offered: its check needs
the pod alone and also runs in the API server (the ValidatingAdmissionPolicy). An unrenamed one
(`nvidia.com/gpu`, as NVIDIA's device plugin advertises a shared GPU by default) is shared only on
nodes whose labels say so (`gpu_sharing`): more than 1 is refused when every candidate node
shares it, and warned about when only some do, since the same request is right on a node that
gives whole GPUs.
"""

from __future__ import annotations

from gpu_admission import names as n
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.model import Config, GpuConfig
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.gpu_sharing import RequestSharing, classify, label_count
from webhooks.policies.interface import Scope, ValidatingPolicy
from webhooks.policies.node_match import Placement
from webhooks.policies.quantity import is_int64, parse_quantity


def _shown(value: object) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _problem(ref: ContainerRef, name: str, where: str, raw: object, whole: str) -> str | None:
    # The same checks, in the same order and words, as the ValidatingAdmissionPolicy's CEL
    # (webhooks/apiserver_policies/pod_checks.py): isQuantity(), then compareTo(quantity('1')) > 0,
    # then isInteger() (Go's AsInt64: whole and within int64). The value is shown as the API holds
    # it.
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


def over_one(ref: ContainerRef, name: str) -> str | None:
    """The container's count of `name` when it is more than 1 (limits first: the API server
    makes an extended resource's request equal to its limit)."""
    request, limit = ref.resource_quantity(name)
    raw = limit if limit is not None else request
    quantity = parse_quantity(raw)
    return raw if quantity is not None and quantity > 1 else None


def _replicas(sharing: RequestSharing, gpu: GpuConfig) -> str:
    base = gpu.base_resource_name(sharing.resource)
    counts = {
        label_count(node.labels.get(base + n.GPU_REPLICAS_LABEL_SUFFIX)) for node in sharing.shared
    }
    known = sorted(c for c in counts if c)
    if not known:
        return "replicas per GPU unknown"
    if len(known) == 1:
        return f"{known[0]} replicas per GPU"
    return f"{known[0]} to {known[-1]} replicas per GPU"


def node_shared_problem(
    ref: ContainerRef, name: str, raw: str, sharing: RequestSharing, gpu: GpuConfig
) -> str:
    return (
        f"{ref.describe} asks for {raw} of {name}, and every node it can run on shares that GPU "
        f"({sharing.described}, {_replicas(sharing, gpu)}): the replicas take turns on one GPU "
        f"(or split its SMs) and share its memory, so {raw} give no more compute than 1; request "
        f"1 {name}, or run the pod on nodes that give whole GPUs"
    )


def node_shared_warning(ref: ContainerRef, name: str, raw: str, sharing: RequestSharing) -> str:
    total = len(sharing.shared) + len(sharing.exclusive)
    return (
        f"{ref.describe} asks for {raw} of {name}: {len(sharing.shared)} of its {total} "
        f"candidate nodes share that GPU ({sharing.described}), where {raw} give no more compute "
        "than 1; keep the pod on nodes that give whole GPUs, or request 1"
    )


def policies(config: Config) -> list[ValidatingPolicy]:
    gpus = GpuResources.from_config(config.gpu)

    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        problems: list[str] = []
        warnings: list[str] = []
        placement: Placement | None = None
        for ref in iter_containers(request.object):
            problems.extend(container_problems(ref, gpus, config.gpu))
            for name in gpus.gpu_names(ref.resource_names()):
                raw = None if gpus.is_shared(name) else over_one(ref, name)
                if raw is None:
                    continue
                placement = placement or Placement.of(request.object.get("spec") or {})
                sharing = classify(name, placement.candidates(view), config.gpu)
                if sharing.everywhere:
                    problems.append(node_shared_problem(ref, name, str(raw), sharing, config.gpu))
                elif sharing.mixed:
                    warnings.append(node_shared_warning(ref, name, str(raw), sharing))
        return Verdict.deny("; ".join(problems)) if problems else Verdict.allow(*warnings)

    return [ValidatingPolicy("shared-gpu-limit", Scope("Pod"), validate)]
