"""Findings as reports: one per namespace, in the shape Policy Reporter, Kyverno and Trivy
Operator share (wgpolicyk8s.io/v1alpha2 PolicyReport; openreports.io/v1alpha1 Report has the same
results and summary, and a `source`). Pure: the writer brings the previous reports, so a
result's timestamp stays the moment it was first found and an unchanged report is not written.

A report lists what needs attention, not every check that passed: its results are `fail`
(the policy enforces: the object will be refused or changed when it is next created), `warn`
(the policy warns or audits) and `error` (the policy could not judge the object). A namespace
with nothing to report has no report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.admission.findings import COULD_NOT_CHECK, WOULD_CHANGE, Finding
from gpu_admission.names import MANAGED_BY, MANAGED_BY_LABEL

SOURCE = MANAGED_BY
MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"


@dataclass(frozen=True)
class ReportKind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


REPORT_KINDS = {
    "policyreport": ReportKind("wgpolicyk8s.io", "v1alpha2", "policyreports", "PolicyReport"),
    "openreports": ReportKind("openreports.io", "v1alpha1", "reports", "Report"),
}

# How much a finding matters: a pod that may use GPUs it was not given, or a GPU container that
# picks its own GPUs, is a breach of isolation; a missing memory share or credential is a
# failure waiting to happen; dataset findings delay work.
SEVERITY = {
    "gpu-visibility": "high",
    "gpu-env-guard": "high",
    "credential-secrets": "high",
    "shared-gpu-limit": "medium",
    "gpu-memory-share": "medium",
    "cloud-credentials": "medium",
    "dataset-pvc": "medium",
    "dataset-gate": "low",
    "dataset-pvc-cache": "info",
}
CATEGORY = {
    "gpu-visibility": "GPU isolation",
    "gpu-env-guard": "GPU isolation",
    "shared-gpu-limit": "Shared GPUs",
    "gpu-memory-share": "Shared GPUs",
    "credential-secrets": "Cloud credentials",
    "cloud-credentials": "Cloud credentials",
}
RESULT_ORDER = {"fail": 0, "error": 1, "warn": 2}


def result_of(finding: Finding) -> str:
    if finding.result == COULD_NOT_CHECK:
        return "error"
    return "fail" if finding.mode == "enforce" else "warn"


def rule_of(finding: Finding) -> str:
    return finding.result.replace(" ", "-")  # would-refuse, would-change, could-not-check


def _key(result: Mapping[str, Any]) -> tuple[str, ...]:
    resource = (result.get("resources") or [{}])[0]
    return (
        str(result.get("policy")),
        str(result.get("rule")),
        str(resource.get("kind")),
        str(resource.get("name")),
        str(result.get("message")),
    )


def _result(finding: Finding, seconds: int) -> dict[str, Any]:
    resource = {
        "apiVersion": finding.api_version,
        "kind": finding.kind,
        "namespace": finding.namespace,
        "name": finding.name,
    }
    if finding.uid:
        resource["uid"] = finding.uid
    action = "change" if finding.result == WOULD_CHANGE else "refuse"
    return {
        "source": SOURCE,
        "policy": finding.policy,
        "rule": rule_of(finding),
        "category": CATEGORY.get(finding.policy, "Datasets"),
        "result": result_of(finding),
        "severity": SEVERITY.get(finding.policy, "medium"),
        "scored": True,
        "message": finding.message,
        "resources": [resource],
        "properties": {"mode": finding.mode, "action": action},
        "timestamp": {"seconds": seconds, "nanos": 0},
    }


def _summary(results: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    summary = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        summary[str(result["result"])] += 1
    return summary


def desired_reports(
    findings: Iterable[Finding],
    kind: ReportKind,
    name: str,
    now_seconds: int,
    previous: Mapping[str, Mapping[str, Any]],
    max_results: int,
    omitted_key: str,
) -> dict[str, dict[str, Any]]:
    """Namespace -> the report it should hold now (no resourceVersion). A result seen in the
    previous report keeps its timestamp; over `max_results`, the most pressing are kept (fail,
    then error, then warn) and the summary still counts them all."""
    by_namespace: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.namespace:  # cluster-scoped objects have no namespace report
            by_namespace.setdefault(finding.namespace, []).append(finding)
    reports = {}
    for namespace, found in sorted(by_namespace.items()):
        first_seen = {
            _key(r): r.get("timestamp") for r in (previous.get(namespace) or {}).get("results", [])
        }
        results = []
        for finding in found:
            result = _result(finding, now_seconds)
            result["timestamp"] = first_seen.get(_key(result)) or result["timestamp"]
            results.append(result)
        results.sort(key=lambda r: (RESULT_ORDER[r["result"]], _key(r)))
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(MANAGED)}
        if len(results) > max_results:
            metadata["annotations"] = {omitted_key: str(len(results) - max_results)}
        body: dict[str, Any] = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": metadata,
            "summary": _summary(results),
            "results": results[:max_results],
        }
        if kind.kind == "Report":
            body["source"] = SOURCE
        reports[namespace] = body
    return reports


def unchanged(current: Mapping[str, Any], desired: Mapping[str, Any], omitted_key: str) -> bool:
    """Whether writing `desired` over `current` would change what readers see."""

    def omitted(report: Mapping[str, Any]) -> Any:
        return ((report.get("metadata") or {}).get("annotations") or {}).get(omitted_key)

    return (
        current.get("results", []) == desired.get("results", [])
        and current.get("summary") == desired.get("summary")
        and omitted(current) == omitted(desired)
    )
