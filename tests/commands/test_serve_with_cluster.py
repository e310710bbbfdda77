"""The service against the real kube-apiserver, end to end: certificates in a TLS Secret, caBundle
published to the webhook configurations from manifests/, readiness waiting for the informers, and
pods created with the real client mutated or denied by the service over HTTPS (the server calls
it by URL, 127.0.0.1, which its certificate names too: nothing routes the Service here)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as config_loader
from kubernetes.client.exceptions import ApiException

import commands.controller as controller_module
import commands.serve as serve_module
from commands.controller import ControllerProcess
from commands.serve import AdmissionServer
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests import ROOT
from tests.support.ports import free_port
from tests.world.harness import register_webhooks, wait_in_force
from tests.world.namespaces import namespace_ready

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

MANIFESTS = ROOT / "manifests"
SERVICE, NAMESPACE, TLS_SECRET = "gpu-admission", "gpu-admission", "gpu-admission-tls"
WAIT = 30.0


def pod(name: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "resources": resources or {},
                }
            ],
        },
    }


async def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)  # polling a condition, bounded by the deadline


@pytest.fixture
def cluster(kube_api, kube_client):
    port = free_port()
    core = client.CoreV1Api(kube_client)
    registration = client.AdmissionregistrationV1Api(kube_client)
    namespace_ready(kube_client, NAMESPACE)
    core.patch_namespace(NAMESPACE, {"metadata": {"labels": {"gpu-admission.io/exempt": "true"}}})
    namespace_ready(kube_client, "ml")
    # caBundle left for the service to publish; and the pod checks' ValidatingAdmissionPolicy.
    register_webhooks(kube_client, None, f"127.0.0.1:{port}")
    config = Config.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": port, "metrics_port": 0},
            "certs": {
                "service_name": SERVICE,
                "namespace": NAMESPACE,
                "secret_name": TLS_SECRET,
                "extra_ips": ["127.0.0.1"],
            },
        }
    )
    return config, kube_client, core, registration, kube_api


async def in_force(kube_api) -> None:
    """Until kube-apiserver calls the service with the caBundle it published."""
    with config_loader.new_client_from_config(str(kube_api.plane.kubeconfig)) as direct:
        await asyncio.to_thread(wait_in_force, direct, "ml")


async def test_service_in_a_cluster_publishes_its_ca_and_admits_pods(cluster):
    config, api, core, registration, kube_api = cluster
    server = AdmissionServer(config, api, metrics=Metrics(process_metrics=False), extra_services=[])
    await server.start()
    try:
        await wait_until(lambda: server.readiness() == [], "certificates and informer sync")
        await in_force(kube_api)

        secret = await asyncio.to_thread(core.read_namespaced_secret, TLS_SECRET, NAMESPACE)
        assert secret.type == "kubernetes.io/tls"
        ca_pem = base64.b64decode(secret.data["ca.crt"])
        for read in (
            registration.read_mutating_webhook_configuration,
            registration.read_validating_webhook_configuration,
        ):
            configuration = await asyncio.to_thread(read, "gpu-admission")
            for webhook in configuration.webhooks:
                assert base64.b64decode(webhook.client_config.ca_bundle) == ca_pem

        created = await asyncio.to_thread(
            core.create_namespaced_pod, "ml", pod("cpu-only"), _preload_content=False
        )
        env = json.loads(created.data)["spec"]["containers"][0]["env"]
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env

        too_many = pod("greedy", {"limits": {"nvidia.com/gpu.shared": "2"}})
        with pytest.raises(ApiException) as denied:
            await asyncio.to_thread(core.create_namespaced_pod, "ml", too_many)
        assert denied.value.status == 422  # the ValidatingAdmissionPolicy, in the API server
        message = json.loads(denied.value.body)["message"]
        assert message.startswith(
            "pods \"greedy\" is forbidden: ValidatingAdmissionPolicy 'gpu-admission-pods' "
        )
        assert "request 1 nvidia.com/gpu.shared" in message
    finally:
        await server.stop()


async def test_the_webhooks_label_a_dataset_pvc_and_the_controller_process_loads_it(
    cluster, monkeypatch
):
    """The two processes of an install, side by side: `serve` labels the PVC at admission,
    `controller` (its own object, here in-process) takes the Lease and creates the Job. Each
    freezes its long-lived heap once started and once its caches are full."""
    frozen: list[str] = []
    for module in (serve_module, controller_module):
        monkeypatch.setattr(module, "freeze_long_lived", frozen.append)
    config, api, core, _, kube_api = cluster
    config = config.model_copy(
        update={
            "leader_election": config.leader_election.model_copy(
                update={"namespace": NAMESPACE, "retry_period_seconds": 0.2}
            ),
            "server": config.server.model_copy(update={"metrics_port": 0}),
            # Its webhooks would call a Service nothing here serves.
            "install": config.install.model_copy(update={"write_admission_objects": False}),
        }
    )
    server = AdmissionServer(config, api, metrics=Metrics(process_metrics=False))
    controller = ControllerProcess(config, api, Metrics(process_metrics=False))
    await server.start()
    await controller.start()
    try:
        await wait_until(lambda: server.readiness() == [], "certificates and informer sync")
        await in_force(kube_api)
        claim = {
            "metadata": {
                "name": "imagenet",
                "annotations": {"gpu-admission.io/data-source": "s3://ml-datasets/imagenet"},
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        await asyncio.to_thread(core.create_namespaced_persistent_volume_claim, "ml", claim)
        coordination = client.CoordinationV1Api(api)
        batch = client.BatchV1Api(api)

        def leader() -> str | None:
            try:
                lease = coordination.read_namespaced_lease(
                    config.leader_election.lease_name, NAMESPACE
                )
            except ApiException:
                return None
            return lease.spec.holder_identity

        await wait_until(lambda: leader() is not None, "the controller to take the Lease")
        await wait_until(lambda: len(batch.list_namespaced_job("ml").items) == 1, "the loader Job")
        job = batch.list_namespaced_job("ml").items[0]
        assert job.metadata.owner_references[0].kind == "PersistentVolumeClaim"
        assert controller.readiness() == []
        await wait_until(lambda: len(frozen) == 4, "both heaps frozen twice")
        assert sorted(frozen) == ["caches synced", "informers synced", "started", "started"]
    finally:
        await controller.stop()
        await server.stop()
