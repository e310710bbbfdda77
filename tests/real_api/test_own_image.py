"""The image loader Jobs run when `dataset.loader_image` names none: the controller's own, as
the kustomization's `images:` set it on its Deployment, read from the real API server: from its
own pod in the cluster, from the controller's Deployment outside it."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client

from gpu_admission.cluster.own_image import BUILT_IMAGE, CONTROLLER_DEPLOYMENT, loader_image
from gpu_admission.config.model import Config
from tests.real_api.conftest import namespace_ready

PUSHED = "registry.example.com/ml/gpu-admission:0.1.0"


def _pod(name: str, image: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "controller", "image": image}]},
    }


def _deployment(image: str) -> dict:
    labels = {"app": "own-image"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": CONTROLLER_DEPLOYMENT},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "controller", "image": image}]},
            },
        },
    }


def test_in_a_pod_the_controller_runs_its_own_image(api: client.ApiClient) -> None:
    namespace_ready(api, "own-image-pod")
    client.CoreV1Api(api).create_namespaced_pod("own-image-pod", _pod("controller-0", PUSHED))
    environ = {"POD_NAME": "controller-0", "POD_NAMESPACE": "own-image-pod"}
    assert loader_image(Config(), api, environ) == PUSHED


def test_outside_the_cluster_the_controllers_deployment_tells(api: client.ApiClient) -> None:
    namespace_ready(api, "own-image-deploy")
    client.AppsV1Api(api).create_namespaced_deployment("own-image-deploy", _deployment(PUSHED))
    config = Config(leader_election={"namespace": "own-image-deploy"})
    assert loader_image(config, api, {}) == PUSHED


def test_a_configured_image_wins(api: client.ApiClient) -> None:
    config = Config(dataset={"loader_image": "mirror.example.com/loader:7"})
    environ = {"POD_NAME": "controller-0", "POD_NAMESPACE": "own-image-pod"}
    assert loader_image(config, api, environ) == "mirror.example.com/loader:7"


def test_nothing_to_read_falls_back_to_the_built_image_and_says_so(
    api: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    config = Config(leader_election={"namespace": "no-such-namespace"})
    with caplog.at_level(logging.WARNING):
        assert loader_image(config, api, {}) == BUILT_IMAGE
    assert "set dataset.loader_image" in caplog.text
    assert "deployment no-such-namespace/gpu-admission-controller: HTTP 404" in caplog.text
