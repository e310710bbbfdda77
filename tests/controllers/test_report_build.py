"""Findings as reports: one per namespace, results by mode, stable timestamps, a bounded size."""

from __future__ import annotations

from controllers.reports.build import REPORT_KINDS, desired_reports, unchanged
from gpu_admission.admission.findings import COULD_NOT_CHECK, WOULD_CHANGE, WOULD_REFUSE, Finding

OMITTED = "gpu-admission.io/results-omitted"
POLICY_REPORT, OPEN_REPORT = REPORT_KINDS["policyreport"], REPORT_KINDS["openreports"]


def finding(name: str, namespace: str = "ml", **changes: str) -> Finding:
    fields = {
        "policy": "gpu-visibility",
        "result": WOULD_CHANGE,
        "kind": "Pod",
        "namespace": namespace,
        "name": name,
        "message": f"may see GPUs it was not given: {name}",
        "mode": "enforce",
        "uid": f"uid-{name}",
    }
    return Finding(**{**fields, **changes})


def build(findings, previous=None, now=1000, limit=100, kind=POLICY_REPORT):
    return desired_reports(findings, kind, "gpu-admission", now, previous or {}, limit, OMITTED)


def test_one_report_per_namespace_with_a_result_per_finding():
    reports = build([finding("a"), finding("b", namespace="cv"), finding("c")])
    assert sorted(reports) == ["cv", "ml"]
    ml = reports["ml"]
    assert ml["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and ml["kind"] == "PolicyReport"
    assert ml["metadata"]["namespace"] == "ml" and ml["metadata"]["name"] == "gpu-admission"
    assert [r["resources"][0]["name"] for r in ml["results"]] == ["a", "c"]
    assert ml["results"][0]["resources"][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "a",
        "uid": "uid-a",
    }
    assert ml["summary"]["fail"] == 2


def test_the_result_follows_the_mode():
    reports = build(
        [
            finding("enforced"),
            finding("watched", mode="audit"),
            finding("warned", policy="gpu-env-guard", result=WOULD_REFUSE, mode="warn"),
            finding("broken", result=COULD_NOT_CHECK),
        ]
    )
    results = {r["resources"][0]["name"]: r for r in reports["ml"]["results"]}
    assert results["enforced"]["result"] == "fail"
    assert results["watched"]["result"] == "warn"
    assert results["warned"]["result"] == "warn"
    assert results["warned"]["properties"] == {"mode": "warn", "action": "refuse"}
    assert results["broken"]["result"] == "error"
    # The most pressing first.
    assert [r["result"] for r in reports["ml"]["results"]] == ["fail", "error", "warn", "warn"]
    assert reports["ml"]["summary"] == {"pass": 0, "fail": 1, "warn": 2, "error": 1, "skip": 0}


def test_a_result_keeps_the_moment_it_was_first_found():
    first = build([finding("a")], now=1000)
    again = build([finding("a"), finding("b")], previous=first, now=2000)
    stamps = {r["resources"][0]["name"]: r["timestamp"]["seconds"] for r in again["ml"]["results"]}
    assert stamps == {"a": 1000, "b": 2000}
    assert unchanged(first["ml"], build([finding("a")], previous=first, now=3000)["ml"], OMITTED)
    assert not unchanged(first["ml"], again["ml"], OMITTED)


def test_a_full_report_keeps_the_most_pressing_and_counts_them_all():
    findings = [finding(f"p{i}", mode="audit") for i in range(5)] + [finding("worst")]
    report = build(findings, limit=3)["ml"]
    assert len(report["results"]) == 3
    assert report["results"][0]["resources"][0]["name"] == "worst"
    assert report["metadata"]["annotations"] == {OMITTED: "3"}
    assert report["summary"]["warn"] == 5 and report["summary"]["fail"] == 1


def test_openreports_reports_name_their_source():
    report = build([finding("a")], kind=OPEN_REPORT)["ml"]
    assert report["apiVersion"] == "openreports.io/v1alpha1" and report["kind"] == "Report"
    assert report["source"] == "gpu-admission"


def test_cluster_scoped_findings_make_no_namespace_report():
    assert build([finding("node", namespace="")]) == {}
