"""Containers whose GPU a scheduler gives (`gpu.schedulers`; gpu_admission/config/schedulers.py):
the pod is the scheduler's (`spec.schedulerName`), carries its mark (an annotation), was not
placed by hand (no `spec.nodeName` when it is created, which would skip the scheduler), and the
container's NVIDIA_VISIBLE_DEVICES (the entry it gets: the last of the name) comes from the
scheduler's ConfigMap of this pod (`valueFrom.configMapKeyRef`, key NVIDIA_VISIBLE_DEVICES, a
name that starts with the pod's ConfigMap annotation and a `-`). The visibility policy leaves
such a container as the scheduler made it; anything else a pod writes there is replaced, as it
is for every container without a GPU. The API server's policy tests the same in CEL
(webhooks/apiserver_policies/visibility_mutation.py, `scheduler_gives_test`); the node agent
counts the share such a container holds (`fraction_held`), and not the pods a scheduler runs to
hold a whole GPU for its fractions (`is_reservation_pod`), so that GPU is held once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.config.model import GpuConfig
from gpu_admission.config.schedulers import SchedulerGpus
from gpu_admission.names import NVIDIA_VISIBLE_DEVICES


def pod_scheduler(
    pod: Mapping[str, Any], gpu: GpuConfig, *, bound: bool = False
) -> SchedulerGpus | None:
    """The scheduler of `gpu.schedulers` this pod asks for its GPU, if it is one's and marked.
    `bound`: the pod is read after it was scheduled (the node agent's), so its nodeName is the
    binder's, not a placement by hand."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName") and not bound:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    for scheduler in gpu.schedulers:
        if spec.get("schedulerName") == scheduler.scheduler_name and any(
            a in annotations for a in scheduler.mark_annotations
        ):
            return scheduler
    return None


def scheduler_gives(
    pod: Mapping[str, Any], container: Mapping[str, Any], gpu: GpuConfig, *, bound: bool = False
) -> bool:
    """Whether the container's NVIDIA_VISIBLE_DEVICES is its scheduler's, for this pod."""
    scheduler = pod_scheduler(pod, gpu, bound=bound)
    if scheduler is None:
        return False
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    prefix = annotations.get(scheduler.config_map_annotation)
    entries = [e for e in container.get("env") or [] if e.get("name") == NVIDIA_VISIBLE_DEVICES]
    if not isinstance(prefix, str) or not entries:
        return False
    source = (entries[-1].get("valueFrom") or {}).get("configMapKeyRef") or {}
    name = source.get("name")
    return (
        source.get("key") == NVIDIA_VISIBLE_DEVICES
        and isinstance(name, str)
        and name.startswith(f"{prefix}-")
    )


def fraction_held(pod: Mapping[str, Any], container: Mapping[str, Any], gpu: GpuConfig) -> float:
    """The share of GPUs a scheduler gave this container (KAI: `gpu-fraction` times
    `gpu-fraction-num-devices`), 0 where none did or the pod says no fraction (`gpu-memory`
    asks for MiB: the GPU's size decides the share, which the pod does not say). Read from a
    pod already on its node (every pod there has a nodeName): one placed there by hand lost the
    scheduler's env when it was created (the visibility policy replaced it)."""
    scheduler = pod_scheduler(pod, gpu, bound=True)
    if scheduler is None or scheduler.fraction_annotation is None:
        return 0.0
    if not scheduler_gives(pod, container, gpu, bound=True):
        return 0.0
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        fraction = float(annotations.get(scheduler.fraction_annotation, ""))
        devices = float(annotations.get(f"{scheduler.fraction_annotation}-num-devices", "1"))
    except ValueError:
        return 0.0
    return fraction * devices if 0 < fraction <= 1 and devices >= 1 else 0.0


def is_reservation_pod(pod: Mapping[str, Any], gpu: GpuConfig) -> bool:
    """Whether the pod is one a scheduler runs to hold a whole GPU for the fractions it shares
    out (`reservation_namespace`; KAI tells its own the same way, by namespace alone: the
    binder's `resource_reservation.go`). Its GPU is the fractions', which count their shares."""
    namespace = (pod.get("metadata") or {}).get("namespace")
    return bool(namespace) and any(
        namespace == scheduler.reservation_namespace for scheduler in gpu.schedulers
    )
