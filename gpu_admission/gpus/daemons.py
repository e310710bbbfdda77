"""GPU daemons the visibility policy would blind: a DaemonSet or Deployment whose pods ask for no
GPU, yet want the node's GPUs (NVIDIA's device plugin, gpu-feature-discovery, dcgm-exporter,
the DRA driver, a node agent of one's own): they set NVIDIA_VISIBLE_DEVICES themselves, or run
privileged under an NVIDIA runtime class and take it from their image (dcgm-exporter's and
gpu-feature-discovery's images set `ENV NVIDIA_VISIBLE_DEVICES=all`; the GPU Operator's
manifests set none in the pod). In a namespace that is not exempt, the policy gives their
containers NVIDIA_VISIBLE_DEVICES=none: the device plugin then advertises no GPU, the exporter
exports nothing, and nothing says why. The fix is the namespace's exempt label.

The records here are what the install's self-check keeps of each workload (only those with such
a container; the rest are dropped as they are listed) and what it finds; the judgement, which
containers the policy hides, is the policy's own
(webhooks/apiserver_policies/blinded_daemons.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.names import NVIDIA_VISIBLE_DEVICES

DAEMON_BLINDED = "GPUDaemonBlinded"  # the Warning Event's reason, on the workload
# The workload kinds whose templates are read: (kind, apiVersion).
WORKLOAD_KINDS = (("DaemonSet", "apps/v1"), ("Deployment", "apps/v1"))
# Values that already give no GPU: nothing to take away.
NO_GPU_VALUES = frozenset({"none", "void", ""})


@dataclass(frozen=True)
class WorkloadRecord:
    """A workload's pod template, trimmed to what the judgement reads."""

    kind: str
    namespace: str
    name: str
    uid: str
    template: dict[str, Any]  # {"metadata": {...}, "spec": {containers: [...], ...}}


@dataclass(frozen=True)
class DaemonFinding:
    kind: str
    namespace: str
    name: str
    uid: str
    containers: tuple[str, ...]
    how: str  # what it does to want the GPUs
    label: str  # the namespace label that exempts it
    enforced: bool = True  # gpu-visibility enforces: blinded now, not only once it does

    @property
    def fix(self) -> str:
        return f"kubectl label namespace {self.namespace} {self.label}=true"

    @property
    def involved(self) -> dict[str, str]:
        return {
            "apiVersion": "apps/v1",
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }

    @property
    def message(self) -> str:
        blinded = "gives" if self.enforced else "would give (once it enforces)"
        return (
            f"{self.kind} {self.namespace}/{self.name} asks for no GPU but {self.how} "
            f"(container {', '.join(self.containers)}): the GPU-visibility policy {blinded} its "
            f"containers NVIDIA_VISIBLE_DEVICES=none, and it sees no GPU. A GPU daemon's "
            f"namespace is exempted by its administrators. Fix: {self.fix}"
        )


def _privileged(container: Mapping[str, Any]) -> bool:
    """Privileged as the NVIDIA container toolkit counts it: CAP_SYS_ADMIN in the bounding set
    (nvidia-container-toolkit's `isPrivileged`), which `privileged: true` gives, and so does
    adding SYS_ADMIN. Such a container is given what its NVIDIA_VISIBLE_DEVICES asks for even
    where the toolkit ignores the variable for other containers."""
    context = container.get("securityContext") or {}
    added = {
        str(c).upper().removeprefix("CAP_")
        for c in (context.get("capabilities") or {}).get("add") or []
    }
    return bool(context.get("privileged")) or "SYS_ADMIN" in added


def _trimmed_container(container: Mapping[str, Any]) -> dict[str, Any]:
    env = [e for e in container.get("env") or [] if e.get("name") == NVIDIA_VISIBLE_DEVICES]
    privileged = _privileged(container)
    trimmed: dict[str, Any] = {"name": container.get("name", "")}
    if container.get("resources"):
        trimmed["resources"] = container["resources"]
    if env:
        trimmed["env"] = env
    if privileged:
        trimmed["securityContext"] = {"privileged": True}
    return trimmed


def wants_gpus(container: Mapping[str, Any], runtime_class: str | None) -> str | None:
    """How a container shows it wants the node's GPUs, or None."""
    entries = [e for e in container.get("env") or [] if e.get("name") == NVIDIA_VISIBLE_DEVICES]
    if entries:
        last = entries[-1]
        if "valueFrom" in last:
            return f"sets {NVIDIA_VISIBLE_DEVICES} (from valueFrom)"
        if str(last.get("value", "")).strip().lower() not in NO_GPU_VALUES:
            return f"sets {NVIDIA_VISIBLE_DEVICES}={last.get('value')}"
        return None
    if runtime_class and _privileged(container):
        return (
            f"runs privileged with runtimeClassName {runtime_class} (its image sets "
            f"{NVIDIA_VISIBLE_DEVICES})"
        )
    return None


def workload_record(kind: str) -> Callable[[Mapping[str, Any]], WorkloadRecord | None]:
    """The informer's transform: a workload with a container that wants GPUs, trimmed; None
    (dropped) for every other."""

    def record(obj: Mapping[str, Any]) -> WorkloadRecord | None:
        meta = obj.get("metadata") or {}
        template = (obj.get("spec") or {}).get("template") or {}
        spec = template.get("spec") or {}
        runtime = spec.get("runtimeClassName")
        lists = {
            key: [_trimmed_container(c) for c in spec.get(key) or []]
            for key in ("initContainers", "containers")
        }
        if not any(wants_gpus(c, runtime) for cs in lists.values() for c in cs):
            return None
        trimmed_spec: dict[str, Any] = {k: v for k, v in lists.items() if v}
        for key in ("runtimeClassName", "schedulerName", "nodeName"):
            if spec.get(key):
                trimmed_spec[key] = spec[key]
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        return WorkloadRecord(
            kind,
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            {"metadata": {"annotations": dict(annotations)}, "spec": trimmed_spec},
        )

    return record
