"""The install checks itself, on a real kube-apiserver 1.36: the controller, as its own
ServiceAccount with the base's RBAC, watches the base's admission objects, finds each thing an
operator or a GitOps prune can do to them, says it in a gauge and a Warning Event on the
service's Deployment, and clears when it is put right; `gpu-admission audit` says the same."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.audit import audit_command
from commands.controller import ControllerProcess
from controllers.install_check import InstallChecker
from gpu_admission.admission.installed import InstallReport, ObjectState
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.real_api.conftest import WEBHOOK_KINDS, Kubectl, apply_base, namespace_ready
from tests.world.control_plane import ControlPlane
from tests.world.harness import render

pytestmark = pytest.mark.e2e

CONTROLLER = "system:serviceaccount:gpu-admission:gpu-admission-controller"
MAP = ("MutatingAdmissionPolicy", "gpu-admission-gpu-visibility")
WEBHOOKS = ("MutatingWebhookConfiguration", "gpu-admission")
PODS_BINDING = ("ValidatingAdmissionPolicyBinding", "gpu-admission-pods")
CREDS_NS = "install-check-creds"
LABEL = "gpu-admission.io/serviceaccount-credentials"
GAUGE = "gpu_admission_admission_object_state"


def _base(kind: str, name: str) -> dict[str, Any]:
    docs = render("manifests")
    return next(d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name))


@pytest.fixture
def installed(real_cluster: ControlPlane, kubectl: Kubectl) -> Iterator[ControlPlane]:
    """The base, and its two webhook configurations for this test only: they name the Service
    `gpu-admission`, which nothing here serves, so they go before the tier checks that none is
    left, and no other test meets them."""
    apply_base(kubectl)
    webhooks = [d for d in render("manifests") if d["kind"] in WEBHOOK_KINDS]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(webhooks))
    try:
        yield real_cluster
    finally:
        for kind in WEBHOOK_KINDS:
            kubectl("delete", kind, "gpu-admission", "--ignore-not-found")
        kubectl("delete", "namespace", CREDS_NS, "--ignore-not-found", "--wait=false")


def _as_controller(api: client.ApiClient) -> client.ApiClient:
    return client.ApiClient(
        api.configuration, header_name="Impersonate-User", header_value=CONTROLLER
    )


async def _until(
    checker: InstallChecker, predicate: Callable[[InstallReport], bool], what: str
) -> InstallReport:
    async def reported() -> None:
        async with checker.published:
            await checker.published.wait_for(
                lambda: checker.report is not None and predicate(checker.report)
            )

    try:
        await asyncio.wait_for(reported(), 60)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}: {checker.report}") from None
    assert checker.report is not None
    return checker.report


def _state(report: InstallReport, key: tuple[str, str]) -> ObjectState:
    return next(o.state for o in report.objects if (o.kind, o.name) == key)


async def _event(api: client.ApiClient, reason: str, words: str) -> client.CoreV1Event:
    """The Warning Event on the service's Deployment (sent in the background: waited for)."""
    core = client.CoreV1Api(api)
    selector = f"involvedObject.kind=Deployment,involvedObject.name=gpu-admission,reason={reason}"
    deadline = time.monotonic() + 30
    while True:
        listed = await asyncio.to_thread(
            core.list_namespaced_event, "gpu-admission", field_selector=selector
        )
        found = [e for e in listed.items if words in e.message]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"no {reason} Event saying {words!r}"
        await asyncio.sleep(0.1)  # polling a condition, bounded by the deadline


def _audit(plane: ControlPlane, config: Path | None = None) -> tuple[int, dict[str, Any], str]:
    out, table, err = io.StringIO(), io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        kubeconfig=plane.kubeconfig, config=config, output="json", namespace=CREDS_NS, sources=False
    )
    status = audit_command(args, out, err)
    audit_command(argparse.Namespace(**{**vars(args), "output": "table"}), table, io.StringIO())
    return status, json.loads(out.getvalue())["installedAdmissionObjects"], table.getvalue()


async def test_the_install_reports_what_was_done_to_it_and_clears(
    installed: ControlPlane, api: client.ApiClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    config = Config.model_validate(
        {
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
        }
    )
    metrics = Metrics(process_metrics=False)
    process = ControllerProcess(config, _as_controller(api), metrics, identity="install-check")
    checker = process.install_check
    checker.recount_seconds = 0.5  # pods are counted on a timer as well as on changes
    await process.start()
    try:
        report = await _until(checker, lambda r: not r.problems, "every object ok")
        assert report.layout == "manifests/" and report.isolation_enforced
        labels = {"kind": MAP[0], "name": MAP[1]}
        assert metrics.registry.get_sample_value(GAUGE, {**labels, "state": "ok"}) == 1.0

        # A GitOps prune, a partial apply: the MutatingAdmissionPolicy is gone.
        kubectl("delete", *MAP)
        report = await _until(
            checker, lambda r: _state(r, MAP) is ObjectState.MISSING, "the policy missing"
        )
        assert not report.isolation_enforced
        assert metrics.registry.get_sample_value(GAUGE, {**labels, "state": "missing"}) == 1.0
        event = await _event(api, "AdmissionObjectMissing", MAP[1])
        assert event.type == "Warning"
        assert "NVIDIA_VISIBLE_DEVICES=none" in event.message
        assert "Fix: kubectl apply -k manifests/" in event.message
        status, section, table = await asyncio.to_thread(_audit, installed)
        assert status != 0 and section["gpuIsolationEnforced"] is False
        assert "GPU isolation: NOT enforced: MutatingAdmissionPolicy" in table
        kubectl("apply", "-f", "-", stdin=json.dumps(_base(*MAP)))
        await _until(checker, lambda r: not r.problems, "the policy back")
        assert metrics.registry.get_sample_value(GAUGE, {**labels, "state": "ok"}) == 1.0

        # An edited routing condition, and a binding left in Audit after a trial.
        kubectl(
            "patch",
            *WEBHOOKS,
            "--type=json",
            "-p",
            json.dumps([{"op": "remove", "path": "/webhooks/0/matchConditions/1"}]),
        )
        kubectl(
            "patch",
            *PODS_BINDING,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"validationActions": ["Audit"]}}),
        )
        report = await _until(
            checker,
            lambda r: {(o.kind, o.name) for o in r.problems} == {WEBHOOKS, PODS_BINDING},
            "the webhooks and the binding stale",
        )
        stale = {(o.kind, o.name): o for o in report.problems}
        assert "webhooks[0].matchConditions has 1 item(s), expected 2" in stale[WEBHOOKS].detail
        assert '"Audit", expected "Deny"' in stale[PODS_BINDING].detail
        await _event(api, "AdmissionObjectStale", "validationActions")
        await _event(api, "AdmissionObjectStale", "matchConditions")
        for key in (WEBHOOKS, PODS_BINDING):
            kubectl("apply", "-f", "-", stdin=json.dumps(_base(*key)))
        await _until(checker, lambda r: not r.problems, "both put right")

        # A bound ServiceAccount in a namespace whose label routes its pods no more.
        namespace_ready(api, CREDS_NS, labels={LABEL: "true"})
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": "trainer",
                "namespace": CREDS_NS,
                "annotations": {"gpu-admission.io/cloud-credentials": "s3-creds"},
            },
        }
        await _applied(kubectl, account)  # the guard reads the label from its cache
        kubectl("label", "namespace", CREDS_NS, f"{LABEL}=false", "--overwrite")
        report = await _until(checker, lambda r: bool(r.credentials), "the unrouted binding")
        (finding,) = report.credentials
        assert (finding.namespace, finding.service_account) == (CREDS_NS, "trainer")
        assert finding.running_without == 0
        command = f"kubectl label namespace {CREDS_NS} {LABEL}=true --overwrite"
        assert (await _event(api, "CredentialsNotRouted", command)).type == "Warning"
        # A pod of it starts (its phase written as a kubelet writes it): counted.
        await asyncio.to_thread(_running_pod, api)
        await _until(
            checker,
            lambda r: [c.running_without for c in r.credentials] == [1],
            "the pod without credentials counted",
        )
        series = {"namespace": CREDS_NS, "serviceaccount": "trainer"}
        value = metrics.registry.get_sample_value("gpu_admission_credentials_not_routed", series)
        assert value == 1.0
        status, section, table = await asyncio.to_thread(_audit, installed)
        assert section["credentialsNotRouted"][0]["runningPodsWithout"] == 1
        assert command in table

        # Another guarded env name in the configuration, against the default install.
        other = tmp_path / "config.yaml"
        other.write_text(yaml.safe_dump({"gpu": {"guarded_env": ["ROCR_VISIBLE_DEVICES"]}}))
        status, section, table = await asyncio.to_thread(_audit, installed, other)
        stale_names = {o["name"] for o in section["objects"] if o["state"] == "stale"}
        assert {"gpu-admission-pods", "gpu-admission"} <= stale_names
        assert "installed admission objects (manifests/):" in table
    finally:
        await process.stop()


async def _applied(kubectl: Kubectl, obj: dict[str, Any]) -> None:
    deadline = time.monotonic() + 30
    while kubectl("apply", "-f", "-", stdin=json.dumps(obj), check=False).returncode != 0:
        assert time.monotonic() < deadline, "the binding was never admitted"
        await asyncio.sleep(0.1)  # polling a condition, bounded by the deadline


def _running_pod(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "trains"},
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [{"name": "c", "image": "python"}],
        },
    }
    core.create_namespaced_pod(CREDS_NS, pod)
    core.patch_namespaced_pod_status("trains", CREDS_NS, {"status": {"phase": "Running"}})
