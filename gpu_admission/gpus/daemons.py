"""GPU daemons the visibility policy would blind: a workload (DaemonSet, Deployment, StatefulSet,
Job, CronJob, or a Pod of no workload the self-check reads) whose pods ask for no GPU, yet want
the node's GPUs. NVIDIA's device plugin sets `NVIDIA_VISIBLE_DEVICES=all` in its spec;
gpu-feature-discovery and dcgm-exporter run privileged under the NVIDIA runtime class and take
the variable from their images (`ENV NVIDIA_VISIBLE_DEVICES=all`); the GPU Operator's
`nvidia-cuda-validator` is a bare Pod (owned by the ClusterPolicy) under that class, privileged,
its init container setting `all`. In a namespace that is not exempt the policy gives their
containers NVIDIA_VISIBLE_DEVICES=none: the device plugin then advertises no GPU, the exporter
exports nothing, the validator fails, and nothing says why.

What counts as wanting the GPUs, for a container the policy hides (`wants_gpus`):
- it sets the variable to a GPU (or from `valueFrom`);
- it runs privileged under NVIDIA's runtime (a class of `gpu.nvidia_runtime_classes`, or no
  class where `gpu.nvidia_default_runtime`) and takes the variable from its image: a privileged
  container is given what the variable says wherever the toolkit ignores it for others;
- it runs under an NVIDIA runtime class in a pod that asks for no GPU at all: the toolkit honours
  the image's variable in unprivileged containers too by default
  (`accept-nvidia-visible-devices-envvar-when-unprivileged`, nvidia-container-toolkit
  `api/config/v1/config.go`), and users get GPUs by resource, so such a pod is a GPU daemon;
- it takes its environment from an `envFrom` ConfigMap or Secret that could hold the variable,
  and the workload otherwise looks like a GPU daemon (`looks_like_daemon`). The ConfigMaps are
  not read: that would mean reading every ConfigMap of the cluster (RBAC cannot narrow it), and
  watching them all, for a rare case.
A privileged container under another runtime class (gVisor's `runsc`, Kata) is sandboxed from
the node's devices: privilege alone never counts there.

Two findings, two fixes (`DaemonFinding.daemon`): a GPU daemon (privileged, under an NVIDIA
runtime class, a DaemonSet, or in a namespace with such a daemon) belongs in a namespace for GPU
software, which its administrators exempt; a workload of users' that merely sets the variable is
hidden by design, and asks for a GPU by resource instead. Exempting its namespace would reopen
what the policy closes.

The records here are what the install's self-check keeps of each workload (only those with such
a container; the rest are dropped as they are listed) and what it finds; the judgement, which
containers the policy hides, is the policy's own
(webhooks/apiserver_policies/blinded_daemons.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from gpu_admission.config.model import GpuConfig
from gpu_admission.names import MIRROR_POD_ANNOTATION, NVIDIA_VISIBLE_DEVICES

DAEMON_BLINDED = "GPUDaemonBlinded"  # the Warning Event's reason, on the workload
# The kinds whose pods are judged, with the apiVersion their Events name.
API_VERSIONS = {
    "DaemonSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "Pod": "v1",
}
WORKLOAD_KINDS = tuple(API_VERSIONS)
# An object owned by one of these (group, kind) is judged through its owner, not twice: a Pod
# through its DaemonSet, StatefulSet or Job, or its ReplicaSet's Deployment; a Job through its
# CronJob.
_JUDGED_THROUGH = {
    "Pod": {
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("apps", "StatefulSet"),
        ("batch", "Job"),
    },
    "Job": {("batch", "CronJob")},
}
# Values that already give no GPU: nothing to take away.
NO_GPU_VALUES = frozenset({"none", "void", ""})
_CREATED = ("initContainers", "containers")


class _Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    ownerReferences: Any
    annotations: Any


class _TemplateSpec(TypedDict, total=False):
    template: Any
    jobTemplate: Any


class WorkloadRead(TypedDict, total=False):
    """What a workload is read for (the informer's shape): its status and managedFields are
    never decoded."""

    metadata: _Metadata
    spec: _TemplateSpec


class _PodSpec(TypedDict, total=False):
    initContainers: Any
    containers: Any
    runtimeClassName: Any
    schedulerName: Any


class PodRead(TypedDict, total=False):
    """What a Pod is read for: most Pods are dropped, so only these fields are decoded."""

    metadata: _Metadata
    spec: _PodSpec


def read_shape(kind: str) -> type:
    return PodRead if kind == "Pod" else WorkloadRead


@dataclass(frozen=True)
class WorkloadRecord:
    """A workload's pod template (a Pod's own spec), trimmed to what the judgement reads."""

    kind: str
    namespace: str
    name: str
    uid: str
    template: dict[str, Any]  # {"metadata": {...}, "spec": {containers: [...], ...}}

    @property
    def admitted(self) -> bool:
        """A Pod is read as admitted: its `none` may be the policy's own, the value it replaced
        lost (a template is never changed)."""
        return self.kind == "Pod"

    def looks_like_daemon(self, gpu: GpuConfig) -> bool:
        """Node software by its own signs: a DaemonSet, a pod under an NVIDIA runtime class, or
        a privileged container not sandboxed by another runtime class."""
        spec = self.template.get("spec") or {}
        runtime = spec.get("runtimeClassName")
        if self.kind == "DaemonSet" or (runtime and runtime in gpu.nvidia_runtime_classes):
            return True
        if runtime and not gpu.runs_under_nvidia(runtime):
            return False
        return any(_privileged(c) for key in _CREATED for c in spec.get(key) or [])


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
    daemon: bool = True  # a GPU daemon (exempt its namespace); False: users' (ask by resource)
    resource: str = "nvidia.com/gpu"  # the GPU resource the advice to users names
    hidden: str = "none"  # the value the policy writes (`gpu.hidden_value`)

    @property
    def fix(self) -> str:
        if self.daemon:
            return f"kubectl label namespace {self.namespace} {self.label}=true"
        return (
            f"ask for a GPU by resource (resources.limits {self.resource}: 1) instead of "
            f"setting {NVIDIA_VISIBLE_DEVICES}"
        )

    @property
    def involved(self) -> dict[str, str]:
        return {
            "apiVersion": API_VERSIONS.get(self.kind, "apps/v1"),
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }

    @property
    def message(self) -> str:
        blinded = "gives" if self.enforced else "would give (once it enforces)"
        said = (
            f"{self.kind} {self.namespace}/{self.name} asks for no GPU but {self.how} "
            f"(container {', '.join(self.containers)}): the GPU-visibility policy {blinded} its "
            f"containers {NVIDIA_VISIBLE_DEVICES}={self.hidden}"
        )
        if self.daemon:
            return (
                f"{said}, and it sees no GPU. A GPU daemon runs in a namespace for GPU "
                f"software, which its administrators exempt: move it to one, or label "
                f"{self.namespace} if it holds GPU software only. Fix: {self.fix}"
            )
        return (
            f"{said}, by design: a workload gets GPUs by asking for them, not through the "
            f"variable, and its namespace stays under the policy. Fix: {self.fix}; remove the "
            f"variable if it needs no GPU"
        )


def gpu_resource_example(gpu: GpuConfig) -> str:
    """The GPU resource the advice names: the first configured one that is not a pattern."""
    plain = [p for p in gpu.resource_patterns if not any(ch in p for ch in "*?[")]
    return plain[0] if plain else "nvidia.com/gpu"


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


def _env_sources(container: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The container's `envFrom` entries that could give it NVIDIA_VISIBLE_DEVICES (a prefix
    that the name does not start with cannot), by source name only."""
    kept = []
    for entry in container.get("envFrom") or []:
        prefix = str(entry.get("prefix") or "")
        if not NVIDIA_VISIBLE_DEVICES.startswith(prefix):
            continue
        for key in ("configMapRef", "secretRef"):
            if isinstance(entry.get(key), Mapping):
                kept.append({key: {"name": str(entry[key].get("name", ""))}})
    return kept


def _described_sources(sources: Iterable[Mapping[str, Any]]) -> str:
    words = {"configMapRef": "ConfigMap", "secretRef": "Secret"}
    return ", ".join(f"{words[k]} {v['name']}" for s in sources for k, v in s.items())


def _trimmed_container(container: Mapping[str, Any]) -> dict[str, Any]:
    env = [e for e in container.get("env") or [] if e.get("name") == NVIDIA_VISIBLE_DEVICES]
    trimmed: dict[str, Any] = {"name": container.get("name", "")}
    if container.get("resources"):
        trimmed["resources"] = container["resources"]
    if env:
        trimmed["env"] = env
    sources = _env_sources(container)
    if sources:
        trimmed["envFrom"] = sources
    if _privileged(container):
        trimmed["securityContext"] = {"privileged": True}
    return trimmed


def wants_gpus(
    container: Mapping[str, Any],
    runtime_class: str | None,
    gpu: GpuConfig,
    *,
    pod_asks_for_gpu: bool = False,
    admitted: bool = False,
    daemon_like: bool = False,
) -> str | None:
    """How a container shows it wants the node's GPUs, or None. `pod_asks_for_gpu`: another
    container of its pod does (then it is a sidecar of a GPU workload, not a daemon, unless
    privileged); `admitted`: read from a Pod, whose `none` may be the policy's own;
    `daemon_like`: the workload looks like a GPU daemon (`WorkloadRecord.looks_like_daemon`)."""
    entries = [e for e in container.get("env") or [] if e.get("name") == NVIDIA_VISIBLE_DEVICES]
    if entries:
        last = entries[-1]
        if "valueFrom" in last:
            return f"sets {NVIDIA_VISIBLE_DEVICES} (from valueFrom)"
        if str(last.get("value", "")).strip().lower() not in NO_GPU_VALUES:
            return f"sets {NVIDIA_VISIBLE_DEVICES}={last.get('value')}"
        if not admitted:
            return None  # the workload gives up the GPUs itself
    sources = _described_sources(container.get("envFrom") or [])
    origin = (
        f"{NVIDIA_VISIBLE_DEVICES} from its envFrom {sources} or its image"
        if sources
        else f"its image sets {NVIDIA_VISIBLE_DEVICES}"
    )
    if gpu.runs_under_nvidia(runtime_class) and _privileged(container):
        where = (
            f"with runtimeClassName {runtime_class}"
            if runtime_class
            else "under the nodes' default runtime, NVIDIA's"
        )
        return f"runs privileged {where} ({origin})"
    if runtime_class and runtime_class in gpu.nvidia_runtime_classes and not pod_asks_for_gpu:
        return f"runs with runtimeClassName {runtime_class} ({origin})"
    if sources and daemon_like:
        return f"takes its environment from envFrom {sources} (may set {NVIDIA_VISIBLE_DEVICES})"
    return None


def _judged_through_owner(kind: str, meta: Mapping[str, Any]) -> bool:
    owners = _JUDGED_THROUGH.get(kind)
    if not owners:
        return False
    for ref in meta.get("ownerReferences") or []:
        version = str(ref.get("apiVersion", ""))
        group = version.partition("/")[0] if "/" in version else ""
        if (group, ref.get("kind")) in owners:
            return True
    return False


def _template(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if kind == "Pod":
        return obj
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return spec.get("template") or {}


def asks_through_scheduler(template: Mapping[str, Any], gpu: GpuConfig) -> bool:
    """The pod carries the mark of a scheduler of `gpu.schedulers` (KAI's `gpu-fraction`): it
    asks for a GPU that way, even where no scheduler of theirs gives it one."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return any(a in annotations for s in gpu.schedulers for a in s.mark_annotations)


def _asks_for_gpu(containers: Iterable[Mapping[str, Any]], gpu: GpuConfig) -> bool:
    """A container names a GPU resource or uses a claim: fewer than the policy counts (it also
    counts companions and schedulers' fractions), so what is kept is never less than what is
    named."""
    for container in containers:
        resources = container.get("resources") or {}
        names = set(resources.get("requests") or {}) | set(resources.get("limits") or {})
        if resources.get("claims") or any(gpu.is_gpu_resource(n) for n in names):
            return True
    return False


def workload_record(
    kind: str, gpu: GpuConfig
) -> Callable[[Mapping[str, Any]], WorkloadRecord | None]:
    """The informer's transform: a workload with a container that may want GPUs, trimmed;
    None (dropped) for every other, and for one judged through its owner."""

    def record(obj: Mapping[str, Any]) -> WorkloadRecord | None:
        meta = obj.get("metadata") or {}
        if _judged_through_owner(kind, meta):
            return None
        template = _template(kind, obj)
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        if kind == "Pod" and MIRROR_POD_ANNOTATION in annotations:
            return None  # the kubelet's static pod: the policy never sees it
        spec = template.get("spec") or {}
        lists = {key: [_trimmed_container(c) for c in spec.get(key) or []] for key in _CREATED}
        trimmed_spec: dict[str, Any] = {k: v for k, v in lists.items() if v}
        # A Pod's nodeName is the scheduler's once bound; a template's is a placement by hand.
        kept = ("runtimeClassName", "schedulerName") + (() if kind == "Pod" else ("nodeName",))
        for key in kept:
            if spec.get(key):
                trimmed_spec[key] = spec[key]
        found = WorkloadRecord(
            kind,
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
            {"metadata": {"annotations": dict(annotations)}, "spec": trimmed_spec},
        )
        runtime = spec.get("runtimeClassName")
        asks = asks_through_scheduler(template, gpu) or _asks_for_gpu(
            (c for cs in lists.values() for c in cs), gpu
        )
        daemon_like = found.looks_like_daemon(gpu)
        if not any(
            wants_gpus(
                c,
                runtime,
                gpu,
                pod_asks_for_gpu=asks,
                admitted=found.admitted,
                daemon_like=daemon_like,
            )
            for cs in lists.values()
            for c in cs
        ):
            return None
        return found

    return record
