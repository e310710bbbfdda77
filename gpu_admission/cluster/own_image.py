"""The image the project runs, for the Jobs it starts (loader Jobs, `audit --sources`' checks).

Unless `dataset.loader_image` names one, loader Jobs run the controller's own image: the one a
kustomization's `images:` set on its Deployment, so an install re-pointed at a registry needs no
second place to say so. A process in a pod reads its own pod (POD_NAME and POD_NAMESPACE, from
the downward API); a command outside the cluster reads the controller's Deployment; where
neither can be read, the image the project builds (`make image`) is the last resort.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes import client

from gpu_admission import __version__
from gpu_admission.config.model import Config

log = logging.getLogger(__name__)

BUILT_IMAGE = f"gpu-admission:{__version__}"
CONTROLLER_DEPLOYMENT = "gpu-admission-controller"


def _first_image(spec: Any) -> str | None:
    containers = (spec.containers if spec is not None else None) or []
    return containers[0].image if containers else None


def pod_image(api: client.ApiClient, namespace: str, name: str) -> str | None:
    """The image of the pod's first container (listed by name: the roles grant list)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, field_selector=f"metadata.name={name}"
    )
    return _first_image(pods.items[0].spec) if pods.items else None


def deployment_image(api: client.ApiClient, namespace: str, name: str) -> str | None:
    deployment = client.AppsV1Api(api).read_namespaced_deployment(name, namespace)
    return _first_image(deployment.spec.template.spec)


# What a read of the API can raise besides its own answers: connection refused, a timeout.
READ_ERRORS = (client.ApiException, urllib3.exceptions.HTTPError, OSError)


def loader_image(config: Config, api: client.ApiClient, environ: Mapping[str, str]) -> str:
    """The image loader Jobs run: the configured one, else this pod's own (in a pod), else the
    controller Deployment's (outside), else the built image's name, with a warning."""
    if config.dataset.loader_image:
        return config.dataset.loader_image
    pod, namespace = environ.get("POD_NAME"), environ.get("POD_NAMESPACE")
    if pod and namespace:
        where = f"pod {namespace}/{pod}"
    else:
        namespace = config.leader_election.namespace
        where = f"deployment {namespace}/{CONTROLLER_DEPLOYMENT}"
    try:
        if pod:
            found = pod_image(api, namespace, pod)
        else:
            found = deployment_image(api, namespace, CONTROLLER_DEPLOYMENT)
    except client.ApiException as exc:
        found, where = None, f"{where}: HTTP {exc.status} {exc.reason}"
    except READ_ERRORS as exc:
        found, where = None, f"{where}: {exc}"
    if found:
        return found
    log.warning(
        "loader Jobs use image %s: dataset.loader_image is not set and the project's own image "
        "could not be read (%s); set dataset.loader_image to the image you pushed",
        BUILT_IMAGE,
        where,
    )
    return BUILT_IMAGE


def in_pod(environ: Mapping[str, str]) -> bool:
    """Whether the downward API names this process's pod (the manifests set both)."""
    return bool(environ.get("POD_NAME") and environ.get("POD_NAMESPACE"))


def with_loader_image(config: Config, image: str) -> Config:
    return config.model_copy(
        update={"dataset": config.dataset.model_copy(update={"loader_image": image})}
    )
