"""Which registered webhooks a request reaches: rules, namespaceSelector and objectSelector.

Pure functions mirroring kube-apiserver's ``webhook/rules``, ``predicates/namespace`` and
``predicates/object`` matchers. Gap: ``matchPolicy: Equivalent`` would also match other versions
or groups of the same resource; the emulator serves one version per resource, so an exact match
is all Equivalent can ever add here. ``matchConditions`` (CEL) are evaluated in
``admission.py``, with the CEL runtime of ``cel.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.world.kubeapi.admission_types import AdmissionAttributes

NAMESPACES = "namespaces"


class SelectorError(ValueError):
    """A label selector that kube-apiserver would refuse to parse."""


def _exact_or_wildcard(items: list[str], requested: str) -> bool:
    return any(item in ("*", requested) for item in items)


def _scope_matches(rule: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    scope = rule.get("scope") or "*"
    if scope == "*":
        return True
    # A Namespace object is cluster-scoped even though its requests carry a namespace.
    is_namespace_object = attrs.group == "" and attrs.resource == NAMESPACES
    if scope == "Namespaced":
        return not is_namespace_object and attrs.namespace != ""
    if scope == "Cluster":
        return is_namespace_object or attrs.namespace == ""
    return False


def _resource_matches(resources: list[str], resource: str, subresource: str) -> bool:
    for entry in resources:
        res, _, sub = entry.partition("/")
        # "*" alone means every resource but no subresource; "*/*" means everything.
        if res in ("*", resource) and sub in ("*", subresource):
            return True
    return False


def rule_matches(rule: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    """One ``RuleWithOperations`` against the request (``rules.Matcher.Matches``)."""
    return (
        _scope_matches(rule, attrs)
        and _exact_or_wildcard(rule.get("operations") or [], attrs.operation)
        and _exact_or_wildcard(rule.get("apiGroups") or [], attrs.group)
        and _exact_or_wildcard(rule.get("apiVersions") or [], attrs.version)
        and _resource_matches(rule.get("resources") or [], attrs.resource, attrs.subresource)
    )


def any_rule_matches(webhook: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    return any(rule_matches(rule, attrs) for rule in webhook.get("rules") or [])


def selector_is_empty(selector: Mapping[str, Any] | None) -> bool:
    return not selector or (
        not selector.get("matchLabels") and not selector.get("matchExpressions")
    )


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """A ``metav1.LabelSelector``; an empty selector matches everything."""
    labels = labels or {}
    if selector_is_empty(selector):
        return True
    assert selector is not None
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        if not _expression_matches(expression, labels):
            return False
    return True


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expression.get("key", "")
    operator = expression.get("operator", "")
    values = expression.get("values") or []
    if operator in ("In", "NotIn") and not values:
        raise SelectorError(
            f"values: Required value: must be specified when `operator` is {operator}"
        )
    if operator in ("Exists", "DoesNotExist") and values:
        raise SelectorError(
            "values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        )
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        # As in kube-apiserver, a missing key satisfies NotIn.
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise SelectorError(f'"{operator}" is not a valid label selector operator')


def _labels_of(obj: Mapping[str, Any] | None) -> dict[str, str] | None:
    if obj is None:
        return None
    return dict((obj.get("metadata") or {}).get("labels") or {})


def object_selector_matches(webhook: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    """``objectSelector`` matches when either the new or the old object matches it."""
    selector = webhook.get("objectSelector")
    if selector_is_empty(selector):
        return True
    return any(
        labels is not None and selector_matches(selector, labels)
        for labels in (_labels_of(attrs.object), _labels_of(attrs.old_object))
    )


def namespace_selector_applies(webhook: Mapping[str, Any], attrs: AdmissionAttributes) -> bool:
    """False when the selector cannot exclude the request (cluster-scoped, or selector empty)."""
    if attrs.namespace == "" and attrs.resource != NAMESPACES:
        return False
    return not selector_is_empty(webhook.get("namespaceSelector"))


def own_namespace_labels(attrs: AdmissionAttributes) -> dict[str, str] | None:
    """A Namespace being created or updated is matched on its own (new) labels."""
    if (
        attrs.resource == NAMESPACES
        and attrs.subresource == ""
        and attrs.operation in ("CREATE", "UPDATE")
    ):
        return _labels_of(attrs.object) or {}
    return None
