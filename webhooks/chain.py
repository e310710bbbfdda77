"""Runs the policies for one request and combines their answers into one outcome.

Used by the HTTPS service and the offline `review` command alike. A policy that raises never
crashes the caller and never silently admits: under the `deny` failure mode the request is
refused with a message saying so; under `allow` it is admitted without that policy's changes,
with a warning. Either way the failure is logged and reported in `failed_policies`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_admission.cluster.view import ClusterView, MissResolver, ObjectRef
from gpu_admission.config import FailureMode
from webhooks.patch import Patch
from webhooks.policy import MutatingPolicy, ValidatingPolicy
from webhooks.review import AdmissionRequest

log = logging.getLogger(__name__)

INTERNAL_ERROR_CODE = 500


@dataclass
class Outcome:
    allowed: bool = True
    ops: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str = ""
    code: int = 403
    failed_policies: list[str] = field(default_factory=list)
    notices: dict[str, int] = field(default_factory=dict)  # see Patch.notice


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
) -> Outcome:
    """Run the mutating policies in order on `request.object` (changed in place).

    `fresh_object` returns a new copy of the object as received; it is called only when a policy
    fails under the allow mode, to start again without that policy's half-made changes.
    """
    applicable = [p for p in policies if p.scope.matches(request)]
    skipped: list[str] = []
    while True:
        patch = Patch(request.object)
        failed = None
        for policy in applicable:
            if policy.name in skipped:
                continue
            try:
                verdict = policy.mutate(request, patch, view)
            except Exception:
                _log_failure(policy.name, request)
                failed = policy.name
                break
            if verdict is not None and not verdict.allowed:
                return Outcome(
                    allowed=False,
                    message=verdict.message,
                    code=verdict.code,
                    warnings=patch.warnings,
                    failed_policies=skipped,
                    notices=patch.notices,
                )
        if failed is None:
            warnings = patch.warnings + [_failure_warning(name) for name in skipped]
            return Outcome(
                ops=patch.ops, warnings=warnings, failed_policies=skipped, notices=patch.notices
            )
        if failure_mode is FailureMode.DENY:
            return Outcome(
                allowed=False,
                message=_failure_message(failed),
                code=INTERNAL_ERROR_CODE,
                failed_policies=[*skipped, failed],
            )
        skipped.append(failed)
        request.object = fresh_object()


def run_validating(
    request: AdmissionRequest,
    policies: Iterable[ValidatingPolicy],
    view: ClusterView,
    failure_mode: FailureMode,
) -> Outcome:
    """Run every applicable validating policy; all denials are reported together, so the user
    can fix everything in one go."""
    outcome = Outcome()
    denials: list[str] = []
    for policy in policies:
        if not policy.scope.matches(request):
            continue
        try:
            verdict = policy.validate(request, view)
        except Exception:
            _log_failure(policy.name, request)
            outcome.failed_policies.append(policy.name)
            if failure_mode is FailureMode.DENY:
                denials.append(_failure_message(policy.name))
                outcome.code = INTERNAL_ERROR_CODE if not denials[:-1] else outcome.code
            else:
                outcome.warnings.append(_failure_warning(policy.name))
            continue
        outcome.warnings.extend(verdict.warnings)
        if not verdict.allowed:
            if not denials:
                outcome.code = verdict.code
            denials.append(verdict.message)
    if denials:
        outcome.allowed = False
        outcome.message = "; ".join(denials)
    return outcome
