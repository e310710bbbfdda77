"""The install checks itself and writes itself, on a real kube-apiserver 1.36: the controller, as
its own ServiceAccount with the base's RBAC, writes the admission objects the configuration
implies (server-side apply, owned by its ClusterRole), puts back each thing an operator or a
GitOps prune can do to them and says so in a Normal Event on the service's Deployment, deletes
a leftover of ours; `gpu-admission audit`, which writes nothing, names what differs."""

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
from tests.world.harness import installed_render

pytestmark = pytest.mark.e2e

CONTROLLER = "system:serviceaccount:gpu-admission:gpu-admission-controller"
MAP = ("MutatingAdmissionPolicy", "gpu-admission-gpu-visibility")
WEBHOOKS = ("MutatingWebhookConfiguration", "gpu-admission")
PODS_BINDING = ("ValidatingAdmissionPolicyBinding", "gpu-admission-pods")
CREDS_NS = "install-check-creds"
LABEL = "gpu-admission.io/serviceaccount-credentials"
GAUGE = "gpu_admission_admission_object_state"
WRITES = "gpu_admission_admission_object_writes_total"
MAP_VAP = ("ValidatingAdmissionPolicy", "gpu-admission-workloads")


def _base(kind: str, name: str) -> dict[str, Any]:
    docs = installed_render("manifests")
    return next(d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name))


@pytest.fixture
def installed(real_cluster: ControlPlane, kubectl: Kubectl) -> Iterator[ControlPlane]:
    """The base with its policies as other tests of the session apply them (by kubectl); the
    webhook configurations the controller writes name the Service `gpu-admission`, which
    nothing here serves, so they go before the tier checks that none is left."""
    apply_base(kubectl)
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


def _live(kubectl: Kubectl, kind: str, name: str) -> dict[str, Any] | None:
    done = kubectl("get", kind, name, "-o", "json", "--show-managed-fields", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


async def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)  # polling a condition, bounded by the deadline


def _owned_by_the_controller(obj: dict[str, Any] | None, role_uid: str) -> bool:
    if obj is None:
        return False
    meta = obj["metadata"]
    managers = {(f["manager"], f["operation"]) for f in meta.get("managedFields") or []}
    return (
        (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpu-admission"
        and [(o["kind"], o["name"], o["uid"]) for o in meta.get("ownerReferences") or []]
        == [("ClusterRole", "gpu-admission-controller", role_uid)]
        and ("gpu-admission-controller", "Apply") in managers
    )


async def test_the_controller_writes_the_install_and_puts_back_what_was_done_to_it(
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
    role = client.RbacAuthorizationV1Api(api).read_cluster_role("gpu-admission-controller")
    uid = str(role.metadata.uid)
    await process.start()
    try:
        # The webhook configurations were missing, the policies applied by kubectl: written,
        # and every object owned by the controller's ClusterRole (gone with the install).
        report = await _until(checker, lambda r: not r.problems, "every object ok")
        assert report.layout == "manifests/" and report.isolation_enforced
        for key in [(o.kind, o.name) for o in report.objects]:
            await _eventually(
                lambda key=key: _owned_by_the_controller(_live(kubectl, *key), uid),
                f"{key} owned by the controller",
            )
        event = await _event(api, "AdmissionObjectsWritten", "MutatingWebhookConfiguration")
        assert event.type == "Normal"
        assert "MutatingWebhookConfiguration gpu-admission applied (it was missing)" in (
            event.message
        )
        labels = {"kind": MAP[0], "name": MAP[1]}
        assert metrics.registry.get_sample_value(GAUGE, {**labels, "state": "ok"}) == 1.0

        # A GitOps prune, a partial apply: the MutatingAdmissionPolicy is gone, and back.
        kubectl("delete", *MAP)
        await _event(api, "AdmissionObjectsWritten", f"{MAP[0]} {MAP[1]} applied (it was missing)")
        await _eventually(lambda: _live(kubectl, *MAP) is not None, "the policy back")
        written = {"kind": MAP[0], "action": "applied", "result": "done"}
        assert metrics.registry.get_sample_value(WRITES, written) >= 1.0

        # An edited routing condition, and a binding left in Audit after a trial: put back.
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
        await _eventually(
            lambda: (
                len((_live(kubectl, *WEBHOOKS) or {})["webhooks"][0]["matchConditions"]) == 2
                and (_live(kubectl, *PODS_BINDING) or {})["spec"]["validationActions"] == ["Deny"]
            ),
            "the routing condition and the binding's actions put back",
        )
        await _event(api, "AdmissionObjectsWritten", f"{PODS_BINDING[1]} applied (it was stale)")

        # A policy of ours the configuration does not imply: deleted.
        leftover = {**_base(*MAP_VAP), "metadata": {"name": "gpu-admission-leftover"}}
        kubectl("apply", "-f", "-", stdin=json.dumps(leftover))
        await _eventually(
            lambda: _live(kubectl, "ValidatingAdmissionPolicy", "gpu-admission-leftover") is None,
            "the leftover deleted",
        )
        await _until(checker, lambda r: not r.problems, "every object ok again")

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
        assert status != 0  # the audit writes nothing: it names what differs
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
