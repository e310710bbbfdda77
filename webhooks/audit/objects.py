"""What the policies would do to objects that already exist: the audit of a running cluster.

Each object is put to every policy of its kind, one policy at a time, as a CREATE request, with
the same policy code the webhooks run: a validating policy that denies it, or a mutating one that
refuses it, *would refuse* it; a mutating policy that records changes *would change* it (the
object was created before the policy, or around it). Mutating policies run alone on their own
copy, so each finding is one policy's. Pure: the caller brings the objects and the cluster view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from gpu_admission.admission.findings import COULD_NOT_CHECK, WOULD_CHANGE, WOULD_REFUSE, Finding
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.core.change_words import describe_changes
from webhooks.core.patch import Patch
from webhooks.offline.review import merged_string_data, review_request
from webhooks.policies.interface import PolicySet

# What users look for first: pods that may see GPUs they were not given, and shared-GPU pods
# that do not know their memory share.
HEADLINES = {
    "gpu-visibility": "may see GPUs it was not given",
    "gpu-memory-share": "does not know its GPU memory share",
}
FIRST = tuple(HEADLINES)
_ENCODER = msgspec.json.Encoder()
AUDIT_UID = "gpu-admission-audit"  # no policy reads the uid; a fresh one per request costs


def _as_created(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the webhooks saw it on CREATE, less what no policy reads and copying would
    cost most of the audit's time for (the status, the field managers)."""
    made = {key: value for key, value in obj.items() if key != "status"}
    meta = made.get("metadata")
    if isinstance(meta, Mapping) and "managedFields" in meta:
        made["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return merged_string_data(_copy(made)) if made.get("kind") == "Secret" else made


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object, through msgspec: several times cheaper than deepcopy."""
    copied: dict[str, Any] = msgspec.json.decode(_ENCODER.encode(obj))
    return copied


def audit_object(
    obj: Mapping[str, Any],
    policies: PolicySet,
    view: ClusterView,
    modes: Mapping[str, PolicyMode] | None = None,
) -> list[Finding]:
    """Every policy's finding on one Pod, Secret or PersistentVolumeClaim, whatever the policy's
    mode (`modes`: the policies that do not enforce, `Config.relaxed_modes()`): each finding
    carries the mode, so a report can tell what enforce would refuse from what is only watched."""
    kind = str(obj.get("kind"))
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    uid = str(meta.get("uid") or "")
    relaxed = modes or {}
    source = _as_created(obj)
    findings = []

    def found(policy: str, result: str, message: str) -> None:
        mode = str(relaxed.get(policy, PolicyMode.ENFORCE))
        findings.append(Finding(policy, result, kind, namespace, name, message, mode, uid))

    for mutating in policies.mutating_for(kind):
        request = review_request(_copy(source), kind, namespace, AUDIT_UID)
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
    # Validating policies only read (their contract): one request serves them all.
    request = review_request(_copy(source), kind, namespace, AUDIT_UID)
    for validating in policies.validating_for(kind):
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
