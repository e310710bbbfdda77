"""Certificates in a TLS Secret and caBundle in the webhook configurations, through the official
client against the real kube-apiserver; and its admission calls verifying the served
certificate against the published caBundle across a CA rotation."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from certs.cabundle import MUTATING, VALIDATING, CABundleSyncer, SyncResult, bundle_patch
from certs.issue import (
    CertBundle,
    ServingSpec,
    issue_bundle,
    issue_ca,
    issue_serving,
    renew_bundle,
)
from certs.reloader import CertReloader
from certs.store import TLS_SECRET_TYPE, SecretStore
from tests.world.namespaces import namespace_ready

NAMESPACE = "gpu-system"
SERVICE = "gpu-admission"
SPEC = ServingSpec(service=SERVICE, namespace=NAMESPACE)
# The certificate of a webhook kube-apiserver calls by URL (nothing routes the Service here).
BY_URL = ServingSpec(service=SERVICE, namespace=NAMESPACE, ips=["127.0.0.1"])
TIMEOUT = 30.0


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    namespace_ready(kube_client, NAMESPACE)
    return client.CoreV1Api(kube_client)


@pytest.fixture
def admission_api(kube_client: client.ApiClient) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(kube_client)


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return issue_bundle(SPEC)


# ------------------------------------------------------------------------------ Secret store


def test_secret_store_round_trip(core: client.CoreV1Api, bundle: CertBundle) -> None:
    store = SecretStore(core, NAMESPACE, "gpu-admission-tls")
    assert store.load() is None
    assert store.save(bundle) == bundle
    secret = core.read_namespaced_secret("gpu-admission-tls", NAMESPACE)
    assert secret.type == TLS_SECRET_TYPE
    assert sorted(secret.data or {}) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert SecretStore(core, NAMESPACE, "gpu-admission-tls").load() == bundle


def test_replicas_racing_to_create_agree_on_the_first_writer(
    core: client.CoreV1Api, bundle: CertBundle
) -> None:
    first, second = (SecretStore(core, NAMESPACE, "tls") for _ in range(2))
    assert first.load() is None and second.load() is None  # both see nothing and issue
    other = issue_bundle(SPEC)
    assert first.save(bundle) == bundle
    assert second.save(other) == bundle  # 409 AlreadyExists: the stored one is adopted


def test_replicas_racing_to_renew_agree_on_the_first_writer(
    core: client.CoreV1Api, bundle: CertBundle
) -> None:
    first, second = (SecretStore(core, NAMESPACE, "tls") for _ in range(2))
    first.save(bundle)
    assert first.load() == bundle and second.load() == bundle
    due = bundle.renew_at()
    mine, theirs = renew_bundle(bundle, SPEC, now=due), renew_bundle(bundle, SPEC, now=due)
    assert first.save(mine) == mine
    assert second.save(theirs) == mine  # 409 Conflict on the stale resourceVersion
    # The loser's resourceVersion is current again, so its next write goes through.
    later = renew_bundle(mine, SPEC, now=mine.renew_at())
    assert second.save(later) == later
    assert first.load() == later


def test_a_corrupted_secret_is_refused_naming_the_key(
    core: client.CoreV1Api, bundle: CertBundle
) -> None:
    store = SecretStore(core, NAMESPACE, "tls")
    store.save(bundle)
    other = issue_bundle(SPEC)
    core.patch_namespaced_secret(
        "tls", NAMESPACE, {"data": {"tls.key": base64.b64encode(other.key_pem).decode()}}
    )
    with pytest.raises(Exception, match=f"Secret {NAMESPACE}/tls key tls.key does not belong"):
        store.load()


async def test_replicas_managing_one_secret_serve_one_certificate(core: client.CoreV1Api) -> None:
    replicas = [CertReloader() for _ in range(3)]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(
            r.run(SecretStore(core, NAMESPACE, "tls"), SPEC, poll_interval=0.05, stop=stop)
        )
        for r in replicas
    ]
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while not all(r.loaded for r in replicas):
            assert loop.time() < deadline, "replicas did not load a certificate in time"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
    stored = SecretStore(core, NAMESPACE, "tls").load()
    assert stored is not None
    assert {r.serial for r in replicas} == {stored.serial}


# ------------------------------------------------------------------------------ caBundle


def webhook(name: str, path: str, url: str | None) -> dict[str, Any]:
    """A pod webhook for NAMESPACE only; by `url` when given, else by the Service."""
    target: dict[str, Any] = {"namespace": NAMESPACE, "name": SERVICE, "path": path}
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": f"{url}{path}"} if url else {"service": target},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
            }
        ],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }
    return hook


def create_configurations(
    api: client.AdmissionregistrationV1Api,
    names: tuple[str, ...] = ("a", "b"),
    url: str | None = None,
) -> None:
    """Both configurations, with webhooks as a fresh `kubectl apply` leaves them: no caBundle."""
    for kind, create in (
        (MUTATING, api.create_mutating_webhook_configuration),
        (VALIDATING, api.create_validating_webhook_configuration),
    ):
        path = "/mutate/pods" if kind == MUTATING else "/validate/pods"
        hooks = [webhook(f"{n}.gpu-admission.io", path, url) for n in names]
        create(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": "gpu-admission"},
                "webhooks": hooks,
            }
        )


def published(api: client.AdmissionregistrationV1Api) -> list[str]:
    configurations = [
        api.read_mutating_webhook_configuration("gpu-admission"),
        api.read_validating_webhook_configuration("gpu-admission"),
    ]
    return [
        base64.b64decode(w.client_config.ca_bundle or "").decode()
        for c in configurations
        for w in c.webhooks or []
    ]


def test_ca_bundle_is_set_on_every_webhook_and_only_written_when_it_differs(
    kube_api, admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle
) -> None:
    create_configurations(admission_api)
    syncer = CABundleSyncer(admission_api)
    first = syncer.sync(bundle.ca_bundle_pem)
    assert first.updated == [MUTATING, VALIDATING] and first.complete
    assert published(admission_api) == [bundle.ca_bundle_pem.decode()] * 4

    kube_api.faults.reset_counts()
    again = syncer.sync(bundle.ca_bundle_pem)
    assert again.unchanged == [MUTATING, VALIDATING]
    assert kube_api.faults.request_count("PATCH") == 0
    assert kube_api.faults.request_count("PUT") == 0

    rotated = renew_bundle(bundle, SPEC, now=bundle.ca_renew_at())
    assert syncer.sync(rotated.ca_bundle_pem).updated == [MUTATING, VALIDATING]
    assert published(admission_api) == [(rotated.ca_cert_pem + bundle.ca_cert_pem).decode()] * 4


def test_missing_configurations_are_reported_then_filled_in_later(
    admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle
) -> None:
    syncer = CABundleSyncer(admission_api)
    result = syncer.sync(bundle.ca_bundle_pem)
    assert result.missing == [MUTATING, VALIDATING] and not result.complete
    create_configurations(admission_api)
    assert syncer.sync(bundle.ca_bundle_pem).updated == [MUTATING, VALIDATING]


async def test_the_sync_loop_restores_a_bundle_that_was_reset(
    admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle
) -> None:
    syncer = CABundleSyncer(admission_api)
    stop = asyncio.Event()
    task = asyncio.create_task(syncer.run(lambda: bundle, interval=0.05, stop=stop))
    try:
        # Created after the loop started, as when the manifests are applied after the service.
        await asyncio.to_thread(create_configurations, admission_api)
        wanted = [bundle.ca_bundle_pem.decode()] * 4
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while await asyncio.to_thread(published, admission_api) != wanted:
            assert loop.time() < deadline, "caBundle was not published in time"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)


async def test_configurations_written_after_the_service_started_get_their_bundle_soon(
    admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle, caplog
) -> None:
    """The controller writes the webhook configurations once it leads, often after the service
    has started: they are looked for again from one second on, not at the 60 s interval."""
    syncer = CABundleSyncer(admission_api)
    stop = asyncio.Event()
    task = asyncio.create_task(syncer.run(lambda: bundle, stop=stop))  # the default interval
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while "does not exist yet" not in caplog.text:  # the loop has looked once
            assert loop.time() < deadline, "the sync loop did not look for the configurations"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(create_configurations, admission_api)
        wanted = [bundle.ca_bundle_pem.decode()] * 4
        while await asyncio.to_thread(published, admission_api) != wanted:
            assert loop.time() < deadline, "caBundle was not published before the interval"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)
    assert caplog.text.count("does not exist yet") == 1  # said once, however often looked for


async def test_an_api_server_outage_is_said_once_by_the_sync_loop_and_its_end_once(
    kube_api, admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="certs.cabundle")
    await asyncio.to_thread(create_configurations, admission_api)
    # Straight to kube-apiserver, which the outage stops (the fault proxy would answer 503).
    direct = kube_config.new_client_from_config(str(kube_api.plane.kubeconfig))
    syncer = CABundleSyncer(client.AdmissionregistrationV1Api(direct))
    attempts = 0
    publish = syncer._publish  # what the loop calls each round

    async def counted(published: CertBundle) -> SyncResult:
        nonlocal attempts
        attempts += 1
        return await publish(published)

    syncer._publish = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def until(condition: Any, what: str) -> None:
        deadline = loop.time() + TIMEOUT
        while not condition():
            assert loop.time() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)  # polling a condition, bounded by the deadline

    kube_api.go_offline()
    task = asyncio.create_task(syncer.run(lambda: bundle, interval=0.05, stop=stop))
    try:
        await until(lambda: attempts >= 5, "five failed attempts")
        kube_api.come_back()  # on this thread: the server dies with the thread that started it
        await until(lambda: "can be updated again" in caplog.text, "the recovery line")
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)
        direct.close()
    ours = [r for r in caplog.records if r.name == "certs.cabundle"]
    said = [(r.levelname, r.getMessage()) for r in ours if r.levelno >= logging.INFO]
    outage = [message for level, message in said if level == "WARNING"]
    assert outage == [
        "cannot update caBundle in gpu-admission (connection refused); retrying every 0.05 s"
    ]
    [back] = [message for _, message in said if "can be updated again" in message]
    assert back.startswith("caBundle in gpu-admission can be updated again after ")
    assert not any(r.exc_info for r in ours)  # no tracebacks for an outage


def test_a_patch_computed_before_the_webhooks_changed_does_not_apply(
    admission_api: client.AdmissionregistrationV1Api, bundle: CertBundle
) -> None:
    create_configurations(admission_api)
    before = admission_api.read_validating_webhook_configuration("gpu-admission")
    operations = bundle_patch(before.webhooks or [], "c3RhbGU=")
    # Someone reorders the webhooks between the read and the patch.
    reordered = admission_api.read_validating_webhook_configuration("gpu-admission")
    reordered.webhooks = list(reversed(reordered.webhooks or []))
    admission_api.replace_validating_webhook_configuration("gpu-admission", reordered)
    with pytest.raises(ApiException) as caught:
        admission_api.patch_validating_webhook_configuration("gpu-admission", operations)
    assert caught.value.status == 422
    # sync re-reads and patches the webhooks where they are now.
    CABundleSyncer(admission_api).sync(bundle.ca_bundle_pem)
    assert set(published(admission_api)) == {bundle.ca_bundle_pem.decode()}


# ------------------------------------------------------------------------------ end to end


@dataclass
class WebhookServer:
    reloader: CertReloader
    url: str


@pytest.fixture
async def webhook_server(kube_api) -> AsyncIterator[WebhookServer]:
    """An HTTPS webhook that allows everything, for kube-apiserver to call by URL. It closes
    each connection after its answer, so every call is a new TLS handshake with the certificate
    served at that moment (kube-apiserver would otherwise keep the connection alive)."""
    reloader = CertReloader()

    async def allow(request: web.Request) -> web.Response:
        review = await request.json()
        answer = {"uid": review["request"]["uid"], "allowed": True}
        response = web.json_response({**review, "response": answer})
        response.force_close()
        return response

    app = web.Application()
    app.router.add_post("/validate/pods", allow)
    app.router.add_post("/mutate/pods", allow)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=reloader.context)
    await site.start()
    try:
        yield WebhookServer(reloader, f"https://127.0.0.1:{runner.addresses[0][1]}")
    finally:
        await runner.cleanup()


def create_pod(core: client.CoreV1Api, name: str, dry_run: bool = False) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    if dry_run:
        core.create_namespaced_pod(NAMESPACE, pod, dry_run="All")
    else:
        core.create_namespaced_pod(NAMESPACE, pod)


async def once_trusted(core: client.CoreV1Api, name: str) -> None:
    """Create the pod once kube-apiserver trusts the webhook: it loads a changed caBundle from
    its own informer, a moment after the write (dry runs until then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while True:
        try:
            await asyncio.to_thread(create_pod, core, name, True)
            break
        except ApiException as error:
            assert loop.time() < deadline, f"the webhook never became trusted: {error.body}"
            await asyncio.sleep(0.05)  # polling a condition, bounded by the deadline
    await asyncio.to_thread(create_pod, core, name)


async def test_api_server_keeps_trusting_the_service_across_a_ca_rotation(
    core: client.CoreV1Api,
    admission_api: client.AdmissionregistrationV1Api,
    webhook_server: WebhookServer,
) -> None:
    syncer = CABundleSyncer(admission_api)
    serving = webhook_server.reloader
    await asyncio.to_thread(create_configurations, admission_api, ("only",), webhook_server.url)
    # A CA two days into a three-day life (past its renewal point) with a fresh serving cert.
    spec = ServingSpec(
        service=SERVICE,
        namespace=NAMESPACE,
        ips=["127.0.0.1"],
        validity=timedelta(days=1),
        ca_validity=timedelta(days=3),
    )
    ca_cert, ca_key = issue_ca(validity=spec.ca_validity, now=datetime.now(UTC) - timedelta(days=2))
    first = CertBundle(ca_cert, ca_key, *issue_serving(ca_cert, ca_key, spec))
    await syncer.publish(first)
    serving.reload(first)
    await once_trusted(core, "before-rotation")

    # Serving a certificate from a CA that was not published: the API server refuses it.
    serving.reload(issue_bundle(BY_URL))
    with pytest.raises(ApiException) as caught:
        await asyncio.to_thread(create_pod, core, "untrusted")
    assert "x509: certificate signed by unknown authority" in str(caught.value.body)
    serving.reload(first)

    # The watcher's order: publish both CAs, then serve the certificate from the new CA.
    rotated = renew_bundle(first, spec)
    assert rotated.ca_cert_pem != first.ca_cert_pem
    await syncer.publish(rotated)
    # A replica still serving the old certificate is trusted during the overlap...
    await asyncio.to_thread(create_pod, core, "overlap-old-certificate")
    serving.reload(rotated)
    # ...and so is the new certificate, once the server has the new bundle.
    await once_trusted(core, "after-rotation")
