"""The install's self-check on an API server that serves no MutatingAdmissionPolicy, as 1.30 to
1.35 do: a real kube-apiserver 1.36.2 with the resource and its admission plugin turned off
(`--runtime-config admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false`, its
binding's too, `--disable-admission-plugins MutatingAdmissionPolicy`), on a control plane of its
own. There `kubectl apply -k manifests/` fails on the policy with the message the docs quote and
applies the rest: the check names that as the docs' mistake, and expects the overlay's objects
once the overlay is applied."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import config as kube_config

from commands.audit import EXIT_FINDINGS, audit_command
from commands.controller import ControllerProcess
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests import ROOT
from tests.real_api.test_install_check import _until
from tests.world import control_plane
from tests.world.harness import KUBECTL
from tests.world.real_cluster import unavailable

pytestmark = pytest.mark.e2e

OLDER = [
    "--disable-admission-plugins=MutatingAdmissionPolicy",
    "--runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false,"
    "admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings=false",
]
OVERLAY = "manifests/overlays/webhook-pod-mutations/"


@pytest.fixture(scope="module")
def older() -> Iterator[control_plane.ControlPlane]:
    try:
        plane = control_plane.start()
    except control_plane.Unavailable as error:
        unavailable(str(error))
    try:
        plane.stop_apiserver()
        plane.apiserver_argv += OLDER
        plane.start_apiserver()
        yield plane
    finally:
        plane.stop()


def _kubectl(plane: control_plane.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(plane.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _section(plane: control_plane.ControlPlane) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    args = argparse.Namespace(
        kubeconfig=plane.kubeconfig, config=None, output="json", namespace=None, sources=False
    )
    status = audit_command(args, out, io.StringIO())
    return status, json.loads(out.getvalue())["installedAdmissionObjects"]


async def test_the_base_on_an_older_server_is_named_and_the_overlay_is_expected(
    older: control_plane.ControlPlane,
) -> None:
    applied = _kubectl(older, "apply", "-k", str(ROOT / "manifests"))
    assert applied.returncode != 0
    assert 'no matches for kind "MutatingAdmissionPolicy" in version' in applied.stderr
    status, section = await asyncio.to_thread(_section, older)
    assert status == EXIT_FINDINGS and section["layout"] == OVERLAY
    assert section["gpuIsolationEnforced"] is False
    webhooks = next(o for o in section["objects"] if o["kind"] == "MutatingWebhookConfiguration")
    assert webhooks["state"] == "stale"
    assert webhooks["detail"].startswith("the base (kubectl apply -k manifests/) was applied")
    assert webhooks["fix"] == f"kubectl apply -k {OVERLAY}"

    # The controller's watch sees the same: the policy kinds answer 404, their informers empty.
    api = kube_config.new_client_from_config(str(older.kubeconfig))
    settings = Config.model_validate(
        {"server": {"metrics_port": 0}, "leader_election": {"retry_period_seconds": 0.2}}
    )
    process = ControllerProcess(settings, api, Metrics(process_metrics=False), identity="older")
    await process.start()
    try:
        report = await _until(
            process.install_check, lambda r: r.layout == OVERLAY, "the older server's layout"
        )
        stale = {(o.kind, o.name) for o in report.problems}
        assert ("MutatingWebhookConfiguration", "gpu-admission") in stale
    finally:
        await process.stop()

    # As the docs say: the overlay. The base's guards it does not hold stay behind until
    # deleted, and are named as leftovers; then all is as the overlay expects.
    assert _kubectl(older, "apply", "-k", str(ROOT / OVERLAY)).returncode == 0
    status, section = await asyncio.to_thread(_section, older)
    leftovers = {o["name"]: o["fix"] for o in section["objects"] if o["state"] != "ok"}
    assert set(leftovers) == {
        "gpu-admission-serviceaccount-credentials",
        "gpu-admission-credential-namespaces",
    }
    for fix in set(leftovers.values()):
        assert fix.startswith("kubectl delete ValidatingAdmissionPolicy")
    for name in leftovers:
        for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
            assert _kubectl(older, "delete", kind, name).returncode == 0
    status, section = await asyncio.to_thread(_section, older)
    assert [o for o in section["objects"] if o["state"] != "ok"] == []
    assert section["gpuIsolationEnforced"] is True
