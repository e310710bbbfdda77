"""The install's self-check on an API server that serves no MutatingAdmissionPolicy, as 1.30 to
1.35 do: a real kube-apiserver 1.36.2 with the resource and its admission plugin turned off
(`--runtime-config admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false`, its
binding's too, `--disable-admission-plugins MutatingAdmissionPolicy`), on a control plane of its
own. There `kubectl apply -k manifests/` applies as on 1.36, and the leading controller writes the
objects of the layout the server calls for (webhook-pod-mutations'), over what an earlier
release's base had left."""

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
from webhooks.apiserver_policies.install_expectation import expected_objects
from webhooks.apiserver_policies.webhook_configurations import Layout

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


def _kubectl(
    plane: control_plane.ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    assert KUBECTL
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin,
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


def _earlier_release(plane: control_plane.ControlPlane) -> None:
    """What an earlier release's base left on this server: the 1.36 routing of the webhooks and
    the credential routing's guards (applied by kubectl, owned by nobody)."""
    written = [
        e.obj
        for e in expected_objects(Config(), Layout.BASE)
        if e.obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        or e.obj["metadata"]["name"] in GUARDS
    ]
    applied = _kubectl(plane, "apply", "-f", "-", stdin=json.dumps({"kind": "List",
        "apiVersion": "v1", "items": written}))  # fmt: skip
    assert applied.returncode == 0, applied.stderr


GUARDS = ("gpu-admission-serviceaccount-credentials", "gpu-admission-credential-namespaces")


async def test_on_an_older_server_the_controller_writes_the_layout_it_serves(
    older: control_plane.ControlPlane,
) -> None:
    """`kubectl apply -k manifests/` applies on 1.30 to 1.35 as on 1.36 (the base holds no
    MutatingAdmissionPolicy); the controller writes the objects the server calls for, replacing
    the 1.36 routing an earlier release left and deleting the guards it no longer implies."""
    applied = _kubectl(older, "apply", "-k", str(ROOT / "manifests"))
    assert applied.returncode == 0, applied.stderr
    await asyncio.to_thread(_earlier_release, older)
    status, section = await asyncio.to_thread(_section, older)
    assert status == EXIT_FINDINGS and section["layout"] == OVERLAY
    webhooks = next(o for o in section["objects"] if o["kind"] == "MutatingWebhookConfiguration")
    assert webhooks["state"] == "stale"
    assert webhooks["detail"].startswith("it routes pods as on an API server that serves")

    api = kube_config.new_client_from_config(str(older.kubeconfig))
    settings = Config.model_validate(
        {"server": {"metrics_port": 0}, "leader_election": {"retry_period_seconds": 0.2}}
    )
    process = ControllerProcess(settings, api, Metrics(process_metrics=False), identity="older")
    await process.start()
    try:
        report = await _until(
            process.install_check,
            lambda r: r.layout == OVERLAY and not r.problems,
            "the older server's layout, written",
        )
        assert report.isolation_enforced  # the webhook hides GPUs from every CPU-only pod
    finally:
        await process.stop()
    status, section = await asyncio.to_thread(_section, older)
    assert [o for o in section["objects"] if o["state"] != "ok"] == []
    assert section["gpuIsolationEnforced"] is True
    for name in GUARDS:
        gone = _kubectl(older, "get", "validatingadmissionpolicy", name)
        assert "NotFound" in gone.stderr, gone.stdout
