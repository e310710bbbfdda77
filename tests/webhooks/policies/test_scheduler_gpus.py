"""A GPU-sharing scheduler's pods keep the visibility it gives them (KAI-Scheduler's fractions):
the pod exactly as KAI's webhook leaves it keeps its NVIDIA_VISIBLE_DEVICES, in the webhook's
policy and in `review` (the API server's policy, on the real server: tests/real_api); the same
shape under another scheduler, placed by hand, or from a ConfigMap that is not KAI's, is hidden."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policy_helpers import mutate_twice
from webhooks.apiserver_policies.visibility_mutation import changes
from webhooks.policies import gpu_visibility

MAPS = "train-x7k2p9q-shared-gpu"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


def _from_map(name: str, key: str) -> dict[str, Any]:
    return {"name": key, "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}


def kai_pod() -> dict[str, Any]:
    """A fraction pod exactly as KAI's admission webhook leaves it (gpu_sharing.go,
    gpu_access.go AddGPUSharingEnvVars): env from the ConfigMap `<annotation>-0`, envFrom its
    `-evar`, the ConfigMap as a volume, runtimeClassName nvidia; no GPU resource."""
    maps = f"{MAPS}-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "annotations": {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": MAPS},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "runtimeClassName": "nvidia",
            "containers": [
                {
                    "name": "main",
                    "image": "nvidia/cuda:13.0.2-base-ubi8",
                    "env": [
                        _from_map(maps, "NVIDIA_VISIBLE_DEVICES"),
                        _from_map(maps, "RUNAI_NUM_OF_GPUS"),
                        _from_map(maps, "GPU_PORTION"),
                    ],
                    "envFrom": [{"configMapRef": {"name": f"{maps}-evar", "optional": False}}],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "volumes": [{"name": f"{maps}-vol", "configMap": {"name": maps}}],
        },
    }


def _visible(pod: dict[str, Any], index: int) -> list[dict[str, Any]]:
    env = pod["spec"]["containers"][index].get("env") or []
    return [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


def _both(pod: dict[str, Any], config: Config | None = None) -> list[dict[str, Any]]:
    """The pod as the webhook's policy and as the API server's policy (`review`) leave it; the
    two must agree."""
    config = config or Config()
    _, _, _, by_webhook = mutate_twice(
        gpu_visibility.policies(config), copy.deepcopy(pod), StaticClusterView()
    )
    by_apiserver, _ = changes(copy.deepcopy(pod), None, config)
    assert by_webhook == by_apiserver
    return [by_webhook]


def test_the_pod_kai_leaves_keeps_its_visibility_and_only_the_fraction_container() -> None:
    [admitted] = _both(kai_pod())
    assert _visible(admitted, 0) == [_from_map(f"{MAPS}-0", "NVIDIA_VISIBLE_DEVICES")]
    assert _visible(admitted, 1) == [NONE]  # the sidecar asked for nothing: hidden


def test_a_gpu_memory_request_is_kais_too() -> None:
    pod = kai_pod()
    del pod["metadata"]["annotations"]["gpu-fraction"]
    pod["metadata"]["annotations"]["gpu-memory"] = "4096"
    [admitted] = _both(pod)
    assert _visible(admitted, 0)[0]["valueFrom"]["configMapKeyRef"]["name"] == f"{MAPS}-0"


@pytest.mark.parametrize(
    "shape",
    [
        "default scheduler",
        "placed by hand",
        "no fraction asked",
        "another ConfigMap",
        "another key",
        "a value after it",
    ],
)
def test_the_same_shape_otherwise_is_hidden(shape: str) -> None:
    pod = kai_pod()
    main = pod["spec"]["containers"][0]
    if shape == "default scheduler":
        pod["spec"]["schedulerName"] = "default-scheduler"
    elif shape == "placed by hand":  # no scheduler gave it anything
        pod["spec"]["nodeName"] = "gpu-node-1"
    elif shape == "no fraction asked":
        del pod["metadata"]["annotations"]["gpu-fraction"]
    elif shape == "another ConfigMap":  # one the pod's author made, with "all" in it
        main["env"][0] = _from_map("mine-0", "NVIDIA_VISIBLE_DEVICES")
    elif shape == "another key":
        main["env"][0]["valueFrom"]["configMapKeyRef"]["key"] = "GPU_PORTION"
    else:  # the last entry of a name is the one a container gets
        main["env"].append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    [admitted] = _both(pod)
    assert _visible(admitted, 0) == [NONE]


def test_with_no_scheduler_configured_every_such_pod_is_hidden() -> None:
    config = Config.model_validate({"gpu": {"schedulers": []}})
    [admitted] = _both(kai_pod(), config)
    assert _visible(admitted, 0) == [NONE]
