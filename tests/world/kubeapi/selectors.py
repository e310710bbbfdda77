"""Label and field selectors in the query-string syntax kube-apiserver parses."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import StatusError, bad_request

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9._/-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_CMP_RE = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects without the label, like labels.Selector does.
        return not present or value not in self.values


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text:
        return []
    requirements = []
    for part in _split_top_level(text):
        compared = _CMP_RE.match(part)
        if compared:
            key, op, value = compared.groups()
            requirements.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
            continue
        set_based = _SET_RE.match(part)
        if not set_based:
            raise bad_request(f"unable to parse requirement: invalid label selector: {part!r}")
        negated, key, op, values = set_based.groups()
        if op:
            if negated:
                raise bad_request(f"unable to parse requirement: {part!r}")
            items = frozenset(v.strip() for v in values.split(",") if v.strip())
            requirements.append(Requirement(key, op, items))
        else:
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
    return requirements


def labels_match(requirements: list[Requirement], obj: dict[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


def _get_path(obj: dict[str, Any], dotted: str) -> str:
    current: Any = obj
    for part in dotted.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    return "" if current is None else str(current)


# Field selectors each kind supports (the real registry rejects others with 400).
_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "status.phase",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "secrets": ("type",),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
        "source",
    ),
    "namespaces": ("status.phase",),
    "nodes": ("spec.unschedulable",),
    "jobs": ("status.successful",),
}


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


def parse_field_selector(text: str | None, resource: str) -> list[FieldRequirement]:
    if not text:
        return []
    allowed = {"metadata.name", "metadata.namespace", *_FIELDS.get(resource, ())}
    requirements = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = re.match(r"^\s*([A-Za-z0-9._]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not match:
            raise bad_request(f"invalid field selector: {part!r}")
        field, op, value = match.groups()
        if field not in allowed:
            raise StatusError(
                400,
                "BadRequest",
                f'Unable to find "{resource}" that match label selector "", field selector '
                f'"{text}": field label not supported: {field}',
            )
        requirements.append(FieldRequirement(field, op != "!=", value))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: dict[str, Any]) -> bool:
    for r in requirements:
        actual = _get_path(obj, r.field)
        if (actual == r.value) != r.equal:
            return False
    return True


def matcher(
    label_text: str | None, field_text: str | None, resource: str
) -> Callable[[dict[str, Any]], bool]:
    labels = parse_label_selector(label_text)
    fields = parse_field_selector(field_text, resource)
    return lambda obj: labels_match(labels, obj) and fields_match(fields, obj)
