"""Which nodes a pod may land on: `nodeName`, `nodeSelector` and required node affinity.

Follows Kubernetes' semantics (component-helpers nodeaffinity and apimachinery labels) exactly:
terms are ORed and a term's requirements ANDed; an empty term matches nothing; `NotIn` and
`DoesNotExist` match a node without the label; `Gt`/`Lt` compare base-10 int64 values and fail on
anything else; a malformed requirement makes its term match nothing (the other terms still count).
`matchFields` knows `metadata.name`. Preferred affinity and taints do not restrict candidates.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.cluster.view import ClusterView, NodeInfo

_INT64 = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

NodeTest = Callable[[NodeInfo], bool]


def parse_int64(value: object) -> int | None:
    """Go's strconv.ParseInt(value, 10, 64): the value, or None."""
    if not isinstance(value, str) or not _INT64.fullmatch(value):
        return None
    number = int(value)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _strings(values: object) -> bool:
    return isinstance(values, list) and all(isinstance(v, str) for v in values)


def _never(node: NodeInfo) -> bool:
    return False


def _label_test(expr: Mapping[str, Any]) -> NodeTest | None:
    """One `matchExpressions` requirement as a test, or None when Kubernetes deems it invalid."""
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if not isinstance(key, str) or not _strings(values):
        return None
    if operator in ("In", "NotIn"):
        if not values:
            return None
        allowed = frozenset(values)
        if operator == "In":
            return lambda node: key in node.labels and node.labels[key] in allowed
        return lambda node: key not in node.labels or node.labels[key] not in allowed
    if operator in ("Exists", "DoesNotExist"):
        if values:
            return None
        if operator == "Exists":
            return lambda node: key in node.labels
        return lambda node: key not in node.labels
    if operator in ("Gt", "Lt"):
        bound = parse_int64(values[0]) if len(values) == 1 else None
        if bound is None:
            return None

        def compare(node: NodeInfo) -> bool:
            value = parse_int64(node.labels.get(key))
            if value is None:
                return False
            return value > bound if operator == "Gt" else value < bound

        return compare
    return None


def _field_test(expr: Mapping[str, Any]) -> NodeTest | None:
    """One `matchFields` requirement: In/NotIn with exactly one value, over `metadata.name`."""
    key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if operator not in ("In", "NotIn") or not _strings(values) or len(values) != 1:
        return None
    wanted = values[0]

    # A field the node does not have reads as "" (fields.Set), as in Kubernetes.
    def field_value(node: NodeInfo) -> str:
        return node.name if key == "metadata.name" else ""

    if operator == "In":
        return lambda node: field_value(node) == wanted
    return lambda node: field_value(node) != wanted


def _term_test(term: Mapping[str, Any]) -> NodeTest:
    """A node selector term: every requirement must hold; empty or malformed matches nothing."""
    if not isinstance(term, Mapping):
        return _never
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return _never
    if not expressions and not fields:
        return _never
    tests: list[NodeTest] = []
    for expr, make in [(e, _label_test) for e in expressions] + [(f, _field_test) for f in fields]:
        test = make(expr) if isinstance(expr, Mapping) else None
        if test is None:
            return _never
        tests.append(test)
    return lambda node: all(test(node) for test in tests)


@dataclass(frozen=True, slots=True)
class Placement:
    """The hard placement constraints of one pod spec, parsed once and tested per node."""

    node_name: str | None
    node_selector: Mapping[str, str]
    terms: tuple[NodeTest, ...] | None  # None: no required affinity

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Placement:
        node_name = spec.get("nodeName") or None
        selector = spec.get("nodeSelector") or {}
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        terms = None
        if required is not None:
            terms = tuple(_term_test(t) for t in required.get("nodeSelectorTerms") or [])
        return cls(node_name, selector, terms)

    def admits(self, node: NodeInfo) -> bool:
        labels = node.labels
        for key, value in self.node_selector.items():
            if labels.get(key) != value:
                return False
        return self.terms is None or any(term(node) for term in self.terms)

    def candidates(self, view: ClusterView) -> Iterable[NodeInfo]:
        """Nodes the pod could run on. With `nodeName` that node alone, if it exists and its
        labels satisfy the rest (the kubelet refuses the pod otherwise)."""
        if self.node_name is not None:
            node = view.node(self.node_name)
            pool: Iterable[NodeInfo] = () if node is None else (node,)
        else:
            pool = view.nodes()
        return (node for node in pool if self.admits(node))
