"""The policy interface.

A mutating policy is a pure function `(request, patch, view) -> Verdict | None`: it records JSON
Patch operations and warnings on `patch` (which applies them to `request.object`, the working copy)
and returns a denial when the object must not be admitted. A validating policy is a pure function
`(request, view) -> Verdict`. Neither does I/O: everything about the cluster comes from the view.

A policy names the kind, operations and subresources it applies to, and may name the objects it
will look up (`references(request, view)`), so the service edge can fill a cache miss before the
policy runs. The edge asks twice: once more after the first misses are filled, so objects named
by freshly fetched ones (a new ServiceAccount's Secrets) are filled too.
Re-running a mutating policy on its own output must record no operation (reinvocation safety).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import product

from gpu_admission.cluster.view import ClusterView, ObjectRef
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, ScopeKey, Verdict

MutateFn = Callable[[AdmissionRequest, Patch, ClusterView], Verdict | None]
ValidateFn = Callable[[AdmissionRequest, ClusterView], Verdict]
# (request, view) -> objects the policy will look up. With the view, a policy can name objects
# that cached ones point at (the Secrets a ServiceAccount names).
ReferencesFn = Callable[[AdmissionRequest, ClusterView | None], Iterable[ObjectRef]]


def _no_references(
    request: AdmissionRequest, view: ClusterView | None = None
) -> Iterable[ObjectRef]:
    return ()


@dataclass(frozen=True)
class Scope:
    """Which requests a policy applies to: object kind, operations, subresources ("" = the
    object itself) and, when given, the values of the object's `type` field (a Secret's type).

    A path whose policies all name object types answers requests for other types without
    materialising their objects: such requests are matched on the review's head alone
    (`parse_review_head`, `typed_scope_keys`).
    """

    kind: str
    operations: frozenset[str] = frozenset({"CREATE"})
    subresources: frozenset[str] = frozenset({""})
    object_types: frozenset[str] = frozenset()

    def matches(self, request: AdmissionRequest) -> bool:
        return (
            request.kind == self.kind
            and request.operation in self.operations
            and request.sub_resource in self.subresources
            and (not self.object_types or _object_type(request) in self.object_types)
        )


def _object_type(request: AdmissionRequest) -> str | None:
    value = request.object.get("type")
    return value if isinstance(value, str) else None


def typed_scope_keys(
    policies: Iterable[MutatingPolicy | ValidatingPolicy],
) -> frozenset[ScopeKey] | None:
    """Every (kind, operation, subresource, object type) some policy's scope matches, when each
    scope names its object types (so the set is finite): then a request's key being in the set
    is `any(p.scope.matches(request))` in one lookup (`ReviewHead.scope_key`). None when a scope
    takes any object type."""
    keys: set[ScopeKey] = set()
    for policy in policies:
        scope = policy.scope
        if not scope.object_types:
            return None
        keys.update(
            product((scope.kind,), scope.operations, scope.subresources, scope.object_types)
        )
    return frozenset(keys)


@dataclass(frozen=True)
class MutatingPolicy:
    name: str
    scope: Scope
    mutate: MutateFn
    references: ReferencesFn = field(default=_no_references)


@dataclass(frozen=True)
class ValidatingPolicy:
    name: str
    scope: Scope
    validate: ValidateFn
    references: ReferencesFn = field(default=_no_references)


@dataclass(frozen=True)
class PolicySet:
    """All policies, in the order they run."""

    mutating: tuple[MutatingPolicy, ...] = ()
    validating: tuple[ValidatingPolicy, ...] = ()

    def mutating_for(self, kind: str) -> tuple[MutatingPolicy, ...]:
        return tuple(p for p in self.mutating if p.scope.kind == kind)

    def validating_for(self, kind: str) -> tuple[ValidatingPolicy, ...]:
        return tuple(p for p in self.validating if p.scope.kind == kind)
