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


def job_spec_causes(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The completion-mode rules of pkg/apis/batch/validation ValidateJobSpec."""
    causes = []
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
