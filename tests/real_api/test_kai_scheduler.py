"""KAI-Scheduler's GPU fractions beside the base's GPU-visibility policy, on the real
kube-apiserver 1.36: KAI's admission webhook (played as its source makes it,
tests/world/stand_ins/kai_webhook.py) runs after the policy, and the API server runs the policy
again after it (`reinvocationPolicy: IfNeeded`). The fraction keeps the visibility KAI gives it;
the same pod under the default scheduler is hidden."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from certs.issue import ServingSpec, issue_bundle
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.webhooks.server_helpers import server_context
from tests.world.harness import WebhookServiceThread, body, wait_until
from tests.world.stand_ins import kai_webhook

NS = "kai-fractions"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


@pytest.fixture(scope="module")
def kai(kubectl: Kubectl, api: client.ApiClient) -> Iterator[None]:
    apply_base(kubectl)
    namespace_ready(api, NS)
    client.NodeV1Api(api).create_runtime_class(
        body({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
              "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    )  # fmt: skip
    bundle = issue_bundle(ServingSpec("kai", "test", ips=["127.0.0.1"]))
    service = WebhookServiceThread(kai_webhook.app, server_context(bundle))
    service.start()
    registration = client.AdmissionregistrationV1Api(api)
    url = f"https://127.0.0.1:{service.port}"
    registration.create_mutating_webhook_configuration(
        body(kai_webhook.configuration(url, bundle.ca_cert_pem))
    )
    try:
        wait_until(lambda: _admitted(api, _pod("probe")) is not None, "KAI's webhook called")
        yield
    finally:
        registration.delete_mutating_webhook_configuration(kai_webhook.NAME)
        client.NodeV1Api(api).delete_runtime_class("nvidia")
        service.stop()


def _pod(name: str, scheduler: str = "kai-scheduler", **annotations: str) -> dict[str, Any]:
    """A researcher's fraction pod, as they write it for KAI: no GPU resource, no env."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-fraction": "0.5", **annotations}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "nvidia/cuda:13.0.2-base-ubi8"},
                {"name": "sidecar", "image": "busybox"},
            ],
        },
    }


def _admitted(api: client.ApiClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod as the API server would store it (a server-side dry run); None until KAI's
    webhook has been applied to it."""
    made = client.CoreV1Api(api).create_namespaced_pod(NS, body(pod), dry_run="All")
    stored = client.ApiClient().sanitize_for_serialization(made)
    annotations = stored["metadata"].get("annotations") or {}
    if pod["spec"]["schedulerName"] == "kai-scheduler" and (
        kai_webhook.MAPS_ANNOTATION not in annotations
    ):
        return None
    return stored


def _visible(pod: dict[str, Any], index: int) -> list[dict[str, Any]]:
    env = pod["spec"]["containers"][index].get("env") or []
    return [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


def test_a_kai_fraction_keeps_the_visibility_kai_gives_it(api: client.ApiClient, kai: None) -> None:
    stored = _admitted(api, _pod("fraction"))
    assert stored is not None
    maps = stored["metadata"]["annotations"][kai_webhook.MAPS_ANNOTATION]
    [given] = _visible(stored, 0)
    assert given["valueFrom"]["configMapKeyRef"] == {
        "name": f"{maps}-0",
        "key": "NVIDIA_VISIBLE_DEVICES",
    }, json.dumps(stored["spec"]["containers"][0])
    assert _visible(stored, 1) == [NONE]  # the sidecar asked for nothing


def test_the_pod_as_kai_leaves_it_is_kept_and_under_the_default_scheduler_hidden(
    api: client.ApiClient, kai: None
) -> None:
    as_kai_leaves_it = _admitted(api, _pod("fraction"))
    assert as_kai_leaves_it is not None
    again = json.loads(json.dumps(as_kai_leaves_it))
    for key in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
        again["metadata"].pop(key, None)
    again.pop("status", None)
    kept = _admitted(api, again)
    assert kept is not None and _visible(kept, 0) == _visible(as_kai_leaves_it, 0)
    again["spec"]["schedulerName"] = "default-scheduler"
    hidden = _admitted(api, again)
    assert hidden is not None and _visible(hidden, 0) == [NONE]


def test_under_kai_the_last_word_on_a_fraction_is_kais_webhook(
    api: client.ApiClient, kai: None
) -> None:
    """A pod for KAI placed by hand (`spec.nodeName`: no scheduler gave it anything), with a
    ConfigMap prefix of its author's: the visibility policy hides it in its first pass, then KAI's
    webhook, which runs after it, writes its env back, and the API server does not run the
    policy again for that change (docs/compatibility.md). What a pod can see through KAI's env
    is KAI's to guard (its `deviceaccess` plugin); the same pod under any other scheduler is
    hidden, as the test above shows."""
    pod = _pod("by-hand", **{kai_webhook.MAPS_ANNOTATION: "mine"})
    pod["spec"]["nodeName"] = "gpu-node-1"
    stored = _admitted(api, pod)
    assert stored is not None
    [given] = _visible(stored, 0)
    assert given["valueFrom"]["configMapKeyRef"]["name"] == "mine-0"
