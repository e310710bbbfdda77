"""The emulator's dynamic admission: registered webhook configurations, run like kube-apiserver.

Wiring (what the emulator core provides):

    services = {("gpu-admission", "gpu-admission"): "127.0.0.1:8443"}
    admission = WebhookAdmission(lister, services)

``lister(resource, namespace)`` returns the stored objects (plain dicts) of a resource —
``"mutatingwebhookconfigurations"``, ``"validatingwebhookconfigurations"`` and ``"namespaces"``
with ``namespace=None`` — and may be a plain function or a coroutine function. The core passes
``server.list_objects``. Configurations are read on every request (there are few), so a test
registers or changes a webhook simply by writing its configuration through the API.

``services`` maps a ``clientConfig.service`` ``(namespace, name)`` to the local ``host:port``
serving it; ``register_service`` adds mappings later. The call still uses the service's DNS
name (``<name>.<namespace>.svc``) for TLS verification and in error messages.

Behaviour follows ``k8s.io/apiserver/pkg/admission/plugin/webhook``: mutating webhooks run in
order (configurations sorted by name), each on the previous one's output, with one round of
``reinvocationPolicy: IfNeeded``; validating webhooks then run concurrently. Error texts and
codes are kube-apiserver's, because tests and users read them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.world.kubeapi.admission_client import (
    DEFAULT_TIMEOUT_SECONDS,
    CallFailed,
    post_review,
    ssl_context,
    target_for,
)
from tests.world.kubeapi.admission_match import (
    SelectorError,
    any_rule_matches,
    namespace_selector_applies,
    object_selector_matches,
    own_namespace_labels,
    selector_matches,
)
from tests.world.kubeapi.admission_patch import (
    PatchDoesNotApply,
    UndecodablePatch,
    apply_patch,
    decode_patch,
)
from tests.world.kubeapi.admission_policy import (
    ConditionError,
    PolicyAdmission,
    activation_for,
    conditions_match,
)
from tests.world.kubeapi.admission_review import (
    InvalidResponse,
    build_request,
    denial_error,
    dry_run_unsupported,
    internal_error,
    parse_response,
)
from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.admission_warnings import cap_warnings
from tests.world.kubeapi.errors import bad_request, forbidden, not_found

Lister = Callable[[str, str | None], list[dict[str, Any]] | Awaitable[list[dict[str, Any]]]]

MUTATING = "mutatingwebhookconfigurations"
VALIDATING = "validatingwebhookconfigurations"
SIDE_EFFECT_FREE = ("None", "NoneOnDryRun")


class WebhookCallError(Exception):
    """kube-apiserver's ``ErrCallingWebhook``: subject to the webhook's failurePolicy."""

    def __init__(self, webhook_name: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook_name}": {reason}')


@dataclass(frozen=True)
class Hook:
    configuration: str
    index: int
    spec: Mapping[str, Any]

    @property
    def uid(self) -> tuple[str, int]:
        return (self.configuration, self.index)

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def ignores_failures(self) -> bool:
        return self.spec.get("failurePolicy", "Fail") == "Ignore"

    @property
    def reinvoked_if_needed(self) -> bool:
        return self.spec.get("reinvocationPolicy", "Never") == "IfNeeded"


class WebhookAdmission:
    """An ``AdmissionHook`` calling the webhooks registered in the emulator."""

    def __init__(
        self, lister: Lister, services: Mapping[tuple[str, str], str] | None = None
    ) -> None:
        self._lister = lister
        self._services: dict[tuple[str, str], str] = dict(services or {})
        # The ValidatingAdmissionPolicy plugin runs before the validating webhooks.
        self.policies = PolicyAdmission(self._list, self._namespace)

    def register_service(self, namespace: str, name: str, address: str) -> None:
        """Serve calls to service ``namespace/name`` from ``address`` (``host:port``)."""
        self._services[(namespace, name)] = address

    async def mutate(self, attrs: AdmissionAttributes) -> tuple[dict[str, Any] | None, list[str]]:
        hooks = await self._hooks(MUTATING)
        if not hooks:
            return None, []
        original = attrs.object
        current = dataclasses.replace(attrs)
        warnings: list[str] = []
        invoked_reinvocable: set[tuple[str, int]] = set()
        to_reinvoke: set[tuple[str, int]] = set()
        reinvoke_round = False
        for round_ in (0, 1):
            if round_ == 1 and not reinvoke_round:
                break
            for hook in hooks:
                if not await self._should_call(hook, current):
                    continue
                # A webhook skipped in the first round is never called for the first time here.
                if round_ == 1 and hook.uid not in to_reinvoke:
                    continue
                changed = False
                failure: WebhookCallError | None = None
                try:
                    patched = await self._call_mutating(hook, current, warnings)
                    if patched is not None and patched != current.object:
                        changed = True
                        current = dataclasses.replace(current, object=patched)
                except WebhookCallError as error:
                    failure = error
                if changed:
                    to_reinvoke |= invoked_reinvocable
                    invoked_reinvocable = set()
                    reinvoke_round = True
                if hook.reinvoked_if_needed:
                    invoked_reinvocable.add(hook.uid)
                if failure is not None and not hook.ignores_failures:
                    raise internal_error(str(failure))
        result = current.object if current.object != original else None
        return result, cap_warnings(warnings)

    async def validate(self, attrs: AdmissionAttributes) -> list[str]:
        policy_warnings = await self.policies.validate(attrs)
        hooks = [
            hook for hook in await self._hooks(VALIDATING) if await self._should_call(hook, attrs)
        ]
        warnings_per_hook: list[list[str]] = [[] for _ in hooks]
        outcomes = await asyncio.gather(
            *(
                self._call_validating(hook, attrs, warnings)
                for hook, warnings in zip(hooks, warnings_per_hook, strict=True)
            ),
            return_exceptions=True,
        )
        # kube-apiserver returns the first error to arrive; webhook order keeps this deterministic.
        for hook, outcome in zip(hooks, outcomes, strict=True):
            if isinstance(outcome, WebhookCallError):
                if not hook.ignores_failures:
                    raise internal_error(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
        return cap_warnings(
            [*policy_warnings, *(w for warnings in warnings_per_hook for w in warnings)]
        )

    async def _list(self, resource: str) -> list[dict[str, Any]]:
        listed = self._lister(resource, None)
        if inspect.isawaitable(listed):
            listed = await listed
        return list(listed)

    async def _hooks(self, resource: str) -> list[Hook]:
        configurations = sorted(
            await self._list(resource), key=lambda c: (c.get("metadata") or {}).get("name", "")
        )
        return [
            Hook((configuration.get("metadata") or {}).get("name", ""), index, spec)
            for configuration in configurations
            for index, spec in enumerate(configuration.get("webhooks") or [])
        ]

    async def _namespace(self, attrs: AdmissionAttributes) -> dict[str, Any] | None:
        for namespace in await self._list("namespaces"):
            if (namespace.get("metadata") or {}).get("name") == attrs.namespace:
                return namespace
        return None

    async def _namespace_labels(self, attrs: AdmissionAttributes) -> dict[str, str]:
        own = own_namespace_labels(attrs)
        if own is not None:
            return own
        namespace = await self._namespace(attrs)
        if namespace is None:
            raise not_found("namespaces", "", attrs.namespace)
        return dict((namespace.get("metadata") or {}).get("labels") or {})

    async def _should_call(self, hook: Hook, attrs: AdmissionAttributes) -> bool:
        """``ShouldCallHook``: rules, then namespaceSelector, then objectSelector."""
        if not any_rule_matches(hook.spec, attrs):
            return False
        try:
            if namespace_selector_applies(hook.spec, attrs) and not selector_matches(
                hook.spec.get("namespaceSelector"), await self._namespace_labels(attrs)
            ):
                return False
            if not object_selector_matches(hook.spec, attrs):
                return False
        except SelectorError as error:
            raise internal_error(str(error)) from None
        return self._conditions_match(hook, attrs)

    def _conditions_match(self, hook: Hook, attrs: AdmissionAttributes) -> bool:
        """``matchConditions`` (generic/webhook.go ``ShouldCallHook``): failing closed, the
        request is refused with 403 Forbidden, the webhook never called."""
        conditions = hook.spec.get("matchConditions") or []
        if not conditions:
            return True
        try:
            return conditions_match(
                activation_for(attrs, None), conditions, not hook.ignores_failures
            )
        except ConditionError as error:
            raise forbidden(attrs.resource, attrs.group, attrs.name, str(error)) from None

    def _check_dry_run(self, hook: Hook, attrs: AdmissionAttributes) -> None:
        if not attrs.dry_run:
            return
        side_effects = hook.spec.get("sideEffects")
        if side_effects is None:
            raise WebhookCallError(hook.name, "Webhook SideEffects is nil")
        if side_effects not in SIDE_EFFECT_FREE:
            raise dry_run_unsupported(hook.name)

    async def _call(
        self, hook: Hook, attrs: AdmissionAttributes, mutating: bool, warnings: list[str]
    ) -> tuple[bool, dict[str, Any] | None, bytes]:
        """One call: returns (allowed, status, patch bytes); raises on failure or denial."""
        self._check_dry_run(hook, attrs)
        versions = list(hook.spec.get("admissionReviewVersions") or [])
        if "v1" not in versions:
            raise WebhookCallError(
                hook.name,
                "could not create admission objects: webhook does not accept known "
                f"AdmissionReview versions [{' '.join(versions)}]",
            )
        timeout = int(hook.spec.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        review = build_request(attrs)
        uid = review["request"]["uid"]
        try:
            client_config = hook.spec.get("clientConfig") or {}
            target = target_for(client_config, self._services, timeout)
            context = ssl_context(client_config.get("caBundle"))
            body = await post_review(target, context, json.dumps(review).encode(), timeout)
            response = parse_response(body, uid, mutating)
        except CallFailed as error:
            raise WebhookCallError(hook.name, str(error)) from None
        except InvalidResponse as error:
            raise WebhookCallError(
                hook.name, f"received invalid webhook response: {error}"
            ) from None
        warnings.extend(response.warnings)
        if not response.allowed:
            raise denial_error(hook.name, response.status)
        return response.allowed, response.status, response.patch

    async def _call_mutating(
        self, hook: Hook, attrs: AdmissionAttributes, warnings: list[str]
    ) -> dict[str, Any] | None:
        _, _, patch = await self._call(hook, attrs, True, warnings)
        if not patch:
            return None
        try:
            operations = decode_patch(patch)
        except UndecodablePatch as error:
            raise WebhookCallError(
                hook.name, f"received undecodable patch in webhook response: {error}"
            ) from None
        if not operations:
            return None
        if attrs.object is None:
            raise internal_error(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                "supported for this operation"
            )
        try:
            patched = apply_patch(attrs.object, operations)
        except PatchDoesNotApply as error:
            raise internal_error(str(error)) from None
        _check_identity(hook.name, attrs.object, patched)
        return patched

    async def _call_validating(
        self, hook: Hook, attrs: AdmissionAttributes, warnings: list[str]
    ) -> None:
        await self._call(hook, attrs, False, warnings)


def _check_identity(webhook_name: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """A webhook may not turn the object into another object."""
    old_gvk = (before.get("apiVersion"), before.get("kind"))
    new_gvk = (after.get("apiVersion"), after.get("kind"))
    if old_gvk != new_gvk:
        raise internal_error(
            f'admission webhook "{webhook_name}" changed the object\'s apiVersion/kind from '
            f"{old_gvk[0]}/{old_gvk[1]} to {new_gvk[0]}/{new_gvk[1]}, which is not allowed"
        )
    old_meta, new_meta = before.get("metadata") or {}, after.get("metadata") or {}
    if old_meta.get("name") and old_meta.get("name") != new_meta.get("name"):
        raise bad_request("the name of the object does not match the name on the URL")
    if old_meta.get("namespace") and old_meta.get("namespace") != new_meta.get("namespace"):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
