"""HAMi's GPU sharing beside the base's policies, on the real kube-apiserver 1.36: HAMi's
admission webhook (played as its source makes it, tests/world/stand_ins/hami_webhook.py) adds
`nvidia.com/gpu` to a container that asks only for GPU memory or cores, after the visibility
policy has run. Its memory and cores count as asking for a GPU (`gpu.companion_resources`), so
the policy does not hide such a container and the env guard does not refuse it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.played_webhooks import played_webhook
from tests.world.harness import body, wait_until
from tests.world.stand_ins import hami_webhook

NS = "hami-shares"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


@pytest.fixture(scope="module")
def hami(kubectl: Kubectl, api: client.ApiClient) -> Iterator[None]:
    apply_base(kubectl)
    namespace_ready(api, NS)
    with played_webhook(api, hami_webhook.app, hami_webhook.configuration):
        wait_until(lambda: _counted(_admitted(api, _pod("probe"))), "HAMi's webhook called")
        yield


def _pod(name: str, **limits: str) -> dict[str, Any]:
    """A researcher's pod as HAMi's docs write one: GPU memory only, and a CPU sidecar."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvidia/cuda:13.0.2-base-ubi8",
                    "resources": {"limits": limits or {"nvidia.com/gpumem": "3000"}},
                },
                {"name": "sidecar", "image": "busybox"},
            ],
        },
    }


def _admitted(api: client.ApiClient, pod: dict[str, Any]) -> dict[str, Any] | str:
    """The pod as the API server would store it (a server-side dry run), or its refusal."""
    try:
        made = client.CoreV1Api(api).create_namespaced_pod(NS, body(pod), dry_run="All")
    except client.ApiException as error:
        return str(json.loads(error.body)["message"])
    return dict(client.ApiClient().sanitize_for_serialization(made))


def _counted(pod: dict[str, Any] | str) -> bool:
    return isinstance(pod, dict) and "nvidia.com/gpu" in (
        pod["spec"]["containers"][0]["resources"].get("limits") or {}
    )


def _visible(pod: dict[str, Any], index: int) -> list[dict[str, Any]]:
    env = pod["spec"]["containers"][index].get("env") or []
    return [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


@pytest.mark.parametrize(
    "limits",
    [
        {"nvidia.com/gpumem": "3000"},
        {"nvidia.com/gpumem-percentage": "50"},
        {"nvidia.com/gpucores": "30"},
    ],
    ids=["gpumem", "gpumem-percentage", "gpucores"],
)
def test_a_memory_only_pod_keeps_its_gpu(
    api: client.ApiClient, hami: None, limits: dict[str, str]
) -> None:
    stored = _admitted(api, _pod("share", **limits))
    assert isinstance(stored, dict), stored
    main = stored["spec"]["containers"][0]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"  # HAMi's defaultGPUNum
    assert stored["spec"]["schedulerName"] == hami_webhook.SCHEDULER
    assert _visible(stored, 0) == []  # the device plugin gives it its GPU at Allocate
    assert _visible(stored, 1) == [NONE]  # the sidecar asked for nothing


def test_a_memory_only_container_that_picks_its_gpus_is_refused(
    api: client.ApiClient, hami: None
) -> None:
    """Asking HAMi for memory makes a GPU container: the env guard holds it as any other."""
    pod = _pod("picks")
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    said = _admitted(api, pod)
    assert isinstance(said, str)
    assert 'container "main" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)' in said
