"""Runs the policies for one request and combines their answers into one outcome.

Used by the HTTPS service and the offline `review` command alike. A policy that raises never
crashes the caller and never silently admits: under the `deny` failure mode the request is
refused with a message saying so; under `allow` it is admitted without that policy's changes,
with a warning. Either way the failure is logged and reported in `failed_policies`.

Each policy acts by its mode (`gpu_admission.config.policy_modes`): an enforcing one refuses or
changes; a warn-mode one turns its refusal into a warning; an audit-mode one changes and refuses
nothing, and what it would have done goes into the answer's `auditAnnotations` (the API server
writes them into its audit event, keyed `<webhook name>/<policy>`). A policy that does not
enforce never refuses a request, not even when it fails. Every act is in `decisions`, for the
metrics.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_admission.cluster.view import ClusterView, MissResolver, ObjectRef
from gpu_admission.config.model import FailureMode
from gpu_admission.config.policy_modes import CHANGED, DENIED, RECORDED, WARNED, PolicyMode
from webhooks.core.change_words import describe_changes
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest
from webhooks.policies.interface import MutatingPolicy, ValidatingPolicy

log = logging.getLogger(__name__)

INTERNAL_ERROR_CODE = 500
# An audit annotation holds what a policy would have done; the audit event needs no essay.
MAX_AUDIT_ANNOTATION = 1024
ENFORCE_ALL: Mapping[str, PolicyMode] = {}
ENFORCE = str(PolicyMode.ENFORCE)


@dataclass
class Outcome:
    allowed: bool = True
    ops: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str = ""
    code: int = 403
    failed_policies: list[str] = field(default_factory=list)
    notices: dict[str, int] = field(default_factory=dict)  # see Patch.notice
    # Policy name -> what it would have done, for policies that do not enforce.
    audit_annotations: dict[str, str] = field(default_factory=dict)
    # (policy, mode, decision): every refusal, change, warning and record (policy_modes).
    decisions: list[tuple[str, str, str]] = field(default_factory=list)

    def record(self, policy: str, mode: PolicyMode, would: str) -> None:
        """An audit-mode policy's finding (or a warn-mode one's, which is also warned)."""
        text = " ".join(would.split())
        if len(text) > MAX_AUDIT_ANNOTATION:
            text = text[: MAX_AUDIT_ANNOTATION - 3] + "..."
        self.audit_annotations[policy] = text
        self.decisions.append((policy, str(mode), WARNED if mode is PolicyMode.WARN else RECORDED))


def log_records(webhook: str, uid: str, outcome: Outcome) -> None:
    """One log line per policy that let a request through only because it does not enforce:
    the record an operator greps for while adopting a policy."""
    for policy, would in outcome.audit_annotations.items():
        log.info(
            "policy not enforced",
            extra={"webhook": webhook, "uid": uid, "policy": policy, "would": would},
        )


def warn_mode_warning(policy: str, message: str) -> str:
    """What a warn-mode policy says instead of refusing."""
    return f"{policy} (warn mode) would refuse this once enforced: {message}"


def _failure_message(policy_name: str) -> str:
    return (
        f"the {policy_name} check failed with an internal error, so the request was refused "
        "to stay safe; retry, and if it persists ask your platform team to check the "
        "gpu-admission logs"
    )


def _failure_warning(policy_name: str) -> str:
    return f"{policy_name} was skipped after an internal error; ask your platform team"


def _log_failure(policy_name: str, request: AdmissionRequest) -> None:
    log.exception(
        "policy %s raised on %s %s %s/%s (uid %s)",
        policy_name,
        request.operation,
        request.kind,
        request.namespace,
        request.name or "<generated>",
        request.uid,
    )


def references(
    request: AdmissionRequest,
    policies: Iterable[MutatingPolicy | ValidatingPolicy],
    view: ClusterView | None = None,
) -> list[ObjectRef]:
    """Objects the applicable policies will look up, so a cache miss can be filled first."""
    refs: list[ObjectRef] = []
    for policy in policies:
        if policy.scope.matches(request):
            try:
                refs.extend(policy.references(request, view))
            except Exception:  # the policy itself will fail and be handled when it runs
                _log_failure(policy.name, request)
    return refs


RESOLVE_ROUNDS = 2


async def resolve_references(
    request: AdmissionRequest,
    policies: Sequence[MutatingPolicy | ValidatingPolicy],
    view: ClusterView,
    resolver: MissResolver,
) -> None:
    """Fill cache misses for what the policies will read. The second round catches objects
    named by ones the first round fetched; each object is asked for once."""
    asked: set[ObjectRef] = set()
    for _ in range(RESOLVE_ROUNDS):
        refs = [
            ref for ref in dict.fromkeys(references(request, policies, view)) if ref not in asked
        ]
        if not refs:
            return
        asked.update(refs)
        await resolver.resolve(refs)


def run_mutating(
    request: AdmissionRequest,
    policies: Iterable[MutatingPolicy],
    view: ClusterView,
    failure_mode: FailureMode,
    fresh_object: Callable[[], dict[str, Any]],
    modes: Mapping[str, PolicyMode] = ENFORCE_ALL,
) -> Outcome:
    """Run the mutating policies in order on `request.object` (changed in place).

    `fresh_object` returns a new copy of the object as received; it is called only when a policy
    fails under the allow mode, to start again without that policy's half-made changes.
    `modes` names the policies that do not enforce (audit: they run on a copy, and what they
    would have done is recorded).
    """
    applicable = [p for p in policies if p.scope.matches(request)]
    skipped: list[str] = []
    while True:
        patch = Patch(request.object)
        outcome = Outcome(failed_policies=list(skipped))
        failed = None
        for policy in applicable:
            if policy.name in skipped:
                continue
            if policy.name in modes:
                _audit_mutation(policy, request, view, modes[policy.name], outcome)
                continue
            before = len(patch.ops)
            try:
                verdict = policy.mutate(request, patch, view)
            except Exception:
                _log_failure(policy.name, request)
                failed = policy.name
                break
            if verdict is not None and not verdict.allowed:
                outcome.decisions.append((policy.name, ENFORCE, DENIED))
                outcome.allowed = False
                outcome.message, outcome.code = verdict.message, verdict.code
                outcome.warnings, outcome.notices = patch.warnings, patch.notices
                return outcome
            if len(patch.ops) > before:
                outcome.decisions.append((policy.name, ENFORCE, CHANGED))
        if failed is None:
            outcome.ops, outcome.notices = patch.ops, patch.notices
            outcome.warnings = patch.warnings + [_failure_warning(name) for name in skipped]
            return outcome
        if failure_mode is FailureMode.DENY:
            return Outcome(
                allowed=False,
                message=_failure_message(failed),
                code=INTERNAL_ERROR_CODE,
                failed_policies=[*skipped, failed],
            )
        skipped.append(failed)
        request.object = fresh_object()


def _audit_mutation(
    policy: MutatingPolicy,
    request: AdmissionRequest,
    view: ClusterView,
    mode: PolicyMode,
    outcome: Outcome,
) -> None:
    """Run an audit-mode mutating policy on a copy of the object, and record what it would have
    done. Its failure is logged and reported, and refuses nothing."""
    trial = dataclasses.replace(request, object=copy.deepcopy(request.object))
    scratch = Patch(trial.object)
    try:
        verdict = policy.mutate(trial, scratch, view)
    except Exception:
        _log_failure(policy.name, request)
        outcome.failed_policies.append(policy.name)
        return
    if verdict is not None and not verdict.allowed:
        outcome.record(policy.name, mode, f"would refuse: {verdict.message}")
    elif scratch.ops:
        outcome.record(
            policy.name, mode, f"would change: {describe_changes(scratch.ops, request.object)}"
        )


def run_validating(
    request: AdmissionRequest,
    policies: Iterable[ValidatingPolicy],
    view: ClusterView,
    failure_mode: FailureMode,
    modes: Mapping[str, PolicyMode] = ENFORCE_ALL,
) -> Outcome:
    """Run every applicable validating policy; all denials are reported together, so the user
    can fix everything in one go. A warn-mode policy's denial becomes a warning, an audit-mode
    one's a record (`modes` names the policies that do not enforce)."""
    outcome = Outcome()
    denials: list[str] = []
    for policy in policies:
        if not policy.scope.matches(request):
            continue
        mode = modes.get(policy.name, PolicyMode.ENFORCE)
        try:
            verdict = policy.validate(request, view)
        except Exception:
            _log_failure(policy.name, request)
            outcome.failed_policies.append(policy.name)
            if failure_mode is FailureMode.DENY and mode is PolicyMode.ENFORCE:
                denials.append(_failure_message(policy.name))
                outcome.code = INTERNAL_ERROR_CODE if not denials[:-1] else outcome.code
            elif mode is not PolicyMode.AUDIT:
                outcome.warnings.append(_failure_warning(policy.name))
            continue
        outcome.warnings.extend(verdict.warnings)
        if verdict.allowed:
            continue
        if mode is PolicyMode.ENFORCE:
            if not denials:
                outcome.code = verdict.code
            denials.append(verdict.message)
            outcome.decisions.append((policy.name, ENFORCE, DENIED))
            continue
        if mode is PolicyMode.WARN:
            outcome.warnings.append(warn_mode_warning(policy.name, verdict.message))
        outcome.record(policy.name, mode, f"would refuse: {verdict.message}")
    if denials:
        outcome.allowed = False
        outcome.message = "; ".join(denials)
    return outcome
