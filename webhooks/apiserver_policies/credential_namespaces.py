"""Where ServiceAccounts may be bound to cloud credentials: namespaces labelled
`gpu-admission.io/serviceaccount-credentials: "true"`, every pod of which goes to the webhook.

A webhook's matchConditions see the pod, never its ServiceAccount, so the pods webhook cannot
tell a pod of a bound ServiceAccount from another by the pod alone. The namespace label routes
instead: in a labelled namespace every pod is sent to the webhook (its own entry in the
MutatingWebhookConfiguration, `failurePolicy: Fail`), so a pod of a bound ServiceAccount is never
admitted without its credentials; elsewhere only the pods that need cluster state for another
reason are (`webhook_routing`). Two ValidatingAdmissionPolicies keep the label true to the
bindings, both reading the namespace as the API server's own cache holds it (`namespaceObject`),
as the webhook's namespaceSelector does:

- `gpu-admission-serviceaccount-credentials` refuses a binding (the ServiceAccount annotation
  `cloud-credentials` naming a Secret) written in a namespace without the label, on CREATE or
  when the binding changes. A binding admitted means the routing already sees the label: the
  label must come first, so there are no seconds after a binding in which its pods slip by. A
  binding from before the label existed is left alone (`gpu-admission audit` names it);
- `gpu-admission-credential-namespaces` refuses taking the label off (a tool that rewrites a
  namespace's labels would silently end the routing); setting it to "false", on purpose once no
  ServiceAccount there is bound, is allowed.

Both follow the mode of `cloud-credentials`: enforce refuses, audit records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.config.model import Config
from webhooks.apiserver_policies.cel import cel_string
from webhooks.apiserver_policies.pod_checks import exempt_selector
from webhooks.policies.credential_injection import parse_names

BINDING_POLICY = "gpu-admission-serviceaccount-credentials"
LABEL_POLICY = "gpu-admission-credential-namespaces"
MARKED = "true"


def _label(config: Config) -> str:
    return config.names.serviceaccount_credentials_label


def binding_message(config: Config, account: str, namespace: str) -> str:
    label = _label(config)
    return (
        f'ServiceAccount "{account}" names cloud credentials ({config.names.cloud_credentials}), '
        f'but namespace "{namespace}" is not labelled {label}={MARKED}: pods get their '
        "ServiceAccount's credentials only in namespaces so labelled (gpu-admission is asked "
        "about every pod there), so this ServiceAccount's pods would start without them. Ask "
        f"your platform team to run `kubectl label namespace {namespace} {label}={MARKED}`, "
        f"then write the annotation again; or name the Secrets on the pods instead "
        f"({config.names.cloud_credentials} on the pod)"
    )


def unlabel_message(config: Config, namespace: str) -> str:
    label = _label(config)
    return (
        f'namespace "{namespace}" is labelled {label}={MARKED}, which sends every pod of it to '
        "gpu-admission so that the pods of ServiceAccounts bound to cloud credentials get them; "
        "without the label those pods would start without their credentials. Once no "
        'ServiceAccount of the namespace names cloud credentials, set the label to "false" '
        f"instead of removing it: `kubectl label namespace {namespace} {label}=false --overwrite`"
    )


# -- in Python, for `review` ----------------------------------------------------------------


def binds(annotations: Mapping[str, str] | None, config: Config) -> bool:
    """Whether a ServiceAccount's annotations bind it to any credential Secret."""
    return bool(parse_names((annotations or {}).get(config.names.cloud_credentials)))


def binding_refusal(
    account: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, str],
    config: Config,
) -> str | None:
    """The binding policy's message for a ServiceAccount written (None: admitted)."""
    meta = account.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if not binds(annotations, config) or namespace_labels.get(_label(config)) == MARKED:
        return None
    key = config.names.cloud_credentials
    old_annotations = ((old or {}).get("metadata") or {}).get("annotations") or {}
    if old is not None and old_annotations.get(key) == annotations.get(key):
        return None  # a binding from before the label: left alone
    return binding_message(config, str(meta.get("name", "")), str(meta.get("namespace", "")))


# -- in CEL, for kube-apiserver --------------------------------------------------------------


def marked_test(var: str, config: Config) -> str:
    """CEL true when the object `var` (a namespace) carries the label as "true"."""
    label = cel_string(_label(config))
    return (
        f"(has({var}.metadata.labels) && {label} in {var}.metadata.labels && "
        f"{var}.metadata.labels[{label}] == {cel_string(MARKED)})"
    )


def cel_text(text: str, fields: Mapping[str, str]) -> str:
    """CEL for `text`, whose `\x00name\x00` markers stand for the CEL expressions `fields`."""
    pieces = []
    for i, part in enumerate(text.split("\x00")):
        if i % 2:
            pieces.append(fields[part])
        elif part:
            pieces.append(cel_string(part))
    return " + ".join(pieces)


def _validation(expression: str, message: str, fallback: str) -> dict[str, str]:
    return {
        "expression": expression,
        "messageExpression": message,
        "message": fallback,
        "reason": "Forbidden",
    }


def _policy(
    name: str,
    rules: list[dict[str, Any]],
    variables: list[dict[str, str]],
    check: dict[str, str],
    namespace_selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    constraints: dict[str, Any] = {"resourceRules": rules}
    if namespace_selector is not None:
        constraints["namespaceSelector"] = namespace_selector
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            # Fail: a binding whose routing cannot be checked must not be written.
            "failurePolicy": "Fail",
            "matchConstraints": constraints,
            "variables": variables,
            "validations": [check],
        },
    }


def binding_policy(config: Config) -> dict[str, Any]:
    """Refuses a binding written where the routing would miss its pods."""
    key = cel_string(config.names.cloud_credentials)
    annotated = f"has(object.metadata.annotations) && {key} in object.metadata.annotations"
    old_value = (
        f"(has(oldObject.metadata.annotations) && {key} in oldObject.metadata.annotations ? "
        f"oldObject.metadata.annotations[{key}] : '')"
    )
    variables = [
        {
            "name": "binds",
            "expression": f"{annotated} && object.metadata.annotations[{key}]"
            ".split(',').exists(n, n.trim() != '')",
        },
        {
            "name": "changed",
            "expression": "request.operation == 'CREATE' || "
            f"{old_value} != object.metadata.annotations[{key}]",
        },
        {"name": "labelled", "expression": marked_test("namespaceObject", config)},
    ]
    message = cel_text(
        binding_message(config, "\x00account\x00", "\x00namespace\x00"),
        {"account": "object.metadata.name", "namespace": "namespaceObject.metadata.name"},
    )
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["serviceaccounts"],
        }
    ]
    check = _validation(
        "!variables.binds || !variables.changed || variables.labelled",
        message,
        binding_message(config, "(this ServiceAccount)", "(its namespace)"),
    )
    return _policy(BINDING_POLICY, rules, variables, check, exempt_selector(config))


def label_policy(config: Config) -> dict[str, Any]:
    """Refuses taking the label off a namespace (setting it to "false" is allowed)."""
    label = cel_string(_label(config))
    rules = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["namespaces"],
        }
    ]
    variables = [
        {"name": "wasLabelled", "expression": marked_test("oldObject", config)},
        {
            "name": "stillNamed",
            "expression": f"has(object.metadata.labels) && {label} in object.metadata.labels",
        },
    ]
    check = _validation(
        "!variables.wasLabelled || variables.stillNamed",
        cel_text(
            unlabel_message(config, "\x00namespace\x00"), {"namespace": "object.metadata.name"}
        ),
        unlabel_message(config, "(this namespace)"),
    )
    return _policy(LABEL_POLICY, rules, variables, check)


def unlabel_refusal(
    namespace: Mapping[str, Any], old: Mapping[str, Any], config: Config
) -> str | None:
    """The label policy's message for a Namespace UPDATE (None: admitted)."""
    label = _label(config)
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    if old_labels.get(label) != MARKED or label in labels:
        return None
    return unlabel_message(config, str((namespace.get("metadata") or {}).get("name", "")))
