"""Another project's mutating webhook, played on 127.0.0.1 beside the base (HAMi's, KAI's, a
sidecar injector's: tests/world/stand_ins), registered on the real API server with its own
configuration for as long as a test module needs it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from kubernetes import client

from certs.issue import ServingSpec, issue_bundle
from tests.webhooks.server_helpers import server_context
from tests.world.harness import WebhookServiceThread, body


@contextmanager
def played_webhook(
    api: client.ApiClient,
    app: Callable[[], web.Application],
    configuration: Callable[[str, bytes], dict[str, Any]],
) -> Iterator[None]:
    """`app` served over TLS with a certificate of its own, and `configuration(url, ca)`
    registered; both gone afterwards."""
    bundle = issue_bundle(ServingSpec("played-webhook", "test", ips=["127.0.0.1"]))
    service = WebhookServiceThread(app, server_context(bundle))
    service.start()
    registration = client.AdmissionregistrationV1Api(api)
    made = configuration(f"https://127.0.0.1:{service.port}", bundle.ca_cert_pem)
    try:
        registration.create_mutating_webhook_configuration(body(made))
        try:
            yield
        finally:
            registration.delete_mutating_webhook_configuration(made["metadata"]["name"])
    finally:
        service.stop()
