"""The install checks itself: the admission objects a configuration implies, against the live
ones, and what each finding is called.

Made by the judgement in `webhooks/apiserver_policies/install_expectation.py`, read by the
controller's watch (`controllers/install_check/`) and by `gpu-admission audit`, so the types and
the comparison live here, below both.

The comparison ignores what kube-apiserver defaults or adds. Seen on the real kube-apiserver
1.36.2 for the base's objects: `matchPolicy: Equivalent`, `objectSelector: {}` and
`namespaceSelector: {}` where none was given, `scope: "*"` in each rule, `status`, and every
metadata field but the name; admissionregistration.k8s.io/v1 also defaults `failurePolicy: Fail`,
`timeoutSeconds: 10`, `reinvocationPolicy: Never` and a service port of 443. The service writes
`caBundle` (or cert-manager's CA injector does). A field the configuration does not set counts
as stale only when the live object gives it a value other than its default: an `objectSelector`
someone added narrows routing as surely as an edited condition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpu_admission.gpus.daemons import DaemonFinding, WorkloadRecord

GROUP = "admissionregistration.k8s.io"
VERSION = "v1"


@dataclass(frozen=True)
class AdmissionKind:
    kind: str
    plural: str
    # Whether this kind carries a policy (not a webhook configuration): what older servers lack.
    policy: bool = True


MUTATING_POLICY = "MutatingAdmissionPolicy"
MUTATING_POLICY_BINDING = "MutatingAdmissionPolicyBinding"
VALIDATING_POLICY = "ValidatingAdmissionPolicy"
VALIDATING_POLICY_BINDING = "ValidatingAdmissionPolicyBinding"
MUTATING_WEBHOOKS = "MutatingWebhookConfiguration"
VALIDATING_WEBHOOKS = "ValidatingWebhookConfiguration"

ADMISSION_KINDS = (
    AdmissionKind(MUTATING_POLICY, "mutatingadmissionpolicies"),
    AdmissionKind(MUTATING_POLICY_BINDING, "mutatingadmissionpolicybindings"),
    AdmissionKind(VALIDATING_POLICY, "validatingadmissionpolicies"),
    AdmissionKind(VALIDATING_POLICY_BINDING, "validatingadmissionpolicybindings"),
    AdmissionKind(MUTATING_WEBHOOKS, "mutatingwebhookconfigurations", policy=False),
    AdmissionKind(VALIDATING_WEBHOOKS, "validatingwebhookconfigurations", policy=False),
)


class ObjectState(StrEnum):
    OK = "ok"
    MISSING = "missing"
    STALE = "stale"


# Event reasons (Warning, on the service's Deployment).
OBJECT_MISSING = "AdmissionObjectMissing"
OBJECT_STALE = "AdmissionObjectStale"
CREDENTIALS_NOT_ROUTED = "CredentialsNotRouted"


@dataclass(frozen=True)
class ObjectFinding:
    """One admission object the configuration implies (or one of ours it no longer implies)."""

    kind: str
    name: str
    state: ObjectState
    detail: str = ""  # what differs, or what is missing, and what that leaves undone
    fix: str = ""  # the command that puts it right
    isolation: bool = False  # it carries GPU visibility: CPU-only pods hidden from GPUs

    @property
    def reason(self) -> str:
        return OBJECT_MISSING if self.state is ObjectState.MISSING else OBJECT_STALE

    @property
    def message(self) -> str:
        return f"{self.kind} {self.name} is {self.state}: {self.detail} Fix: {self.fix}"


@dataclass(frozen=True)
class AccountRecord:
    """A ServiceAccount that carries the credentials annotation, as written (the judgement
    reads it as the webhook does)."""

    namespace: str
    name: str
    credentials: str


@dataclass(frozen=True)
class CredentialsFinding:
    """A ServiceAccount bound to credentials in a namespace whose pods are not routed to the
    webhook: its pods start without them."""

    namespace: str
    service_account: str
    secrets: tuple[str, ...]
    label: str  # the namespace label that routes its pods
    running_without: int | None = None  # its running pods that lack them (None: not counted)

    @property
    def fix(self) -> str:
        return f"kubectl label namespace {self.namespace} {self.label}=true --overwrite"

    @property
    def message(self) -> str:
        counted = (
            ""
            if self.running_without is None
            else f" {self.running_without} running pod(s) of it lack them."
        )
        return (
            f"ServiceAccount {self.namespace}/{self.service_account} is bound to cloud "
            f"credentials ({', '.join(self.secrets)}), but namespace {self.namespace} is not "
            f"labelled {self.label}=true, so its pods are not sent to gpu-admission and start "
            f"without them.{counted} Fix: {self.fix}, then restart those pods"
        )


@dataclass(frozen=True)
class LiveAdmission:
    """What the API server holds that the check reads."""

    objects: Mapping[tuple[str, str], Mapping[str, Any]]  # (kind, name) -> the live object
    served: frozenset[str]  # the admission kinds the API server serves
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    accounts: Sequence[AccountRecord] = ()
    # Workloads and bare Pods with a container that wants GPUs (gpu_admission/gpus/daemons.py).
    workloads: Sequence[WorkloadRecord] = ()


@dataclass(frozen=True)
class InstallReport:
    layout: str  # the kustomization the server's version calls for
    objects: tuple[ObjectFinding, ...]
    credentials: tuple[CredentialsFinding, ...] = ()
    daemons: tuple[DaemonFinding, ...] = ()  # GPU daemons the visibility policy blinds
    isolation_by_nodes: bool = False  # the policy is off: the nodes' toolkit isolates

    @property
    def problems(self) -> list[ObjectFinding]:
        return [o for o in self.objects if o.state is not ObjectState.OK]

    @property
    def isolation_enforced(self) -> bool:
        """Whether every object that carries GPU visibility is in place, as configured."""
        carriers = [o for o in self.objects if o.isolation]
        return bool(carriers) and all(o.state is ObjectState.OK for o in carriers)


# -- the comparison ---------------------------------------------------------------------------

# Fields kube-apiserver fills in when they are not given, with the value it fills in.
SERVER_DEFAULTS: dict[str, Any] = {
    "matchPolicy": "Equivalent",
    "objectSelector": {},
    "namespaceSelector": {},
    "scope": "*",
    "failurePolicy": "Fail",
    "timeoutSeconds": 10,
    "reinvocationPolicy": "Never",
    "port": 443,  # a webhook's clientConfig.service
}
# Written by others on purpose, never by the configuration.
WRITTEN_BY_OTHERS = frozenset({"caBundle", "status"})


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _same_text(expected: str, live: str) -> bool:
    # YAML folding may re-space a long CEL expression; its meaning is the same.
    return expected == live or expected.split() == live.split()


def difference(expected: Any, live: Any, path: str = "") -> str | None:
    """The first way `live` differs from `expected`, named by its path, or None. Fields the
    server defaults (at their default), adds or that others write are not differences."""
    if isinstance(expected, Mapping):
        if not isinstance(live, Mapping):
            return f"{path or 'the object'} is {_shown(live)}, expected {_shown(expected)}"
        for key, value in expected.items():
            where = f"{path}.{key}" if path else key
            if key not in live:
                return f"{where} is not set; expected {_shown(value)}"
            found = difference(value, live[key], where)
            if found is not None:
                return found
        for key, value in live.items():
            if key in expected or key in WRITTEN_BY_OTHERS:
                continue
            if key in SERVER_DEFAULTS and value == SERVER_DEFAULTS[key]:
                continue
            where = f"{path}.{key}" if path else key
            return f"{where} is {_shown(value)}, which the configuration does not set"
        return None
    if isinstance(expected, list):
        if not isinstance(live, list):
            return f"{path} is {_shown(live)}, expected {_shown(expected)}"
        for index, (want, have) in enumerate(zip(expected, live, strict=False)):
            found = difference(want, have, f"{path}[{index}]")
            if found is not None:
                return found
        if len(expected) != len(live):
            return f"{path} has {len(live)} item(s), expected {len(expected)}: {_shown(live)}"
        return None
    if isinstance(expected, str) and isinstance(live, str) and _same_text(expected, live):
        return None
    if expected != live:
        return f"{path} is {_shown(live)}, expected {_shown(expected)}"
    return None


def object_difference(expected: Mapping[str, Any], live: Mapping[str, Any]) -> str | None:
    """`difference` over what an admission object says (its spec, or its webhooks): never its
    metadata beyond the name, which the server and kubectl fill."""
    said = {k: v for k, v in expected.items() if k not in ("apiVersion", "kind", "metadata")}
    held = {k: v for k, v in live.items() if k not in ("apiVersion", "kind", "metadata")}
    return difference(said, held)


# -- what is kept of the live objects ---------------------------------------------------------


# Every policy and binding the project names starts so: the only ones the check keeps, and one
# the configuration no longer implies is a leftover that still acts.
OWN_PREFIX = "gpu-admission-"


def is_own(kind: AdmissionKind, name: str, webhook_configuration: str) -> bool:
    """Whether a live admission object is the project's: the webhook configurations by their
    configured name, the policies and bindings by OWN_PREFIX. The cluster's other policies are
    listed with ours (no selector picks by name) but never kept."""
    return name.startswith(OWN_PREFIX) if kind.policy else name == webhook_configuration


def own_record(kind: AdmissionKind, webhook_configuration: str) -> Any:
    """A transform keeping `admission_record` of the project's objects of `kind`, None else."""

    def kept(obj: dict[str, Any]) -> dict[str, Any] | None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        return admission_record(obj) if is_own(kind, name, webhook_configuration) else None

    return kept


def admission_record(obj: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a live admission object: its name, what it says, and who owns it (the
    kind and name of each owner: whether the controller has taken it over). No managedFields,
    no annotations: kubectl's last-applied copy alone would double it."""
    kept = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    metadata = obj.get("metadata") or {}
    kept["metadata"] = {"name": metadata.get("name", "")}
    owners = [
        {"kind": o.get("kind"), "name": o.get("name")}
        for o in metadata.get("ownerReferences") or []
    ]
    if owners:
        kept["metadata"]["ownerReferences"] = owners
    return kept


def owned_by(live: Mapping[str, Any], kind: str, name: str) -> bool:
    """Whether a kept live object names `kind`/`name` among its owners."""
    owners = (live.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == kind and o.get("name") == name for o in owners)


def account_record(credentials_annotation: str) -> Any:
    """A transform keeping a ServiceAccount that carries the credentials annotation; None for
    the rest (most: not kept)."""

    def kept(obj: Mapping[str, Any]) -> AccountRecord | None:
        meta = obj.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(credentials_annotation)
        if value is None:
            return None
        return AccountRecord(str(meta.get("namespace", "")), str(meta.get("name", "")), str(value))

    return kept


def namespace_labels(labels: Sequence[str]) -> Any:
    """A transform keeping only the labels in `labels` of a Namespace (routing reads no other)."""

    def kept(obj: Mapping[str, Any]) -> dict[str, str]:
        held = (obj.get("metadata") or {}).get("labels") or {}
        return {k: str(v) for k, v in held.items() if k in labels}

    return kept
