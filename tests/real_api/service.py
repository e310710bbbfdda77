"""The webhook service, registered with a real kube-apiserver: the manifests' webhook
configurations with each `clientConfig.service` turned into the URL of the service running here
(kube-apiserver calls a webhook by URL when nothing routes its Service name; it verifies the
certificate against `caBundle`, issued here for 127.0.0.1), the service's config from the
ConfigMap, its view fed by informers watching the real server.

Webhook configurations are cluster-scoped: `served` deletes the ones of the same name first (a
base applied by another module) and its own when the test ends.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config

from gpu_admission.config.model import Config
from tests.world.control_plane import ControlPlane
from tests.world.harness import (
    body,
    by_url,
    delete_webhooks,
    for_config,
    manifest_config,
    manifest_objects,
    start_service,
    with_ca_bundle,
)


@contextlib.contextmanager
def served(plane: ControlPlane, overrides: Mapping[str, Any] | None = None) -> Iterator[Config]:
    """The service running and registered; yields its config."""
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="service-")))
        config = manifest_config(workdir, overrides)
        running = start_service(stack, config, plane.kubeconfig)
        api = kube_config.new_client_from_config(str(plane.kubeconfig))
        stack.callback(api.close)
        address, bundle = running.address, running.bundle
        registration = client.AdmissionregistrationV1Api(api)
        (mutating,) = manifest_objects("MutatingWebhookConfiguration")
        mutating = for_config(mutating, config)
        (validating,) = manifest_objects("ValidatingWebhookConfiguration")
        delete_webhooks(registration, mutating["metadata"]["name"])
        for configuration, create in (
            (mutating, registration.create_mutating_webhook_configuration),
            (validating, registration.create_validating_webhook_configuration),
        ):
            create(body(by_url(with_ca_bundle(configuration, bundle.ca_bundle_pem), address)))
        stack.callback(delete_webhooks, registration, mutating["metadata"]["name"])
        yield config
