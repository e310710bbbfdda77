"""CertificateService: what `serve` does with certificates, from start-up to shutdown."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path

import pytest
from kubernetes import client

from certs.issue import ServingSpec, issue_bundle, renew_bundle
from certs.service import CertificateService
from certs.store import FileStore, SecretStore
from gpu_admission.config import CertConfig

NAMESPACE = "gpu-system"
TIMEOUT = 30.0


def configuration(name: str = "gpu-admission") -> dict:
    hook = {
        "name": "pods.gpu-admission.io",
        "clientConfig": {"service": {"namespace": NAMESPACE, "name": "gpu-admission"}},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    return {"metadata": {"name": name}, "webhooks": [hook]}


async def wait_until(predicate, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not await asyncio.to_thread(predicate):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_empty_cert_dir_is_filled_served_and_published(
    tmp_path: Path, kube_client: client.ApiClient
) -> None:
    admission = client.AdmissionregistrationV1Api(kube_client)
    admission.create_validating_webhook_configuration(configuration())
    config = CertConfig(cert_dir=tmp_path, namespace=NAMESPACE, extra_ips=["127.0.0.1"])
    service = CertificateService(config, admission_api=admission, sync_interval=0.05)
    assert not service.loaded
    bundle = await service.start()
    try:
        assert service.loaded and service.reloader.serial == bundle.serial
        assert FileStore(tmp_path).load() == bundle
        assert service.context.minimum_version == ssl.TLSVersion.TLSv1_2
        wanted = base64.b64encode(bundle.ca_bundle_pem).decode()
        hook = admission.read_validating_webhook_configuration("gpu-admission").webhooks[0]
        assert hook.client_config.ca_bundle == wanted
        # The Mutating configuration is applied later; the sync loop fills it in.
        admission.create_mutating_webhook_configuration(configuration())
        await wait_until(
            lambda: (
                admission.read_mutating_webhook_configuration("gpu-admission")
                .webhooks[0]
                .client_config.ca_bundle
                == wanted
            ),
            "the late configuration to get the caBundle",
        )
    finally:
        await service.stop()


async def test_secret_store_is_used_when_named(kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    config = CertConfig(secret_name="gpu-admission-tls", namespace=NAMESPACE)
    service = CertificateService(config, core_api=core)
    bundle = await service.start()
    try:
        assert SecretStore(core, NAMESPACE, "gpu-admission-tls").load() == bundle
        # A second replica starting later serves the same certificate.
        other = CertificateService(config, core_api=core)
        assert (await other.start()).serial == bundle.serial
        await other.stop()
    finally:
        await service.stop()


async def test_a_directory_without_ca_key_is_only_watched(tmp_path: Path) -> None:
    spec = ServingSpec(service="gpu-admission", namespace=NAMESPACE)
    first = issue_bundle(spec)
    for name, value in (("tls.crt", first.cert_pem), ("tls.key", first.key_pem)):
        (tmp_path / name).write_bytes(value)
    service = CertificateService(CertConfig(cert_dir=tmp_path), poll_interval=0.05)
    await service.start()
    try:
        assert service.reloader.serial == first.serial
        second = renew_bundle(first, spec)
        (tmp_path / "tls.key").write_bytes(second.key_pem)
        (tmp_path / "tls.crt").write_bytes(second.cert_pem)
        await wait_until(lambda: service.reloader.serial == second.serial, "the new certificate")
        # Nothing was issued or written here: the directory is someone else's.
        assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt", "tls.key"]
    finally:
        await service.stop()


def test_a_place_for_certificates_is_required() -> None:
    with pytest.raises(ValueError, match="--cert-dir"):
        CertificateService(CertConfig())
    with pytest.raises(ValueError, match="Kubernetes client"):
        CertificateService(CertConfig(secret_name="tls"))
