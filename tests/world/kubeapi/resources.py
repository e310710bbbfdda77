"""The API resources the emulator serves, as discovery describes them."""

from __future__ import annotations

from dataclasses import dataclass

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    # Kinds whose metadata.generation tracks spec changes (others have no generation at all).
    has_generation: bool = False
    categories: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key: one bucket per group/resource."""
        return f"{self.group}/{self.plural}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "namespaces", "namespace", "Namespace", False, ("status",), ("ns",)),
    Resource("", "v1", "nodes", "node", "Node", False, ("status",), ("no",)),
    Resource(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("status", "ephemeralcontainers", "binding", "log"),
        ("po",),
        has_generation=True,
        categories=("all",),
    ),
    Resource("", "v1", "secrets", "secret", "Secret", True),
    Resource(
        "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("token",), ("sa",)
    ),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, (), ("cm",)),
    Resource("", "v1", "events", "event", "Event", True, (), ("ev",)),
    Resource(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        True,
        ("status",),
        ("pvc",),
    ),
    Resource("events.k8s.io", "v1", "events", "event", "Event", True, (), ("ev",)),
    Resource("batch", "v1", "jobs", "job", "Job", True, ("status",), (), True, categories=("all",)),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    Resource(
        "resource.k8s.io",
        "v1",
        "deviceclasses",
        "deviceclass",
        "DeviceClass",
        False,
        has_generation=True,
    ),
    Resource(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "resourceclaim",
        "ResourceClaim",
        True,
        ("status",),
    ),
    Resource(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        "ResourceClaimTemplate",
        True,
    ),
    Resource(
        "storage.k8s.io", "v1", "storageclasses", "storageclass", "StorageClass", False, (), ("sc",)
    ),
    # The external-snapshotter CRDs (custom resources always have a generation).
    Resource(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshots",
        "volumesnapshot",
        "VolumeSnapshot",
        True,
        ("status",),
        ("vs",),
        has_generation=True,
    ),
    Resource(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        "volumesnapshotclass",
        "VolumeSnapshotClass",
        False,
        (),
        ("vsclass", "vsclasses"),
        has_generation=True,
    ),
    Resource(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotcontents",
        "volumesnapshotcontent",
        "VolumeSnapshotContent",
        False,
        ("status",),
        ("vsc", "vscs"),
        has_generation=True,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        False,
        has_generation=True,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        "ValidatingAdmissionPolicy",
        False,
        ("status",),
        has_generation=True,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        "ValidatingAdmissionPolicyBinding",
        False,
        has_generation=True,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        False,
        has_generation=True,
    ),
)

_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def by_plural(plural: str, group: str | None = None) -> Resource:
    """The resource named ``plural`` (core group wins when ``group`` is not given)."""
    candidates = [
        r for r in RESOURCES if r.plural == plural and (group is None or r.group == group)
    ]
    if not candidates:
        raise KeyError(plural)
    candidates.sort(key=lambda r: r.group != "")
    return candidates[0]


def group_versions() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for r in RESOURCES:
        versions = groups.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return groups
