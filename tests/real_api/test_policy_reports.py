"""The background scan on a real kube-apiserver 1.36: the controller, running as its own
ServiceAccount with the RBAC of manifests/components/policy-reports, writes PolicyReports that the
real CRD (wgpolicyk8s.io, as its project publishes it) accepts, counts what `gpu-admission audit`
counts, updates a report in place when a violator is fixed, and deletes it when its namespace
has nothing left to report."""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from commands.audit import audit_command
from commands.controller import ControllerProcess
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests import ROOT
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.world.control_plane import ControlPlane

pytestmark = pytest.mark.e2e

EXEMPT = "gpu-admission.io/exempt"
TWO, ONE = "reports-two", "reports-one"
CONTROLLER = "system:serviceaccount:gpu-admission:gpu-admission-controller"
REPORTS = ("wgpolicyk8s.io", "v1alpha2", "policyreports")
AWS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _pod(name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nvidia/cuda:12.4.1-base"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def _aws(name: str, secret_key_name: str) -> dict[str, Any]:
    data = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", secret_key_name: AWS_KEY}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"name": name}, "type": "aws-credential", "data": encoded}


# A workload whose template every pod would be refused for (no replicas: no pods).
OVER_ASKING = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "over-ask"},
    "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": "over-ask"}},
        "template": {
            "metadata": {"labels": {"app": "over-ask"}},
            "spec": {
                "containers": [
                    {
                        "name": "nb",
                        "image": "cuda",
                        "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
                    }
                ]
            },
        },
    },
}


@pytest.fixture(scope="module")
def seeded(real_cluster: ControlPlane, api: client.ApiClient, kubectl: Kubectl, crds: None):
    apply_base(kubectl)  # the controller's ServiceAccount and role
    kubectl("apply", "-f", str(ROOT / "manifests" / "components" / "policy-reports" / "rbac.yaml"))
    core = client.CoreV1Api(api)
    for namespace in (TWO, ONE):
        namespace_ready(api, namespace, labels={EXEMPT: "true"})  # made before the install
    core.create_namespaced_pod(TWO, _pod("sees-gpus"))
    core.create_namespaced_secret(TWO, _aws("typo", "AWS_SECRET_KEY"))
    core.create_namespaced_pod(ONE, _pod("sees-gpus-too"))
    client.AppsV1Api(api).create_namespaced_deployment(TWO, OVER_ASKING)
    for namespace in (TWO, ONE):
        core.patch_namespace(namespace, {"metadata": {"labels": {EXEMPT: None}}})
    return real_cluster


def _as_controller(api: client.ApiClient) -> client.ApiClient:
    """The admin connection, impersonating the controller's ServiceAccount: RBAC decides."""
    return client.ApiClient(
        api.configuration, header_name="Impersonate-User", header_value=CONTROLLER
    )


def _reports(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(*REPORTS)
    return {r["metadata"]["namespace"]: r for r in listed["items"]}


def _audit(plane: ControlPlane) -> list[dict[str, str]]:
    out = io.StringIO()
    args = argparse.Namespace(
        kubeconfig=plane.kubeconfig, config=None, output="json", namespace=None, sources=False
    )
    audit_command(args, out, io.StringIO())
    return json.loads(out.getvalue())["findings"]


def _audited(plane: ControlPlane) -> Counter[str]:
    return Counter(f["namespace"] for f in _audit(plane))


async def _wait(condition: Callable[[], Any], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling a condition, bounded by the deadline


async def test_the_scan_writes_updates_and_removes_reports(
    seeded: ControlPlane, api: client.ApiClient
) -> None:
    config = Config.model_validate(
        {
            "audit": {"interval": "1h"},
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
            # Its webhooks would call a Service nothing here serves (test_install_check
            # tests the writes).
            "install": {"write_admission_objects": False},
        }
    )
    metrics = Metrics(process_metrics=False)
    process = ControllerProcess(config, _as_controller(api), metrics, identity="scan-test")
    scanner = process.scanner
    assert scanner is not None
    await process.start()
    try:
        await _wait(lambda: scanner.scans_done >= 1, "the first scan")
        reports = _reports(api)
        two = reports[TWO]
        assert two["metadata"]["name"] == "gpu-admission"
        assert two["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-admission"}
        by_policy = {r["policy"]: r for r in two["results"]}
        assert set(by_policy) == {"gpu-visibility", "credential-secrets", "shared-gpu-limit"}
        # The workload, next to the pods, as what it is.
        workload = by_policy["shared-gpu-limit"]["resources"][0]
        assert (workload["apiVersion"], workload["kind"]) == ("apps/v1", "Deployment")
        assert workload["name"] == "over-ask"
        visibility = by_policy["gpu-visibility"]
        assert visibility["result"] == "fail" and visibility["severity"] == "high"
        assert visibility["resources"][0]["kind"] == "Pod"
        assert visibility["resources"][0]["name"] == "sees-gpus"
        assert visibility["resources"][0]["uid"]
        assert visibility["properties"] == {"mode": "enforce", "action": "change"}
        assert two["summary"] == {"pass": 0, "fail": 3, "warn": 0, "error": 0, "skip": 0}
        assert AWS_KEY not in json.dumps(two)
        # The scan counts what the audit counts, namespace by namespace.
        audited = await asyncio.to_thread(_audited, seeded)
        assert {ns: len(r["results"]) for ns, r in reports.items()} == dict(audited)
        visible = sum(
            1
            for f in await asyncio.to_thread(_audit, seeded)
            if (f["policy"], f["kind"]) == ("gpu-visibility", "Pod")
        )
        assert (
            'gpu_admission_audit_violations{kind="Pod",mode="enforce",policy="gpu-visibility"} '
            f"{float(visible)}"
        ) in metrics.exposition().decode()

        # Fixed: the Secret gets its right key; the report is updated in place.
        core = client.CoreV1Api(api)
        core.replace_namespaced_secret("typo", TWO, _aws("typo", "AWS_SECRET_ACCESS_KEY"))
        core.delete_namespaced_pod("sees-gpus-too", ONE, grace_period_seconds=0)
        await _wait(lambda: not core.list_namespaced_pod(ONE).items, "the pod to go")
        scanner.scan_now()
        await _wait(lambda: scanner.scans_done >= 2, "the second scan")
        after = _reports(api)
        assert after[TWO]["metadata"]["uid"] == two["metadata"]["uid"]
        assert int(after[TWO]["metadata"]["resourceVersion"]) > int(
            two["metadata"]["resourceVersion"]
        )
        kept = {r["policy"]: r for r in after[TWO]["results"]}
        assert set(kept) == {"gpu-visibility", "shared-gpu-limit"}
        # The result still there keeps the moment it was first found.
        assert kept["gpu-visibility"]["timestamp"] == visibility["timestamp"]
        assert ONE not in after  # nothing left to report: no report
        assert {ns: len(r["results"]) for ns, r in after.items()} == dict(
            await asyncio.to_thread(_audited, seeded)
        )

        # Nothing changed: nothing is written.
        version = after[TWO]["metadata"]["resourceVersion"]
        scanner.scan_now()
        await _wait(lambda: scanner.scans_done >= 3, "the third scan")
        assert _reports(api)[TWO]["metadata"]["resourceVersion"] == version
    finally:
        await process.stop()


async def test_openreports_reports_are_accepted_by_their_crd(
    seeded: ControlPlane, api: client.ApiClient
) -> None:
    config = Config.model_validate(
        {
            "audit": {"interval": "1h", "report_format": "openreports"},
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
            # Its webhooks would call a Service nothing here serves (test_install_check
            # tests the writes).
            "install": {"write_admission_objects": False},
        }
    )
    process = ControllerProcess(
        config, _as_controller(api), Metrics(process_metrics=False), identity="openreports-test"
    )
    scanner = process.scanner
    assert scanner is not None
    await process.start()
    try:
        await _wait(lambda: scanner.scans_done >= 1, "the first scan")
    finally:
        await process.stop()
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        "openreports.io", "v1alpha1", "reports"
    )
    reports = {r["metadata"]["namespace"]: r for r in listed["items"]}
    assert reports[TWO]["source"] == "gpu-admission"
    audited = [f for f in await asyncio.to_thread(_audit, seeded) if f["namespace"] == TWO]
    assert {r["policy"] for r in reports[TWO]["results"]} == {f["policy"] for f in audited}
    assert "gpu-visibility" in {f["policy"] for f in audited}
    assert reports[TWO]["summary"]["fail"] == len(audited)
