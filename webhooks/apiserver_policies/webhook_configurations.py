"""The two webhook configurations a configuration implies, whole: every entry's rules, routing
(namespaceSelector, matchConditions) and failure policy, for each layout the manifests ship.

The leading controller applies them (controllers/install_check/repair.py) and its self-check
compares the live configurations with these; `gpu-admission admission-policy
--webhook-configurations` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.names import CREDENTIAL_TYPES
from webhooks.apiserver_policies.cel import cel_string
from webhooks.apiserver_policies.webhook_routing import (
    NOT_A_MIRROR_POD,
    POD_MUTATIONS,
    mutating_pod_webhooks,
    webhook_condition,
)
from webhooks.core.workload_kinds import template_kinds

POD_CHECKS_WEBHOOK = "pods.validate.gpu-admission.io"
WORKLOADS_WEBHOOK = "workloads.validate.gpu-admission.io"
TIMEOUT_SECONDS = 5


class Layout(StrEnum):
    """Which kustomization an API server calls for, by the admission policies it serves."""

    BASE = "manifests/"  # 1.36 and later: MutatingAdmissionPolicy v1
    POD_MUTATIONS = "manifests/overlays/webhook-pod-mutations/"  # 1.30 to 1.35
    POD_CHECKS = "manifests/overlays/webhook-pod-checks/"  # before 1.30


def _rules(operations: list[str], group: str, resources: Iterable[str]) -> dict[str, Any]:
    return {
        "operations": operations,
        "apiGroups": [group],
        "apiVersions": ["v1"],
        "resources": list(resources),
        "scope": "Namespaced",
    }


def _pod_rules() -> list[dict[str, Any]]:
    return [_rules(["CREATE"], "", ["pods"]), _rules(["UPDATE"], "", ["pods/ephemeralcontainers"])]


def _entry(
    config: Config,
    name: str,
    path: str,
    rules: list[dict[str, Any]],
    *,
    mutating: bool,
    failure: str = "Fail",
) -> dict[str, Any]:
    # Audit mode refuses nothing: neither when the service answers nor when it does not.
    failure = "Ignore" if config.refuses_nothing else failure
    entry: dict[str, Any] = {"name": name, "failurePolicy": failure}
    if mutating:
        # Another webhook may add a container after ours ran; run again to treat it too.
        entry["reinvocationPolicy"] = "IfNeeded"
    entry |= {
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": TIMEOUT_SECONDS,
        "clientConfig": {
            "service": {
                "name": config.certs.service_name,
                "namespace": config.certs.namespace,
                "path": path,
                "port": 443,
            }
        },
        "rules": rules,
        "namespaceSelector": {
            "matchExpressions": [
                {"key": config.exempt_label, "operator": "NotIn", "values": ["true"]}
            ]
        },
    }
    return entry


def _conditions(name: str, expression: str) -> list[dict[str, str]]:
    return [{"name": name, "expression": expression}]


def _has_annotation(key: str) -> str:
    return f"has(object.metadata.annotations) && {cel_string(key)} in object.metadata.annotations"


def _pod_mutations(config: Config, layout: Layout) -> list[dict[str, Any]]:
    if layout is not Layout.BASE:  # the webhook for every pod: it makes every change itself
        entry = _entry(config, POD_MUTATIONS, "/mutate/pods", _pod_rules(), mutating=True)
        entry["matchConditions"] = _conditions("not-a-mirror-pod", NOT_A_MIRROR_POD)
        return [entry]
    entries = []
    for routing in mutating_pod_webhooks(config):
        entry = _entry(config, routing["name"], "/mutate/pods", _pod_rules(), mutating=True)
        entries.append(entry | routing)
    return entries


def mutating_configuration(config: Config, layout: Layout = Layout.BASE) -> dict[str, Any]:
    names = config.names
    pvc_condition = (
        f"({_has_annotation(names.data_source)}) || (has(object.metadata.labels) && "
        f"{cel_string(names.data_load_label)} in object.metadata.labels)"
    )
    pvcs = _entry(
        config,
        "pvcs.mutate.gpu-admission.io",
        "/mutate/persistentvolumeclaims",
        [_rules(["CREATE", "UPDATE"], "", ["persistentvolumeclaims"])],
        mutating=True,
    )
    pvcs["matchConditions"] = _conditions("has-data-source-or-label", pvc_condition)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": _metadata(config),
        "webhooks": [*_pod_mutations(config, layout), pvcs],
    }


# The cert-manager component's serving Certificate (manifests/components/cert-manager).
CERT_MANAGER_CERTIFICATE = "gpu-admission-serving"
INJECT_CA_FROM = "cert-manager.io/inject-ca-from"


def _metadata(config: Config) -> dict[str, Any]:
    """The configurations' name; with the cert-manager component, the annotation that has
    cert-manager's CA injector write caBundle from its Certificate's Secret (`ca.crt`)."""
    metadata: dict[str, Any] = {"name": config.certs.webhook_configuration_name}
    if "cert-manager" in config.install.in_use():
        source = f"{config.certs.namespace}/{CERT_MANAGER_CERTIFICATE}"
        metadata["annotations"] = {INJECT_CA_FROM: source}
    return metadata


def _workload_rules(config: Config) -> list[dict[str, Any]]:
    """One rule per API group and version, in the order the kinds come."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for kind in template_kinds(config):
        grouped.setdefault((kind.group, kind.versions), []).append(kind.resource)
    return [
        {**_rules(["CREATE", "UPDATE"], group, resources), "apiVersions": list(versions)}
        for (group, versions), resources in grouped.items()
    ]


def validating_configuration(config: Config, layout: Layout = Layout.BASE) -> dict[str, Any]:
    names = config.names
    pods = _entry(config, POD_CHECKS_WEBHOOK, "/validate/pods", _pod_rules(), mutating=False)
    if layout is not Layout.POD_CHECKS:  # there it judges every pod
        pods["matchConditions"] = _conditions(
            "claims-or-plain-gpu-over-one", webhook_condition(config.gpu)
        )
    types = ", ".join(cel_string(t) for t in CREDENTIAL_TYPES)
    secrets = _entry(
        config,
        "secrets.validate.gpu-admission.io",
        "/validate/secrets",
        [_rules(["CREATE", "UPDATE"], "", ["secrets"])],
        mutating=False,
    )
    secrets["matchConditions"] = _conditions(
        "credential-type", f"has(object.type) && object.type in [{types}]"
    )
    pvcs = _entry(
        config,
        "pvcs.validate.gpu-admission.io",
        "/validate/persistentvolumeclaims",
        [_rules(["CREATE", "UPDATE"], "", ["persistentvolumeclaims"])],
        mutating=False,
    )
    pvcs["matchConditions"] = _conditions("has-data-source", _has_annotation(names.data_source))
    # Beside the workload policy this webhook only warns; without the policy it refuses.
    workloads = _entry(
        config,
        WORKLOADS_WEBHOOK,
        "/validate/workloads",
        _workload_rules(config),
        mutating=False,
        failure="Fail" if layout is Layout.POD_CHECKS else "Ignore",
    )
    workloads["matchConditions"] = _conditions(
        "created-or-spec-changed",
        "request.operation == 'CREATE' || !has(oldObject.spec) || !has(object.spec) || "
        "object.spec != oldObject.spec",
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": _metadata(config),
        "webhooks": [pods, secrets, pvcs, workloads],
    }


def webhook_configurations(config: Config, layout: Layout = Layout.BASE) -> list[dict[str, Any]]:
    return [mutating_configuration(config, layout), validating_configuration(config, layout)]
