"""Configuration for adopting the policies on a running cluster: each policy's mode
(`policies.<name>.mode`, policy_modes.py) and the controller's background audit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from gpu_admission.config.base import _Model, duration_seconds
from gpu_admission.config.policy_modes import TUNABLE_POLICIES, PolicyMode


class PolicySettings(_Model):
    mode: PolicyMode = PolicyMode.ENFORCE
    """enforce, warn (validating policies only) or audit: what the policy does with what it
    finds (docs/adoption.md)."""


class AuditConfig(_Model):
    interval: Annotated[float, Field(ge=0)] = 0.0
    """Seconds (or a duration such as 30s, 10m, 1h) between the controller leader's scans of
    what the cluster holds, by every policy, written as reports; 0 (the default) turns the
    scan off. Each scan is one paginated list per kind."""
    report_format: Literal["policyreport", "openreports"] = "policyreport"
    """policyreport: one wgpolicyk8s.io/v1alpha2 PolicyReport per namespace (what Policy Reporter,
    Kyverno and Trivy Operator use); openreports: one openreports.io/v1alpha1 Report."""

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_seconds(value)

    report_name: str = "gpu-admission"
    """The name of each namespace's report."""
    max_results_per_report: Annotated[int, Field(ge=1, le=5000)] = 1000
    """At most this many results in one report (the rest are counted in the summary and in the
    metric), so a report stays well under etcd's object size limit."""


def known_policy_names(value: Any) -> Any:
    """`policies` keyed by the names users type; `_` stands for `-` (environment variables
    cannot carry '-': GPU_ADMISSION_POLICIES__GPU_ENV_GUARD__MODE)."""
    if not isinstance(value, Mapping):
        return value
    named = {str(k).replace("_", "-"): v for k, v in value.items()}
    unknown = sorted(set(named) - set(TUNABLE_POLICIES))
    if unknown:
        raise ValueError(
            f"unknown policy {', '.join(unknown)}; the policies are " + ", ".join(TUNABLE_POLICIES)
        )
    return named
