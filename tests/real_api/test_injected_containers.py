"""A container another webhook adds after the project's admission has run is hidden from the GPUs
too, whatever the pod it joins, on the real kube-apiserver 1.36: a sidecar injector played as
service meshes run theirs (tests/world/stand_ins/sidecar_injector.py: reinvocationPolicy Never,
its configuration sorting after the project's) appends a container asking for nothing. The
visibility policy is reinvoked only if it matched the pod in the first pass
(policy/mutating/dispatcher.go), so it must match the pods with nothing to hide yet that the
pods webhook does not see (HAMi's memory alone); a pod with a GPU resource is the webhook's, which
is reinvoked. (A CPU-only pod whose containers all say `none` already is left open:
visibility_mutation.match_condition says why.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.played_webhooks import played_webhook
from tests.real_api.service import served
from tests.world.control_plane import ControlPlane
from tests.world.harness import body, wait_until
from tests.world.stand_ins import sidecar_injector

NS = "injected-sidecars"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


@pytest.fixture(scope="module")
def injector(kubectl: Kubectl, api: client.ApiClient) -> Iterator[None]:
    apply_base(kubectl)
    namespace_ready(api, NS, labels={sidecar_injector.SELECTOR_LABEL: "enabled"})
    with played_webhook(api, sidecar_injector.app, sidecar_injector.configuration):
        wait_until(
            lambda: (
                isinstance(made := _admitted(api, _pod("probe", {})), dict)
                and len(made["spec"]["containers"]) == 2
            ),
            "the injector called",
        )
        yield


def _pod(name: str, main: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "nvidia/cuda:13.0.2-base-ubi8", **main}]},
    }


def _admitted(api: client.ApiClient, pod: dict[str, Any]) -> dict[str, Any] | str:
    """The pod as the API server would store it (a server-side dry run), or its refusal."""
    try:
        made = client.CoreV1Api(api).create_namespaced_pod(NS, body(pod), dry_run="All")
    except client.ApiException as error:
        return str(json.loads(error.body)["message"])
    return dict(client.ApiClient().sanitize_for_serialization(made))


def _visible(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in container.get("env") or [] if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


@pytest.mark.parametrize(
    ("main", "main_keeps"),
    [
        ({}, [NONE]),  # CPU-only: matched in the first pass, having a container to hide
        ({"resources": {"limits": {"nvidia.com/gpumem": "3000"}}}, []),  # HAMi's memory alone
    ],
    ids=["cpu-only", "hami-memory"],
)
def test_a_container_injected_later_is_hidden(
    api: client.ApiClient,
    injector: None,
    main: dict[str, Any],
    main_keeps: list[dict[str, Any]],
) -> None:
    stored = _admitted(api, _pod("worker", main))
    assert isinstance(stored, dict), stored
    containers = {c["name"]: c for c in stored["spec"]["containers"]}
    assert set(containers) == {"main", sidecar_injector.SIDECAR}
    assert _visible(containers[sidecar_injector.SIDECAR]) == [NONE]
    assert _visible(containers["main"]) == main_keeps


def test_a_container_injected_into_a_gpu_pod_is_hidden_by_the_reinvoked_webhook(
    real_cluster: ControlPlane, api: client.ApiClient, injector: None
) -> None:
    """A pod with a GPU resource is the pods webhook's (the visibility policy has nothing to
    hide at first and does not match it): the webhook, `reinvocationPolicy: IfNeeded`, is called
    again after the injector and hides what it added."""
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    seen: list[dict[str, Any] | str] = []
    with served(real_cluster):
        wait_until(
            lambda: isinstance(seen.append(_admitted(api, _pod("trainer", gpu))) or seen[-1], dict),
            "the service registered and answering",
        )
    stored = seen[-1]
    assert isinstance(stored, dict)
    containers = {c["name"]: c for c in stored["spec"]["containers"]}
    assert set(containers) == {"main", sidecar_injector.SIDECAR}
    assert _visible(containers[sidecar_injector.SIDECAR]) == [NONE]
    assert _visible(containers["main"]) == []
