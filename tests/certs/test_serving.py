"""The certificates of `serve` (ServingCertificates): choosing the store, issuing into an empty
one, publishing caBundle, and only watching certificates managed elsewhere."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from certs import serving
from certs.issue import ServingSpec, issue_bundle, renew_bundle
from certs.pem import CertificateError
from certs.serving import ServingCertificates
from certs.store import FileStore, SecretStore
from gpu_admission.config.model import CertConfig, ConfigError
from tests.world.namespaces import namespace_ready

NAMESPACE = "gpu-system"
TIMEOUT = 30.0


def configuration(name: str = "gpu-admission") -> dict:
    rule = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
    }
    hook = {
        "name": "pods.gpu-admission.io",
        "clientConfig": {"service": {"namespace": NAMESPACE, "name": "gpu-admission"}},
        "rules": [rule],
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
    config = CertConfig(cert_dir=tmp_path, namespace=NAMESPACE)
    certificates = ServingCertificates(config, kube_client)
    assert certificates.not_ready() == ["certificates"]
    await certificates.load()
    await certificates.start()
    try:
        assert certificates.not_ready() == []
        stored = FileStore(tmp_path).load()
        assert stored is not None and certificates.reloader.serial == stored.serial
        hook = admission.read_validating_webhook_configuration("gpu-admission").webhooks[0]
        assert hook.client_config.ca_bundle == base64.b64encode(stored.ca_bundle_pem).decode()
    finally:
        await certificates.stop()


async def test_replicas_sharing_a_secret_serve_one_certificate(
    kube_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_client)
    namespace_ready(core.api_client, NAMESPACE)
    config = CertConfig(secret_name="gpu-admission-tls", namespace=NAMESPACE)
    replicas = [ServingCertificates(config, kube_client) for _ in range(2)]
    await asyncio.gather(*(r.load() for r in replicas))
    stored = SecretStore(core, NAMESPACE, "gpu-admission-tls").load()
    assert stored is not None
    assert [r.reloader.serial for r in replicas] == [stored.serial, stored.serial]


async def test_a_directory_without_ca_key_is_only_watched(tmp_path: Path) -> None:
    spec = ServingSpec(service="gpu-admission", namespace=NAMESPACE)
    first = issue_bundle(spec)
    for name, value in (("tls.crt", first.cert_pem), ("tls.key", first.key_pem)):
        (tmp_path / name).write_bytes(value)
    certificates = ServingCertificates(CertConfig(cert_dir=tmp_path), None, poll_interval=0.05)
    await certificates.load()
    await certificates.start()
    try:
        assert certificates.reloader.serial == first.serial
        second = renew_bundle(first, spec)
        (tmp_path / "tls.key").write_bytes(second.key_pem)
        (tmp_path / "tls.crt").write_bytes(second.cert_pem)
        await wait_until(
            lambda: certificates.reloader.serial == second.serial, "the new certificate"
        )
        # Nothing was issued or written here: the directory is someone else's.
        assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt", "tls.key"]
    finally:
        await certificates.stop()


def test_a_place_for_certificates_is_required() -> None:
    with pytest.raises(ConfigError, match="--cert-dir"):
        ServingCertificates(CertConfig(), None)
    with pytest.raises(ConfigError, match="--cert-dir"):
        ServingCertificates(CertConfig(secret_name="tls"), None)


async def test_the_configured_key_type_is_issued(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa

    config = CertConfig(cert_dir=tmp_path, key_type="rsa-2048")
    certificates = ServingCertificates(config, None, poll_interval=0.05)
    await certificates.load()
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert isinstance(cert.public_key(), rsa.RSAPublicKey)
    assert cert.public_key().key_size == 2048


class _ApiStore(SecretStore):
    """The Secret store, its API calls answered as the kubernetes client answers them."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.namespace, self.name = "gpu-admission", "gpu-admission-tls"
        self.failures = failures
        self.saved = None

    def load(self):  # type: ignore[no-untyped-def]
        if self.failures:
            raise self.failures.pop(0)
        return None

    def save(self, bundle):  # type: ignore[no-untyped-def]
        self.saved = bundle
        return bundle


def _refused() -> BaseException:
    cause = urllib3.exceptions.NewConnectionError(None, "[Errno 111] Connection refused")  # type: ignore[arg-type]
    return urllib3.exceptions.MaxRetryError(None, "/api/v1/...", cause)  # type: ignore[arg-type]


async def test_an_unreachable_api_server_is_waited_for_in_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(serving, "FIRST_RETRY_SECONDS", 0.01)
    certificates = ServingCertificates(CertConfig(cert_dir=Path("/nonexistent")), None)
    certificates.store = store = _ApiStore([_refused(), _refused(), _refused()])
    with caplog.at_level(logging.INFO):
        await certificates.load()
    assert store.saved is not None and certificates.reloader.current is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "the Kubernetes API server cannot be reached (connection refused; first noticed by the "
        "serving certificate (Secret gpu-admission/gpu-admission-tls)); retrying quietly until "
        "it answers"
    ]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


async def test_a_refused_secret_names_it_and_the_permission() -> None:
    certificates = ServingCertificates(CertConfig(cert_dir=Path("/nonexistent")), None)
    certificates.store = _ApiStore([client.ApiException(status=403, reason="Forbidden")])
    with pytest.raises(CertificateError) as error:
        await certificates.load()
    message = str(error.value)
    assert "Secret gpu-admission/gpu-admission-tls" in message and "HTTP 403 Forbidden" in message
    assert "manifests/base/rbac.yaml" in message
