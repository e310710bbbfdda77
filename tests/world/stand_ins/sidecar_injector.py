"""A sidecar injector played as service meshes and secret injectors run theirs: a mutating
webhook for pod CREATE that appends a container asking for nothing (`istio-proxy`, an agent),
with `reinvocationPolicy: Never`, in a configuration whose name sorts after the project's
(`gpu-admission`), so kube-apiserver calls it after the project's admission has run once."""

from __future__ import annotations

import base64
import copy
from typing import Any

from aiohttp import web

from tests.world.stand_ins import pod_webhook

NAME = "zz-sidecar-injector"  # after "gpu-admission" in the API server's order
PATH = "/inject"
SIDECAR = "injected-proxy"
SELECTOR_LABEL = "sidecar-injection"


def inject(pod: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    made = copy.deepcopy(pod)
    containers = made["spec"].setdefault("containers", [])
    if not any(c.get("name") == SIDECAR for c in containers):
        containers.append({"name": SIDECAR, "image": "registry.example.com/mesh/proxy:1.0"})
    return made, None


def app() -> web.Application:
    return pod_webhook.app(PATH, inject)


def configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """Its MutatingWebhookConfiguration, for namespaces labelled `sidecar-injection=enabled`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            {
                "name": "sidecar.injector.example.com",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": url + PATH,
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "namespaceSelector": {"matchLabels": {SELECTOR_LABEL: "enabled"}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        ],
    }
