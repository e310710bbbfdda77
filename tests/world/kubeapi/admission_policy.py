"""ValidatingAdmissionPolicies and their bindings, evaluated as kube-apiserver 1.36 does.

Written from ``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating``
(``dispatcher.go``, ``validator.go``) and ``pkg/apis/admissionregistration/validation``:

- a policy acts only through a binding (``spec.policyName``); policy and binding each match on
  their resource rules, namespaceSelector and objectSelector (the binding's ``matchResources``
  may be absent: it then matches what the policy matches);
- the policy's ``matchConditions`` gate its validations (``conditions_match``: a false condition
  wins over errors; errors alone follow ``failurePolicy``);
- each validation that is not ``true`` is a denial worded by ``messageExpression`` (a string,
  trimmed; over 5 KiB or multi-line falls back), else ``message``, else
  ``failed expression: EXPR``; an evaluation error is a denial with the error's text under
  ``failurePolicy: Fail`` and nothing under ``Ignore``;
- per binding, ``validationActions``: ``Deny`` collects the denial, ``Warn`` adds the warning
  ``Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B': M``, ``Audit`` records
  the ``validation.policy.admission.k8s.io/validation_failure`` annotation (kept in ``audits``);
- the first denial is the answer: ``<resource> "<name>" is forbidden: ValidatingAdmissionPolicy
  'P' with binding 'B' denied request: M`` with the validation's reason (Invalid, 422, unless it
  names another) and the message repeated as a cause.

Gaps: ``paramKind``/``paramRef`` are not supported (a policy with ``paramKind`` is refused
when created), nor audit annotations' ``valueExpression``, nor ``excludeResourceRules``'
resourceNames; policies are evaluated in name order (kube-apiserver's order is its informer's).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.world.kubeapi.admission_match import rule_matches, selector_matches
from tests.world.kubeapi.admission_review import build_request
from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.cel import Activation, CelError, compile_expression
from tests.world.kubeapi.errors import StatusError, cause, qualified

POLICIES = "validatingadmissionpolicies"
BINDINGS = "validatingadmissionpolicybindings"
MAX_MESSAGE_BYTES = 5 * 1024
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"
_REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "RequestEntityTooLarge": 413}
SUPPORTED_REASONS = ("Forbidden", "Invalid", "RequestEntityTooLarge", "Unauthorized")
ACTIONS = ("Audit", "Deny", "Warn")

Lister = Callable[[str], Awaitable[list[dict[str, Any]]]]
NamespaceGetter = Callable[[AdmissionAttributes], Awaitable[dict[str, Any] | None]]


@dataclass(frozen=True)
class Decision:
    message: str
    reason: str = "Invalid"


@dataclass
class PolicyAdmission:
    """The ValidatingAdmissionPolicy plugin: runs before the validating webhooks."""

    lister: Lister
    namespace_of: NamespaceGetter
    audits: list[dict[str, Any]] = field(default_factory=list)

    async def validate(self, attrs: AdmissionAttributes) -> list[str]:
        policies = sorted(await self.lister(POLICIES), key=_name)
        if not policies:
            return []
        bindings = sorted(await self.lister(BINDINGS), key=_name)
        namespace = await self.namespace_of(attrs) if attrs.namespace else None
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        warnings: list[str] = []
        denied: list[tuple[str, str, Decision]] = []
        for policy in policies:
            spec = policy.get("spec") or {}
            own = [b for b in bindings if (b.get("spec") or {}).get("policyName") == _name(policy)]
            if not own or not _matches(spec.get("matchConstraints") or {}, attrs, labels):
                continue
            for binding in own:
                resources = (binding.get("spec") or {}).get("matchResources")
                if resources is not None and not _matches(resources, attrs, labels):
                    continue
                for decision in _decisions(spec, attrs, namespace):
                    self._act(policy, binding, decision, attrs, warnings, denied)
        if denied:
            raise _denial(attrs, *denied[0])
        return warnings

    def _act(
        self,
        policy: Mapping[str, Any],
        binding: Mapping[str, Any],
        decision: Decision,
        attrs: AdmissionAttributes,
        warnings: list[str],
        denied: list[tuple[str, str, Decision]],
    ) -> None:
        actions = (binding.get("spec") or {}).get("validationActions") or []
        for action in actions:
            if action == "Deny":
                denied.append((_name(policy), _name(binding), decision))
            elif action == "Warn":
                warnings.append(
                    f"Validation failed for ValidatingAdmissionPolicy '{_name(policy)}' with "
                    f"binding '{_name(binding)}': {decision.message}"
                )
            elif action == "Audit":
                value = [
                    {
                        "message": decision.message,
                        "policy": _name(policy),
                        "binding": _name(binding),
                        "expressionIndex": 0,
                        "validationActions": list(actions),
                    }
                ]
                self.audits.append(
                    {"resource": attrs.resource, "name": attrs.name, AUDIT_KEY: json.dumps(value)}
                )


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _matches(
    constraints: Mapping[str, Any], attrs: AdmissionAttributes, namespace_labels: Mapping
) -> bool:
    """``DefinitionMatches``/``BindingMatches``: rules (with resourceNames), excluded rules,
    namespaceSelector (namespaced requests only), objectSelector (new or old object)."""

    def named_rule(rule: Mapping[str, Any]) -> bool:
        names = rule.get("resourceNames") or []
        return rule_matches(rule, attrs) and (not names or attrs.name in names)

    if not any(named_rule(r) for r in constraints.get("resourceRules") or []):
        return False
    if any(named_rule(r) for r in constraints.get("excludeResourceRules") or []):
        return False
    if attrs.namespace and not selector_matches(
        constraints.get("namespaceSelector"), namespace_labels
    ):
        return False
    selector = constraints.get("objectSelector")
    return any(
        obj is not None and selector_matches(selector, (obj.get("metadata") or {}).get("labels"))
        for obj in (attrs.object, attrs.old_object)
    )


def _inputs(attrs: AdmissionAttributes, namespace: Mapping[str, Any] | None) -> dict[str, Any]:
    request = build_request(attrs)["request"]
    for key in ("object", "oldObject", "uid"):
        request.pop(key, None)
    namespace_object = None
    if namespace is not None:
        # CreateNamespaceObject: only the namespace's name, labels/annotations, spec and status.
        meta = namespace.get("metadata") or {}
        namespace_object = {
            "metadata": {k: meta[k] for k in ("name", "labels", "annotations") if k in meta},
            "spec": namespace.get("spec") or {},
            "status": namespace.get("status") or {},
        }
    return {
        "object": attrs.object,
        "oldObject": attrs.old_object,
        "request": request,
        "namespaceObject": namespace_object,
    }


class ConditionError(Exception):
    """matchConditions that errored, with no condition false, under ``failurePolicy: Fail``."""


def conditions_match(
    activation: Activation, conditions: list[Mapping[str, Any]], fail: bool
) -> bool:
    """``matchconditions.Matcher.Match``: every condition is evaluated; one that is false means
    no match, whatever errors others had; otherwise errors fail closed (ConditionError, their
    messages aggregated as ``utilerrors.NewAggregate`` words them) or open (no match)."""
    errors = []
    for condition in conditions:
        try:
            if activation.evaluate(condition["expression"]) is False:
                return False
        except CelError as error:
            errors.append(str(error))
    if errors:
        if fail:
            raise ConditionError(errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]")
        return False
    return True


def activation_for(
    attrs: AdmissionAttributes,
    namespace: Mapping[str, Any] | None,
    variables: list[Mapping[str, Any]] = (),  # type: ignore[assignment]
) -> Activation:
    """The CEL inputs of one request, with a policy's variables."""
    return Activation(_inputs(attrs, namespace), {v["name"]: v["expression"] for v in variables})


def _decisions(
    spec: Mapping[str, Any], attrs: AdmissionAttributes, namespace: Mapping[str, Any] | None
) -> list[Decision]:
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    activation = activation_for(attrs, namespace, spec.get("variables") or [])
    try:
        if not conditions_match(activation, spec.get("matchConditions") or [], fail):
            return []
    except ConditionError as error:
        return [Decision(str(error), "")]
    decisions = []
    for validation in spec.get("validations") or []:
        try:
            passed = activation.evaluate(validation["expression"]) is True
        except CelError as error:
            if fail:
                decisions.append(Decision(str(error), ""))
            continue
        if not passed:
            decisions.append(
                Decision(_message(activation, validation), validation.get("reason") or "Invalid")
            )
    return decisions


def _message(activation: Activation, validation: Mapping[str, Any]) -> str:
    message = ""
    if validation.get("messageExpression"):
        try:
            value = activation.evaluate(validation["messageExpression"])
        except CelError:
            value = None  # logged by kube-apiserver; the static message is used instead
        if isinstance(value, str):
            message = value.strip()
            if len(message.encode()) > MAX_MESSAGE_BYTES or "\n" in message:
                message = ""
    if not message and validation.get("message"):
        message = str(validation["message"]).strip()
    return message or f"failed expression: {str(validation['expression']).strip()}"


def _denial(
    attrs: AdmissionAttributes, policy: str, binding: str, decision: Decision
) -> StatusError:
    text = f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: "
    text += decision.message
    reason = decision.reason or "Invalid"
    name = attrs.name or "Unknown"
    details = {"name": name, "kind": attrs.resource, "causes": [{"message": text}]}
    if attrs.group:
        details["group"] = attrs.group
    return StatusError(
        _REASON_CODES.get(reason, 422),
        reason,
        f'{qualified(attrs.resource, attrs.group)} "{name}" is forbidden: {text}',
        details,
    )


# -- validation when written ---------------------------------------------------------------


def _compiles(expression: Any, path: str, message: bool = False) -> list[dict[str, str]]:
    if not isinstance(expression, str) or not expression.strip():
        return [cause("FieldValueRequired", path, "Required value: expression is not specified")]
    try:
        compile_expression(expression, want_string=message)
    except CelError as error:
        # A messageExpression of another type is worded without "compilation failed".
        how = "" if str(error).startswith("must evaluate") else "compilation failed: "
        return [
            cause(
                "FieldValueInvalid",
                path,
                f"Invalid value: {json.dumps(expression)}: {how}{error}",
            )
        ]
    return []


def policy_causes(policy: Mapping[str, Any]) -> list[dict[str, str]]:
    """The checks of ``validateValidatingAdmissionPolicySpec`` this emulator makes."""
    spec = policy.get("spec") or {}
    causes: list[dict[str, str]] = []
    if spec.get("paramKind") is not None:
        causes.append(
            cause(
                "FieldValueForbidden", "spec.paramKind", "Forbidden: not supported by the emulator"
            )
        )
    for i, condition in enumerate(spec.get("matchConditions") or []):
        causes += _compiles(condition.get("expression"), f"spec.matchConditions[{i}].expression")
    for i, variable in enumerate(spec.get("variables") or []):
        causes += _compiles(variable.get("expression"), f"spec.variables[{i}].expression")
    for i, validation in enumerate(spec.get("validations") or []):
        where = f"spec.validations[{i}]"
        causes += _compiles(validation.get("expression"), f"{where}.expression")
        if validation.get("messageExpression"):
            causes += _compiles(
                validation["messageExpression"], f"{where}.messageExpression", message=True
            )
        message = str(validation.get("message") or "").strip()
        if "\n" in message or "\r" in message:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"{where}.message",
                    f"Invalid value: {json.dumps(validation['message'])}: message must not "
                    "contain line breaks",
                )
            )
        reason = validation.get("reason")
        if reason is not None and reason not in SUPPORTED_REASONS:
            supported = ", ".join(f'"{r}"' for r in SUPPORTED_REASONS)
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    f"{where}.reason",
                    f'Unsupported value: "{reason}": supported values: {supported}',
                )
            )
    return causes


def binding_causes(binding: Mapping[str, Any]) -> list[dict[str, str]]:
    """``validateValidatingAdmissionPolicyBindingSpec``: policyName and validationActions."""
    spec = binding.get("spec") or {}
    causes: list[dict[str, str]] = []
    if not spec.get("policyName"):
        causes.append(cause("FieldValueRequired", "spec.policyName", "Required value"))
    actions = spec.get("validationActions") or []
    seen: list[str] = []
    for i, action in enumerate(actions):
        path = f"spec.validationActions[{i}]"
        if action not in ACTIONS:
            supported = ", ".join(f'"{a}"' for a in ACTIONS)
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    path,
                    f'Unsupported value: "{action}": supported values: {supported}',
                )
            )
        if action in seen:
            causes.append(cause("FieldValueDuplicate", path, f'Duplicate value: "{action}"'))
        seen.append(action)
    if "Deny" in seen and "Warn" in seen:
        causes.append(
            cause(
                "FieldValueInvalid",
                "spec.validationActions",
                f"Invalid value: {json.dumps(actions)}: must not contain both Deny and Warn "
                "(repeating the same validation failure information in the API response and "
                "headers serves no purpose)",
            )
        )
    if not seen:
        causes.append(
            cause(
                "FieldValueRequired",
                "spec.validationActions",
                "Required value: at least one validation action is required",
            )
        )
    return causes


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    """``SetDefaults_ValidatingAdmissionPolicySpec`` and ``SetDefaults_MatchResources``."""
    spec = obj.setdefault("spec", {})
    if kind == "ValidatingAdmissionPolicy":
        spec.setdefault("failurePolicy", "Fail")
        _default_match(spec.setdefault("matchConstraints", {}))
    elif kind == "ValidatingAdmissionPolicyBinding" and spec.get("matchResources") is not None:
        _default_match(spec["matchResources"])


def _default_match(match: dict[str, Any]) -> None:
    match.setdefault("matchPolicy", "Equivalent")
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    for rule in match.get("resourceRules") or []:
        rule.setdefault("scope", "*")
