"""The shape of every field a policy reads, per kind: what a Kubernetes object is sure to look like.

A real API server only ever sends objects of these shapes; a direct caller may not (a Pod whose
`env` is a string, whose `containers` is an object). Checking the shape once, while the review is
parsed, lets the policies trust it: such a body is refused with 400 and the path of the first
field that is not Kubernetes-shaped, instead of failing inside a policy as an internal error.

Only the fields some policy reads are typed; everything else passes untouched (unknown fields are
ignored, and the object the policies see is the one decoded, with every field kept). Fields the
API server may leave out or send as null are optional and nullable.
"""

from __future__ import annotations

from typing import Any, TypedDict

Quantity = str | int | float  # the API server sends strings; hand-written reviews may not
StringMap = dict[str, str] | None


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool | None


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    annotations: StringMap
    labels: StringMap
    ownerReferences: list[OwnerReference] | None


class EnvVar(TypedDict, total=False):
    name: str
    value: str | None
    valueFrom: dict[str, Any] | None


class ResourceClaimRef(TypedDict, total=False):
    name: str
    request: str | None


class Resources(TypedDict, total=False):
    limits: dict[str, Quantity] | None
    requests: dict[str, Quantity] | None
    claims: list[ResourceClaimRef] | None


class VolumeMount(TypedDict, total=False):
    name: str
    mountPath: str
    readOnly: bool | None


class Container(TypedDict, total=False):
    name: str
    image: str
    env: list[EnvVar] | None
    envFrom: list[dict[str, Any]] | None
    resources: Resources | None
    volumeMounts: list[VolumeMount] | None


class PvcVolumeSource(TypedDict, total=False):
    claimName: str
    readOnly: bool | None


class Volume(TypedDict, total=False):
    name: str
    persistentVolumeClaim: PvcVolumeSource | None
    projected: dict[str, Any] | None
    secret: dict[str, Any] | None


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str] | None


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement] | None
    matchFields: list[NodeSelectorRequirement] | None


class NodeSelector(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm] | None


class NodeAffinity(TypedDict, total=False):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None


class Affinity(TypedDict, total=False):
    nodeAffinity: NodeAffinity | None


class PodResourceClaim(TypedDict, total=False):
    name: str
    resourceClaimName: str | None
    resourceClaimTemplateName: str | None


class SchedulingGate(TypedDict, total=False):
    name: str


class PodSpec(TypedDict, total=False):
    initContainers: list[Container] | None
    containers: list[Container] | None
    ephemeralContainers: list[Container] | None
    volumes: list[Volume] | None
    nodeName: str | None
    nodeSelector: StringMap
    affinity: Affinity | None
    serviceAccountName: str | None
    schedulingGates: list[SchedulingGate] | None
    resourceClaims: list[PodResourceClaim] | None


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec


class PodTemplate(TypedDict, total=False):
    """A workload's pod template (webhooks.core.workload_kinds): what its pods are made of."""

    metadata: ObjectMeta | None
    spec: PodSpec | None


class Secret(TypedDict, total=False):
    metadata: ObjectMeta
    type: str
    data: StringMap
    stringData: StringMap


class PvcResources(TypedDict, total=False):
    requests: dict[str, Quantity] | None


class PvcSpec(TypedDict, total=False):
    accessModes: list[str] | None
    storageClassName: str | None
    resources: PvcResources | None
    dataSource: dict[str, Any] | None
    dataSourceRef: dict[str, Any] | None


class PersistentVolumeClaim(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PvcSpec


SHAPES: dict[str, type] = {
    "Pod": Pod,
    "Secret": Secret,
    "PersistentVolumeClaim": PersistentVolumeClaim,
}
