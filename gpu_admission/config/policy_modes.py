"""What each policy does with what it finds: its mode.

A platform team adopting gpu-admission on a running cluster starts with every policy recording
only, then warning, then enforcing, as with Kyverno's `failureAction: Audit`, Gatekeeper's
`enforcementAction: dryrun | warn` or Kubewarden's `mode: monitor`:

- `enforce` (the default): a validating policy refuses the object, a mutating one changes it;
- `warn` (validating policies only): admitted, with a `Warning:` saying what enforce would
  refuse (and recorded, as audit does);
- `audit`: admitted silently and unchanged; what enforce would refuse or change is recorded.

"Records" means an audit annotation on the API server's audit event (the webhook's answer
carries `auditAnnotations`), a count in `gpu_admission_policy_decisions_total` and a log line.
A policy's variants (its ephemeral-container half) follow its mode. The dataset PVC label is not
a policy users tune: the controller finds dataset PVCs by it.
"""

from __future__ import annotations

from enum import StrEnum


class PolicyMode(StrEnum):
    ENFORCE = "enforce"
    WARN = "warn"
    AUDIT = "audit"


# The policies whose mode can be set, as users name them (`policies.<name>.mode`).
VALIDATING_POLICIES = ("gpu-env-guard", "shared-gpu-limit", "credential-secrets", "dataset-pvc")
MUTATING_POLICIES = (
    "cloud-credentials",
    "gpu-visibility",
    "gpu-memory-share",
    "dataset-gate",
    "dataset-pvc-cache",
)
TUNABLE_POLICIES = VALIDATING_POLICIES + MUTATING_POLICIES
# Policies that run as part of another and take its mode.
VARIANT_OF = {
    "gpu-env-guard-ephemeral": "gpu-env-guard",
    "gpu-visibility-ephemeral": "gpu-visibility",
    "dataset-read-only-ephemeral": "dataset-gate",
}

# What a policy did with a request, as counted by the decisions metric and written in reports.
DENIED = "denied"  # enforce: refused
CHANGED = "changed"  # enforce: changed
WARNED = "warned"  # warn: admitted with a warning
RECORDED = "recorded"  # audit: admitted unchanged, recorded


def family(policy: str) -> str:
    """The tunable policy `policy` belongs to (itself, or the one it is a variant of)."""
    return VARIANT_OF.get(policy, policy)


def allowed_modes(policy: str) -> tuple[PolicyMode, ...]:
    if policy in MUTATING_POLICIES:
        return (PolicyMode.ENFORCE, PolicyMode.AUDIT)
    return tuple(PolicyMode)


def audit_mode() -> dict[str, PolicyMode]:
    """Every policy in the mode that admits and still says what it would do: warn where the
    policy refuses (the creator is told), audit where it changes (nothing is changed). What the
    audit-mode component sets (manifests/components/audit-mode/audit-mode.yaml)."""
    return {
        name: PolicyMode.WARN if PolicyMode.WARN in allowed_modes(name) else PolicyMode.AUDIT
        for name in TUNABLE_POLICIES
    }
