"""What the policies would do to objects that already exist: the audit of a running cluster.

Each object is put to every policy of its kind, one policy at a time, as a CREATE request, with
the same policy code the webhooks run: a validating policy that denies it, or a mutating one that
refuses it, *would refuse* it; a mutating policy that records changes *would change* it (the
object was created before the policy, or around it). Mutating policies run alone on their own
copy, so each finding is one policy's. Pure: the caller brings the objects and the cluster view.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpu_admission.cluster.view import ClusterView
from webhooks.offline_review import merged_string_data, review_request
from webhooks.patch import Patch
from webhooks.policy import PolicySet

WOULD_REFUSE = "would refuse"
WOULD_CHANGE = "would change"
COULD_NOT_CHECK = "could not check"
# What users look for first: pods that may see GPUs they were not given, and shared-GPU pods
# that do not know their memory share.
HEADLINES = {
    "gpu-visibility": "may see GPUs it was not given",
    "gpu-memory-share": "does not know its GPU memory share",
}
FIRST = tuple(HEADLINES)
_CONTAINER = re.compile(r"^/spec/(initContainers|containers|ephemeralContainers)/(\d+)(/.*)?$")


@dataclass(frozen=True, slots=True)
class Finding:
    policy: str
    result: str  # WOULD_REFUSE, WOULD_CHANGE or COULD_NOT_CHECK
    kind: str
    namespace: str
    name: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _where(path: str, obj: Mapping[str, Any]) -> str:
    match = _CONTAINER.match(path)
    if match is None:
        return path
    lst, index, rest = match.group(1), int(match.group(2)), match.group(3) or ""
    containers = (obj.get("spec") or {}).get(lst) or []
    name = containers[index].get("name", index) if index < len(containers) else index
    field = rest.lstrip("/").split("/")[0] or "container"
    return f'{lst[:-1].replace("initC", "init c")} "{name}" {field}'


def _value(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        shown = value.get("value")
        return f"{value['name']}={shown}" if isinstance(shown, str) else str(value["name"])
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items() if isinstance(v, str))
    return str(value) if isinstance(value, str) else ""


def describe_changes(ops: Iterable[Mapping[str, Any]], obj: Mapping[str, Any]) -> str:
    """JSON Patch operations in words: where, and what (env names and values, never a Secret's
    value: env from Secrets is by reference)."""
    parts = []
    for op in ops:
        what = _value(op.get("value"))
        parts.append(
            f"{op.get('op')} {_where(str(op.get('path')), obj)}" + (f" ({what})" if what else "")
        )
    return "; ".join(dict.fromkeys(parts))


def audit_object(obj: Mapping[str, Any], policies: PolicySet, view: ClusterView) -> list[Finding]:
    """Every policy's finding on one Pod, Secret or PersistentVolumeClaim."""
    kind = str(obj.get("kind"))
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    source = merged_string_data(copy.deepcopy(dict(obj))) if kind == "Secret" else dict(obj)
    findings = []

    def found(policy: str, result: str, message: str) -> None:
        findings.append(Finding(policy, result, kind, namespace, name, message))

    for mutating in policies.mutating_for(kind):
        request = review_request(copy.deepcopy(source), kind, namespace)
        if not mutating.scope.matches(request):
            continue
        patch = Patch(request.object)
        try:
            verdict = mutating.mutate(request, patch, view)
        except Exception as error:  # a policy bug must not end the audit; it is reported
            found(mutating.name, COULD_NOT_CHECK, f"{type(error).__name__}: {error}")
            continue
        if verdict is not None and not verdict.allowed:
            found(mutating.name, WOULD_REFUSE, verdict.message)
        elif patch.ops:
            changes = describe_changes(patch.ops, source)
            headline = HEADLINES.get(mutating.name)
            found(mutating.name, WOULD_CHANGE, f"{headline}: {changes}" if headline else changes)
    for validating in policies.validating_for(kind):
        request = review_request(copy.deepcopy(source), kind, namespace)
        if not validating.scope.matches(request):
            continue
        try:
            verdict = validating.validate(request, view)
        except Exception as error:
            found(validating.name, COULD_NOT_CHECK, f"{type(error).__name__}: {error}")
            continue
        if not verdict.allowed:
            found(validating.name, WOULD_REFUSE, verdict.message)
    return findings


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Grouped by policy (the headline policies first) and namespace."""

    def key(f: Finding) -> tuple[int, str, str, str, str]:
        rank = FIRST.index(f.policy) if f.policy in FIRST else len(FIRST)
        return (rank, f.policy, f.namespace, f.kind, f.name)

    return sorted(findings, key=key)
