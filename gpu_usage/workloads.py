"""The workload a pod belongs to, and what it holds of the node's GPUs (pure).

The workload is the pod's controller followed up as far as the pod itself tells, without
reading the owners (the agent may list pods, nothing else):
- a ReplicaSet named `<deployment>-<pod-template-hash>` (the hash is the pod's label): the
  Deployment;
- a Job whose pod carries `jobset.sigs.k8s.io/jobset-name` (JobSet labels its pods so): the
  JobSet;
- any other controller (Job, StatefulSet, DaemonSet, LeaderWorkerSet's, an operator's kind):
  itself;
- no controller: the pod alone.

What a container holds of the GPUs, for GPU-hours: a whole GPU counts 1, a time-sliced replica
1/replicas (`GPU_SHARED_REPLICAS`, which the memory-share policy writes into its env; without
it, the replica counts as a whole GPU, which is what it may use), a MIG slice `mig-<g>g.*`
g/slices of its GPU (`mig_slices`: 7 on an A100, H100, H200, B200; 4 on an A30 and an RTX PRO
6000, as the GPU Operator's MIG profiles have them), a GPU-sharing scheduler's fraction (KAI's
`gpu-fraction`) its share (gpu_admission/gpus/scheduler_gpus.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_admission.config.model import GpuConfig
from gpu_admission.names import GPU_SHARED_REPLICAS

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
TEMPLATE_HASH_LABEL = "pod-template-hash"
MIG_SLICES = 7
# GPUs of fewer compute slices, by a word of NVML's device name (the GPU Operator's default
# mig-parted profiles: "A30-24GB all-1g.6gb: 4", "RTX-PRO-6000-96GB all-1g.24gb.gfx: 4").
_FOUR_SLICES = ("A30", "RTX PRO 6000")
_MIG = re.compile(r"mig-(\d+)g\.")


def workload_of(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the pod's workload."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is None:
        return "Pod", str(meta.get("name", ""))
    kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
    template_hash = labels.get(TEMPLATE_HASH_LABEL)
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        return "Deployment", name.removesuffix(f"-{template_hash}")
    if kind == "Job" and labels.get(JOBSET_NAME_LABEL):
        return "JobSet", str(labels[JOBSET_NAME_LABEL])
    return kind, name


def _quantity(value: Any) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def mig_slices(models: Iterable[str]) -> int:
    """Compute slices of the node's GPUs, from NVML's names of them (or of their instances)."""
    return 4 if any(word in m for m in models for word in _FOUR_SLICES) else MIG_SLICES


def gpus_held(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    gpu: GpuConfig,
    slices: int = MIG_SLICES,
) -> float:
    """The GPUs a container holds, as GPU-hours count them (see the module's note)."""
    resources = container.get("resources") or {}
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    held = 0.0
    for name, value in asked.items():
        if not gpu.is_gpu_resource(name):
            continue
        count = _quantity(value)
        mig = _MIG.search(name)
        if mig is not None:
            held += count * int(mig.group(1)) / slices
        elif gpu.is_shared_resource(name):
            replicas = _quantity(env.get(GPU_SHARED_REPLICAS, "1")) or 1.0
            held += count / max(1.0, replicas)
        else:
            held += count
    return held
