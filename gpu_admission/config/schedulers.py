"""`gpu.schedulers`: schedulers that hand out GPUs themselves, without a GPU resource, and how
their pods are marked. A pod of such a scheduler that carries its mark keeps the visibility the
scheduler gives it; the same shape under any other scheduler is hidden as every CPU-only pod is.

The default is NVIDIA KAI-Scheduler's GPU sharing, from its source (kai-scheduler/KAI-Scheduler):
a pod asks for a fraction with the annotation `gpu-fraction` (or `gpu-memory`) and
`schedulerName: kai-scheduler`, and no GPU resource; KAI's admission webhook names the pod's
ConfigMaps in the annotation `runai/shared-gpu-configmap` and gives the fraction's container
`NVIDIA_VISIBLE_DEVICES` from `valueFrom.configMapKeyRef` (key `NVIDIA_VISIBLE_DEVICES`, ConfigMap
`<annotation>-<index>`, `-i<index>` for an init container): `pkg/admission/webhook/v1alpha2/
gpusharing/gpu_sharing.go`, `pkg/binder/common/gpu_access.go` (`AddGPUSharingEnvVars`),
`pkg/binder/common/gpusharingconfigmap/config_map.go`; its binder writes the GPU's UUID into that
ConfigMap when it binds the pod (`gpu_access.go`), and `GPU_PORTION` beside it. For each GPU it
shares out, its binder runs a reservation pod in `kai-resource-reservation` that asks for the
whole `nvidia.com/gpu` on the fractions' behalf, and tells it by that namespace
(`pkg/binder/binding/resourcereservation/resource_reservation.go`): the node agent holds that GPU
by the fractions only. The binder creates the ConfigMaps empty and then merge-patches the key
in, as `system:serviceaccount:<its namespace>:binder` (`pkg/operator/operands/binder/
resources.go`, `pkg/binder/plugins/gpusharing/gpu_sharing.go`); nothing of KAI's changes the
value once the pod is bound.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpu_admission.config.base import _Model


class SchedulerGpus(_Model):
    scheduler_name: str
    """`spec.schedulerName` of the pods it places."""
    mark_annotations: Annotated[list[str], Field(min_length=1)]
    """A pod that carries one of these annotations asks the scheduler for its GPU."""
    config_map_annotation: str
    """The pod annotation whose value, and a `-`, starts the name of the ConfigMap the
    scheduler's `NVIDIA_VISIBLE_DEVICES` comes from (`valueFrom.configMapKeyRef`)."""
    fraction_annotation: str | None = None
    """The annotation that holds the share of one GPU the pod asked for (GPUs held, for the
    node agent's GPU-hours); null: not counted."""
    config_map_writers: list[str] = Field(default_factory=list)
    """The users (`request.userInfo.username`) that write NVIDIA_VISIBLE_DEVICES into the pods'
    ConfigMaps: outside exempt namespaces nobody else may set or change that key in any
    ConfigMap, or a pod's owner could widen the GPUs a pod gets from it at its next start. KAI:
    its binder's ServiceAccount in the namespace KAI is installed in (`binder` in
    `kai-scheduler` by default; its Helm release's namespace otherwise)."""
    reservation_namespace: str | None = None
    """The namespace of the pods the scheduler creates to hold a whole GPU for the fractions it
    shares out (KAI's resource reservation pods): the node agent counts the fractions, not the
    reservation, so each GPU is held once; null: none."""


KAI_SCHEDULER = SchedulerGpus(
    scheduler_name="kai-scheduler",
    mark_annotations=["gpu-fraction", "gpu-memory"],
    config_map_annotation="runai/shared-gpu-configmap",
    fraction_annotation="gpu-fraction",
    config_map_writers=["system:serviceaccount:kai-scheduler:binder"],
    reservation_namespace="kai-resource-reservation",
)
