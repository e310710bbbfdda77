"""Which containers of a pod have a GPU: by an extended resource, or through a ResourceClaim.

Dynamic Resource Allocation (resource.k8s.io/v1) hands out GPUs without any `nvidia.com/*`
resource: the pod lists `spec.resourceClaims` (each names a ResourceClaim or a
ResourceClaimTemplate) and a container uses one with `resources.claims: [{name, request?}]`. A
container has a GPU through a claim when a request it uses draws from a GPU DeviceClass
(`gpu.dra` in the config: by class name, or by the driver the class's selectors require); for a
`firstAvailable` request, any alternative that is a GPU class counts, since the allocation may
pick it.

A claim that cannot be resolved (the claim, its template or its DeviceClass does not exist, or the
container names a request the claim lacks) counts as a GPU: hiding the GPUs of a container that
does own one breaks its workload silently, while not hiding them from a container that owns none
changes nothing that the device plugin era did not already allow. Policies say so in a warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpu_admission.cluster.dra import ClaimInfo
from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config, DraConfig
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources


class GpuUse(Enum):
    NONE = "none"
    RESOURCE = "resource"  # a GPU extended resource (DRA-backed ones included, by name)
    CLAIM = "claim"  # a ResourceClaim request that draws from a GPU DeviceClass
    UNRESOLVED = "unresolved"  # a claim that could not be resolved: counted as a GPU

    @property
    def has_gpu(self) -> bool:
        return self is not GpuUse.NONE


@dataclass(frozen=True, slots=True)
class ContainerGpu:
    use: GpuUse
    reason: str = ""  # for UNRESOLVED: what could not be resolved, in a user's words


NO_GPU = ContainerGpu(GpuUse.NONE)
BY_RESOURCE = ContainerGpu(GpuUse.RESOURCE)
BY_CLAIM = ContainerGpu(GpuUse.CLAIM)


def _claim_sources(pod: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The pod's claims by name: ("ResourceClaim" | "ResourceClaimTemplate", object name)."""
    sources = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        if entry.get("resourceClaimName"):
            sources[str(entry["name"])] = ("ResourceClaim", str(entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            template = str(entry["resourceClaimTemplateName"])
            sources[str(entry["name"])] = ("ResourceClaimTemplate", template)
    return sources


def container_claims(ref: ContainerRef) -> list[tuple[str, str]]:
    """(claim name, request) pairs the container uses; request "" means the whole claim."""
    claims = (ref.container.get("resources") or {}).get("claims") or []
    return [
        (str(c["name"]), str(c.get("request") or ""))
        for c in claims
        if isinstance(c, dict) and c.get("name")
    ]


@dataclass
class PodGpus:
    """The GPU containers of one pod, with its claims looked up once."""

    detector: GpuDetector
    pod: Mapping[str, Any]
    namespace: str
    view: ClusterView
    _sources: dict[str, tuple[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self._sources = _claim_sources(self.pod)

    def of(self, ref: ContainerRef) -> ContainerGpu:
        if self.detector.gpus.requests_gpu(ref):
            return BY_RESOURCE
        unresolved = None
        for claim_name, request in container_claims(ref):
            verdict = self._claim(claim_name, request)
            if verdict.use is GpuUse.CLAIM:
                return verdict
            if verdict.use is GpuUse.UNRESOLVED and unresolved is None:
                unresolved = verdict
        return unresolved or NO_GPU

    def _claim(self, claim_name: str, request: str) -> ContainerGpu:
        source = self._sources.get(claim_name)
        if source is None:
            return ContainerGpu(
                GpuUse.UNRESOLVED, f'claim "{claim_name}" is not in spec.resourceClaims'
            )
        kind, name = source
        info = self._lookup(kind, name)
        if info is None:
            return ContainerGpu(
                GpuUse.UNRESOLVED, f'{kind} "{name}" was not found in namespace {self.namespace}'
            )
        classes = info.device_classes(request)
        if classes is None:
            return ContainerGpu(GpuUse.UNRESOLVED, f'{kind} "{name}" has no request "{request}"')
        missing = None
        for device_class in classes:
            gpu = self.detector.is_gpu_class(device_class, self.view)
            if gpu:
                return BY_CLAIM
            if gpu is None and missing is None:
                missing = device_class
        if missing is not None:
            return ContainerGpu(GpuUse.UNRESOLVED, f'DeviceClass "{missing}" was not found')
        return NO_GPU

    def _lookup(self, kind: str, name: str) -> ClaimInfo | None:
        if kind == "ResourceClaim":
            return self.view.resource_claim(self.namespace, name)
        return self.view.resource_claim_template(self.namespace, name)


@dataclass(frozen=True)
class GpuDetector:
    gpus: GpuResources
    classes: frozenset[str]
    drivers: frozenset[str]

    @classmethod
    def from_config(cls, config: Config) -> GpuDetector:
        dra: DraConfig = config.gpu.dra
        return cls(
            GpuResources.from_config(config.gpu),
            frozenset(dra.device_classes),
            frozenset(dra.drivers),
        )

    def is_gpu_class(self, name: str, view: ClusterView) -> bool | None:
        """True/False for a GPU class or not; None when the class is neither configured nor
        known to the view."""
        if name in self.classes:
            return True
        info = view.device_class(name)
        if info is None:
            return None
        return bool(info.drivers & self.drivers)

    def pod(self, pod: Mapping[str, Any], namespace: str, view: ClusterView) -> PodGpus:
        return PodGpus(self, pod, namespace, view)

    def references(
        self, pod: Mapping[str, Any], namespace: str, view: ClusterView | None
    ) -> Iterable[ObjectRef]:
        """The claims and templates the pod's containers use, then (once those are known) the
        DeviceClasses they draw from that the configuration does not name."""
        sources = _claim_sources(pod)
        if not sources:
            return []
        used = {
            claim
            for ref in iter_containers(pod)
            for claim, _ in container_claims(ref)
            if claim in sources
        }
        refs: list[ObjectRef] = []
        for claim in sorted(used):
            kind, name = sources[claim]
            refs.append(ObjectRef(kind, namespace, name))  # type: ignore[arg-type]
            if view is None:
                continue
            info = (
                view.resource_claim(namespace, name)
                if kind == "ResourceClaim"
                else view.resource_claim_template(namespace, name)
            )
            for device_class in (info.device_classes() if info else ()) or ():
                if device_class and device_class not in self.classes:
                    refs.append(ObjectRef("DeviceClass", "", device_class))
        return refs


def unresolved_warning(ref: ContainerRef, gpu: ContainerGpu) -> str:
    return f"{ref.describe}: {gpu.reason}; counted as a GPU container (GPUs not hidden)"
