"""What should be installed, judged against what is: every admission object the configuration
implies for the API server at hand (exactly what `gpu-admission admission-policy` prints, and the
webhook configurations of `webhook_configurations`), each found ok, missing or stale; and the
ServiceAccounts bound to credentials whose pods the installed routing never sends to the webhook.

Pure: the controller's watch and `gpu-admission audit` bring the live objects
(`gpu_admission.admission.installed.LiveAdmission`) and report what this returns; the leading
controller also writes what it finds missing or stale (`objects`, applied by
controllers/install_check/repair.py), so the kustomization ships none of these objects.

Which layout is expected follows from what the API server serves: the base's objects where
MutatingAdmissionPolicy v1 is served (1.36 and later), `webhook-pod-mutations`' where only
ValidatingAdmissionPolicy v1 is (1.30 to 1.35), `webhook-pod-checks`' before; a layout component
may declare one the server can hold. A pods webhook routed as on 1.36 on an older server is
named as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.admission.installed import (
    MUTATING_POLICY,
    MUTATING_POLICY_BINDING,
    MUTATING_WEBHOOKS,
    OWN_PREFIX,
    VALIDATING_POLICY,
    VALIDATING_POLICY_BINDING,
    VALIDATING_WEBHOOKS,
    CredentialsFinding,
    InstallReport,
    LiveAdmission,
    ObjectFinding,
    ObjectState,
    object_difference,
)
from gpu_admission.config.install import InstallLayout
from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.apiserver_policies.bindings import GPU_VISIBILITY, admission_policy_objects
from webhooks.apiserver_policies.blinded_daemons import blinded_daemons
from webhooks.apiserver_policies.credential_namespaces import BINDING_POLICY, LABEL_POLICY
from webhooks.apiserver_policies.scheduler_configmaps import POLICY_NAME as CONFIGMAP_POLICY
from webhooks.apiserver_policies.visibility_mutation import POLICY_NAME as VISIBILITY_POLICY
from webhooks.apiserver_policies.webhook_configurations import Layout, webhook_configurations
from webhooks.apiserver_policies.webhook_routing import CREDENTIAL_NAMESPACE_POD_MUTATIONS
from webhooks.apiserver_policies.workload_templates import WORKLOAD_POLICY_NAME
from webhooks.policies.credential_injection import parse_names

CREDENTIAL_GUARDS = frozenset({BINDING_POLICY, LABEL_POLICY})


@dataclass(frozen=True)
class Expected:
    obj: dict[str, Any]
    impact: str  # what goes undone while it is missing or stale
    isolation: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.obj["kind"], self.obj["metadata"]["name"]


def _served_layout(served: frozenset[str]) -> Layout:
    if MUTATING_POLICY in served:
        return Layout.BASE
    if VALIDATING_POLICY in served:
        return Layout.POD_MUTATIONS
    return Layout.POD_CHECKS


_NEEDS = (Layout.BASE, Layout.POD_MUTATIONS, Layout.POD_CHECKS)  # most the server must serve first


def layout_of(served: frozenset[str], declared: InstallLayout = InstallLayout.AUTO) -> Layout:
    """The layout the install's components declare, else (auto, or one the server cannot hold:
    the base on 1.35) the one the API server calls for."""
    fits = _served_layout(served)
    if declared is InstallLayout.AUTO:
        return fits
    chosen = LAYOUT_NAMES[str(declared)]
    return chosen if _NEEDS.index(chosen) >= _NEEDS.index(fits) else fits


def _impact(obj: Mapping[str, Any], config: Config, layout: Layout) -> tuple[str, bool]:
    kind, name = obj["kind"], obj["metadata"]["name"]
    hides = config.gpu.visibility_policy and config.mode_of(GPU_VISIBILITY) is PolicyMode.ENFORCE
    if name == VISIBILITY_POLICY:
        if kind in (MUTATING_POLICY, MUTATING_POLICY_BINDING):
            return (
                "CPU-only pods are not given NVIDIA_VISIBLE_DEVICES=none: on a GPU node a "
                "CUDA image sees and can use every GPU.",
                True,
            )
        return "what GPU visibility would change (audit mode) is not recorded.", False
    if name in CREDENTIAL_GUARDS:
        return (
            "ServiceAccounts may be bound to credentials in namespaces whose pods are not sent "
            "to gpu-admission, and such a namespace may lose its label: their pods then start "
            "without their credentials.",
            False,
        )
    if name == CONFIGMAP_POLICY:
        return (
            "anyone who may edit ConfigMaps may set NVIDIA_VISIBLE_DEVICES in the ConfigMap a "
            "GPU-sharing scheduler gives a pod's GPUs through, and widen them at its next start.",
            False,
        )
    if name.startswith(WORKLOAD_POLICY_NAME):
        return "workloads' pod templates are not checked as configured when written.", False
    if kind in (VALIDATING_POLICY, VALIDATING_POLICY_BINDING):
        return (
            "pods that set NVIDIA_VISIBLE_DEVICES beside a GPU, or ask for more than one shared "
            "GPU, are not refused as configured.",
            False,
        )
    if kind == MUTATING_WEBHOOKS:
        if layout is not Layout.BASE:  # there the webhook hides GPUs from every CPU-only pod
            return (
                "pods are not sent to gpu-admission as configured: CPU-only pods may go "
                "without NVIDIA_VISIBLE_DEVICES=none, and pods that need credentials, a "
                "dataset or a memory share without them.",
                hides,
            )
        return (
            "pods that need credentials, a dataset, a memory share or a DRA check are not sent "
            "to gpu-admission as configured, and start without what they need.",
            False,
        )
    return (
        "pods, credential Secrets, dataset PVCs and workloads are not checked as configured.",
        False,
    )


def expected_objects(config: Config, layout: Layout) -> list[Expected]:
    """The policies, bindings and webhook configurations `layout` holds for `config`."""
    objects = admission_policy_objects(config)
    if layout is not Layout.BASE:  # the webhook makes (or records) GPU visibility; no guards
        objects = [
            o
            for o in objects
            if o["kind"] not in (MUTATING_POLICY, MUTATING_POLICY_BINDING)
            and o["metadata"]["name"] not in CREDENTIAL_GUARDS | {VISIBILITY_POLICY}
        ]
    if layout is Layout.POD_CHECKS:  # no admission policies at all
        objects = [
            o for o in objects if o["kind"] not in (VALIDATING_POLICY, VALIDATING_POLICY_BINDING)
        ]
    objects += webhook_configurations(config, layout)
    return [Expected(o, *_impact(o, config, layout)) for o in objects]


# What each finding's fix says: the leading controller owns the project's admission objects
# (controllers/install_check/repair.py) and writes what the comparison finds missing or stale.
APPLIED_BY_CONTROLLER = (
    "the leading gpu-admission-controller applies it from the configuration (server-side apply, "
    "field manager gpu-admission-controller); if it stays, read that controller's log"
)
DELETED_BY_CONTROLLER = (
    "the leading gpu-admission-controller deletes it; if it stays, read that controller's log"
)


def fixes(config: Config, implied: bool, kind: str, name: str) -> str:
    """What a finding's fix says: the controller's own write, or (install.write_admission_objects
    off) the command that applies the printed object, or deletes a leftover (not `implied`)."""
    if config.install.write_admission_objects:
        return APPLIED_BY_CONTROLLER if implied else DELETED_BY_CONTROLLER
    if not implied:
        return f"kubectl delete {kind} {name}"
    flags = " --webhook-configurations" if kind in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS) else ""
    return (
        f"gpu-admission admission-policy --config DIR{flags} | "
        "kubectl apply --server-side --field-manager gpu-admission-controller -f -"
    )


def _with(components: tuple[str, ...]) -> str:
    return f"component{'s' if len(components) > 1 else ''} {', '.join(components)}"


def describe_install(layout: Layout, components: tuple[str, ...]) -> str:
    """How reports name the install: its kustomization, or the base with its components."""
    return f"manifests/ with {_with(components)}" if components else str(layout)


def _layout_name(layout: Layout) -> str:
    return "base" if layout is Layout.BASE else layout.rstrip("/").rpartition("/")[2]


LAYOUT_NAMES = {_layout_name(layout): layout for layout in Layout}


def _base_on_older_server(live: Mapping[str, Any], layout: Layout) -> bool:
    """The base's routing of pods (only those that need cluster state) where the server runs
    no MutatingAdmissionPolicy to hide GPUs from the rest."""
    if layout is Layout.BASE:
        return False
    for entry in live.get("webhooks") or []:
        if entry.get("name") == CREDENTIAL_NAMESPACE_POD_MUTATIONS:
            return True
        names = {c.get("name") for c in entry.get("matchConditions") or []}
        if "needs-cluster-state" in names:
            return True
    return False


def _judged(
    expected: Expected, live: Mapping[str, Any] | None, layout: Layout, config: Config
) -> ObjectFinding:
    kind, name = expected.key
    fix = fixes(config, True, kind, name)
    found = ObjectFinding(kind, name, ObjectState.OK, isolation=expected.isolation)
    if live is None:
        return ObjectFinding(
            kind,
            name,
            ObjectState.MISSING,
            expected.impact,
            fix,
            expected.isolation,
        )
    if kind == MUTATING_WEBHOOKS and _base_on_older_server(live, layout):
        detail = (
            "it routes pods as on an API server that serves MutatingAdmissionPolicy "
            "(admissionregistration.k8s.io/v1, Kubernetes 1.36 and later), and this one serves "
            "none: its pods webhook sees only the pods that need cluster state, and nothing "
            "gives the other CPU-only pods NVIDIA_VISIBLE_DEVICES=none."
        )
        return ObjectFinding(kind, name, ObjectState.STALE, detail, fix, True)
    differs = object_difference(expected.obj, live)
    if differs is None:
        return found
    return ObjectFinding(
        kind,
        name,
        ObjectState.STALE,
        f"{differs}; so {expected.impact}",
        fix,
        expected.isolation,
    )


def _leftovers(
    live: LiveAdmission, expected: set[tuple[str, str]], layout: Layout, config: Config
) -> list[ObjectFinding]:
    kinds = (MUTATING_POLICY, MUTATING_POLICY_BINDING, VALIDATING_POLICY, VALIDATING_POLICY_BINDING)
    found = []
    for kind, name in sorted(live.objects):
        if kind in kinds and name.startswith(OWN_PREFIX) and (kind, name) not in expected:
            detail = (
                "the configuration does not imply it (left from an earlier configuration, or "
                f"from a layout other than {layout}), and the API server still runs it."
            )
            found.append(
                ObjectFinding(
                    kind, name, ObjectState.STALE, detail, fixes(config, False, kind, name)
                )
            )
    return found


def credentials_findings(config: Config, live: LiveAdmission) -> list[CredentialsFinding]:
    """Every ServiceAccount bound to credentials in a namespace the base's routing leaves out
    (not labelled for credentials, not exempt). Their pods are admitted without them."""
    label = config.names.serviceaccount_credentials_label
    found = []
    for account in sorted(live.accounts, key=lambda a: (a.namespace, a.name)):
        secrets = tuple(parse_names(account.credentials))
        labels = live.namespace_labels.get(account.namespace) or {}
        if not secrets or labels.get(label) == "true" or labels.get(config.exempt_label) == "true":
            continue
        found.append(CredentialsFinding(account.namespace, account.name, secrets, label))
    return found


class InstallExpectation:
    """What `config` implies, generated once per layout (a configuration does not change while
    a process runs; generating every policy's CEL is most of a comparison's cost). The install's
    components and declared layout come from the configuration their layers wrote."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.components = tuple(config.install.in_use())
        self._by_layout: dict[Layout, list[Expected]] = {}

    def _expected(self, layout: Layout) -> list[Expected]:
        if layout not in self._by_layout:
            self._by_layout[layout] = expected_objects(self.config, layout)
        return self._by_layout[layout]

    def layout(self, live: LiveAdmission) -> Layout:
        """The layout the install holds on this API server (what it serves, as declared)."""
        return layout_of(live.served, self.config.install.layout)

    def objects(self, live: LiveAdmission) -> dict[tuple[str, str], dict[str, Any]]:
        """(kind, name) -> the object the configuration implies for this API server: what
        the leading controller applies."""
        return {e.key: e.obj for e in self._expected(self.layout(live))}

    def check(self, live: LiveAdmission) -> InstallReport:
        """Each object the configuration implies for the install's layout, judged against the
        live one, the leftovers of ours that still act, and the ServiceAccounts whose
        credentials are not routed."""
        layout = self.layout(live)
        expected = self._expected(layout)
        judged = [_judged(e, live.objects.get(e.key), layout, self.config) for e in expected]
        judged += _leftovers(live, {e.key for e in expected}, layout, self.config)
        credentials = credentials_findings(self.config, live) if layout is Layout.BASE else []
        daemons = blinded_daemons(self.config, live.workloads, live.namespace_labels)
        return InstallReport(
            describe_install(layout, self.components),
            tuple(judged),
            tuple(credentials),
            tuple(daemons),
            isolation_by_nodes=not self.config.gpu.visibility_policy,
        )


def check_install(config: Config, live: LiveAdmission) -> InstallReport:
    """`InstallExpectation(config).check(live)`, for one comparison."""
    return InstallExpectation(config).check(live)


def lacks_credentials(pod: Mapping[str, Any], secrets: tuple[str, ...], config: Config) -> bool:
    """Whether a pod of a bound ServiceAccount holds none of its Secrets (no volume of one, no
    env var from one) and has not opted out: it started without its credentials."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(config.names.inject_cloud_credentials, "")).strip().lower() == "false":
        return False
    spec = pod.get("spec") or {}
    wanted = set(secrets)
    for volume in spec.get("volumes") or []:
        if ((volume.get("secret") or {}).get("secretName")) in wanted:
            return False
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
                if ref.get("name") in wanted:
                    return False
    return True
