"""GPU visibility: containers that request no GPU get `NVIDIA_VISIBLE_DEVICES=none` (or `void`:
`gpu.hidden_value`).

CUDA base images set `NVIDIA_VISIBLE_DEVICES=all`, and the NVIDIA container runtime honours it for
any container it starts: without an explicit `none`, a CPU-only container sees every GPU of its
node. An explicit env entry beats both the image default and `envFrom`. GPU containers are left
to the device plugin or the DRA driver, which set what the container sees: a container gets a GPU
by a GPU extended resource or through a ResourceClaim of a GPU DeviceClass (`gpu_claims`). One
whose claim cannot be resolved keeps its GPUs, with a warning and a notice for the metrics. One
whose NVIDIA_VISIBLE_DEVICES a GPU-sharing scheduler gave it keeps it
(`gpu_admission/gpus/scheduler_gpus.py`). One that already says `none` or `void`, once, keeps
what it says: both give no GPU (`is_hidden`), and the GPU Operator's own pods say `void`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config, GpuConfig
from gpu_admission.gpus.scheduler_gpus import scheduler_gives
from gpu_admission.names import HIDDEN_VALUES, MIRROR_POD_ANNOTATION, NVIDIA_VISIBLE_DEVICES
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_claims import GpuDetector, GpuUse, unresolved_warning
from webhooks.policies.interface import MutatingPolicy, Scope

EPHEMERAL_SUBRESOURCE = "ephemeralcontainers"
UNRESOLVED_GPU_CLAIM = "unresolved_gpu_claim"  # the notice, a label of the notices metric


def hidden_entry(gpu: GpuConfig) -> dict[str, str]:
    """The env entry the policy gives a container it hides."""
    return {"name": NVIDIA_VISIBLE_DEVICES, "value": gpu.hidden_value}


def is_hidden(container: Mapping[str, Any]) -> bool:
    """Whether the container already has exactly one entry of the name, a plain value that gives
    no GPU (`none` or `void`): the policy leaves it as it is."""
    entries = [
        e
        for e in container.get("env") or []
        if isinstance(e, Mapping) and e.get("name") == NVIDIA_VISIBLE_DEVICES
    ]
    return (
        len(entries) == 1
        and entries[0].get("valueFrom") is None
        and entries[0].get("value") in HIDDEN_VALUES
    )


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    """Static pods the kubelet mirrors into the API: the API server refuses changes to them."""
    return MIRROR_POD_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def new_ephemeral_containers(request: AdmissionRequest) -> Iterable[ContainerRef]:
    """Ephemeral containers this update adds. Existing ones cannot change (the API server rejects
    the whole update if they do), and were handled when they were added."""
    old = (request.old_object or {}).get("spec") or {}
    existing = {c.get("name") for c in old.get("ephemeralContainers") or []}
    for ref in iter_containers(request.object, lists=("ephemeralContainers",)):
        if ref.name not in existing:
            yield ref


def _hide_gpus(
    request: AdmissionRequest,
    containers: Iterable[ContainerRef],
    patch: Patch,
    detector: GpuDetector,
    view: ClusterView,
    config: Config,
) -> None:
    gpus = detector.pod(request.object, request.namespace, view)
    for ref in containers:
        gpu = gpus.of(ref)
        if gpu.use is GpuUse.NONE:
            if not is_hidden(ref.container) and not scheduler_gives(
                request.object, ref.container, config.gpu
            ):
                patch.set_env(ref.path, hidden_entry(config.gpu))
        elif gpu.use is GpuUse.UNRESOLVED:
            patch.warn(unresolved_warning(ref, gpu))
            patch.notice(UNRESOLVED_GPU_CLAIM)


def policies(config: Config) -> list[MutatingPolicy]:
    if not config.gpu.visibility_policy:
        return []  # left to the nodes' container toolkit (docs/compatibility.md)
    detector = GpuDetector.from_config(config)

    def on_create(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict | None:
        if not is_mirror_pod(request.object):
            _hide_gpus(request, iter_containers(request.object), patch, detector, view, config)
        return None

    def on_ephemeral(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict | None:
        if not is_mirror_pod(request.object):
            _hide_gpus(request, new_ephemeral_containers(request), patch, detector, view, config)
        return None

    def claims(request: AdmissionRequest, view: ClusterView | None) -> Iterable[ObjectRef]:
        return detector.references(request.object, request.namespace, view)

    return [
        MutatingPolicy("gpu-visibility", Scope("Pod"), on_create, references=claims),
        MutatingPolicy(
            "gpu-visibility-ephemeral",
            Scope(
                "Pod",
                operations=frozenset({"UPDATE"}),
                subresources=frozenset({EPHEMERAL_SUBRESOURCE}),
            ),
            on_ephemeral,
        ),
    ]
