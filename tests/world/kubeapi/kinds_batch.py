"""Job (batch/v1) defaults and validation, as kube-apiserver 1.36 applies them
(pkg/apis/batch/v1/defaults.go, pkg/apis/batch/validation/validation.go ValidateJobSpec)."""

from __future__ import annotations

from typing import Any

from .errors import cause

MAX_INT32 = 2**31 - 1
MAX_INDEXED_PARALLELISM = 100_000  # maxParallelismForIndexedJob


def apply_job_defaults(spec: dict[str, Any]) -> None:
    # pkg/apis/batch/v1/defaults.go: completions only when neither is set; backoffLimit
    # MaxInt32 when each index has its own limit.
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    per_index = spec.get("backoffLimitPerIndex") is not None
    spec.setdefault("backoffLimit", MAX_INT32 if per_index else 6)
    # Only Failed is allowed with a podFailurePolicy, so that is its default there.
    failure_policy = spec.get("podFailurePolicy") is not None
    spec.setdefault("podReplacementPolicy", "Failed" if failure_policy else "TerminatingOrFailed")


def job_spec_causes(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The completion-mode and pod-failure-policy rules of pkg/apis/batch/validation
    ValidateJobSpec."""
    causes = pod_failure_policy_causes(spec)
    mode = spec.get("completionMode")
    per_index = spec.get("backoffLimitPerIndex")
    for name in ("parallelism", "completions", "backoffLimit", "backoffLimitPerIndex"):
        value = spec.get(name)
        if isinstance(value, int) and value < 0:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"spec.{name}",
                    f"Invalid value: {value}: must be greater than or equal to 0",
                )
            )
    if mode not in (None, "NonIndexed", "Indexed"):
        causes.append(
            cause(
                "FieldValueNotSupported",
                "spec.completionMode",
                f'Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"',
            )
        )
    if mode == "Indexed":
        if spec.get("completions") is None:
            causes.append(
                cause(
                    "FieldValueRequired",
                    "spec.completions",
                    "Required value: when completion mode is Indexed",
                )
            )
        parallelism = spec.get("parallelism")
        if isinstance(parallelism, int) and parallelism > MAX_INDEXED_PARALLELISM:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "spec.parallelism",
                    f"Invalid value: {parallelism}: must be less than or equal to "
                    f"{MAX_INDEXED_PARALLELISM} when completion mode is Indexed",
                )
            )
    elif per_index is not None:
        causes.append(
            cause(
                "FieldValueInvalid",
                "spec.backoffLimitPerIndex",
                f"Invalid value: {per_index}: requires indexed completion mode",
            )
        )
    return causes


POLICY_ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")


def pod_failure_policy_causes(spec: dict[str, Any]) -> list[dict[str, str]]:
    """validatePodFailurePolicy and validatePodReplacementPolicy, the parts loader Jobs touch."""
    policy = spec.get("podFailurePolicy")
    if policy is None:
        return []
    causes = []
    template = (spec.get("template") or {}).get("spec") or {}
    names = {c.get("name") for g in ("containers", "initContainers") for c in template.get(g) or []}
    path = "spec.podFailurePolicy.rules"
    for i, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if not action:
            supported = ", ".join(f'"{a}"' for a in POLICY_ACTIONS)
            message = f"Required value: valid values: [{supported}]"
            causes.append(cause("FieldValueRequired", f"{path}[{i}].action", message))
        elif action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            message = 'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set'
            causes.append(cause("FieldValueInvalid", f"{path}[{i}].action", message))
        elif action not in POLICY_ACTIONS:
            supported = ", ".join(f'"{a}"' for a in POLICY_ACTIONS)
            message = f'Unsupported value: "{action}": supported values: {supported}'
            causes.append(cause("FieldValueNotSupported", f"{path}[{i}].action", message))
        codes = rule.get("onExitCodes")
        if codes is not None:
            where = f"{path}[{i}].onExitCodes"
            container = codes.get("containerName")
            if container is not None and container not in names:
                message = (
                    f'Invalid value: "{container}": must be one of the container or '
                    "initContainer names in the pod template"
                )
                causes.append(cause("FieldValueInvalid", f"{where}.containerName", message))
            values = codes.get("values") or []
            if not values:
                message = "Invalid value: []: at least one value is required"
                causes.append(cause("FieldValueInvalid", f"{where}.values", message))
            if codes.get("operator") == "In" and 0 in values:
                index = values.index(0)
                message = "Invalid value: 0: must not be 0 for the In operator"
                causes.append(cause("FieldValueInvalid", f"{where}.values[{index}]", message))
            if values != sorted(values):
                message = f"Invalid value: {values}: must be ordered"
                causes.append(cause("FieldValueInvalid", f"{where}.values", message))
        if codes is None and not rule.get("onPodConditions"):
            message = "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"
            causes.append(cause("FieldValueInvalid", f"{path}[{i}]", message))
    replacement = spec.get("podReplacementPolicy")
    if replacement not in (None, "Failed"):
        message = f'Unsupported value: "{replacement}": supported values: "Failed"'
        causes.append(cause("FieldValueNotSupported", "spec.podReplacementPolicy", message))
    return causes
