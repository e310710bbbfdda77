"""Why a loader pod has not started, in plain words with what to do (pure).

A loader pod that cannot start says so only in places a researcher does not look: its container
waits (`CreateContainerConfigError`: a Secret its env names is missing; `ErrImagePull` /
`ImagePullBackOff`), the scheduler's PodScheduled condition (`Unschedulable`), or, for a volume
that cannot be mounted (a missing ConfigMap or Secret), only the kubelet's `FailedMount` Event
while the container shows `ContainerCreating`. The controller turns these into the PVC's Loading
condition message and an Event, so nothing waits without a word on the PVC.

The words are the kubelet's and the scheduler's (pkg/kubelet/kuberuntime, volume/configmap and
volume/secret: `configmap "NAME" not found`, `secret "NAME" not found`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from controllers.dataset.records import LoaderPod

START_GRACE_SECONDS = 60.0  # a loader pod not started by then is named even without a cause
_MISSING = re.compile(r'\b(configmap|secret) "([^"]+)" not found')
_IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
_START_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
CAUSES = ("config-map", "secret", "image", "unschedulable", "container", "not-started")


@dataclass(frozen=True, slots=True)
class Blockage:
    cause: str  # one of CAUSES: a metric label
    message: str


def _age(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes}m" if minutes else f"{int(seconds)}s"


def _missing(pod: LoaderPod, text: str, credentials_key: str) -> Blockage | None:
    match = _MISSING.search(text)
    if match is None:
        return None
    kind, name = match.groups()
    where = f"in namespace {pod.namespace}"
    if kind == "configmap":
        return Blockage(
            "config-map",
            f'loader pod {pod.name} cannot start: ConfigMap "{name}" is missing {where}; create '
            "it (dataset.trusted_ca_config_map names it) or ask the cluster's administrators",
        )
    return Blockage(
        "secret",
        f'loader pod {pod.name} cannot start: Secret "{name}" is missing {where}; create it, or '
        f"point {credentials_key} at a Secret that exists",
    )


def blockage(
    pod: LoaderPod,
    events: Sequence[tuple[str, str]],
    age_seconds: float,
    credentials_key: str,
) -> Blockage | None:
    """What keeps `pod` from starting, or None while nothing does (yet). `events`: the pod's
    (reason, message) Events, newest last; `age_seconds`: since the pod was created."""
    if pod.started or pod.exit_code is not None:
        return None
    if pod.unschedulable is not None:
        return Blockage(
            "unschedulable",
            f"loader pod {pod.name} cannot be scheduled: {pod.unschedulable}; ask the cluster's "
            "administrators (it needs a node that can mount the PVC)",
        )
    if pod.waiting is not None:
        reason, message = pod.waiting
        if reason in _IMAGE_REASONS:
            return Blockage(
                "image",
                f"loader pod {pod.name} cannot start: its image {pod.image} cannot be pulled "
                f"({reason}: {message or 'no detail'}); ask the cluster's administrators to check "
                "dataset.loader_image and the registry's credentials",
            )
        if reason in _START_REASONS:
            missing = _missing(pod, message, credentials_key)
            if missing is not None:
                return missing
            return Blockage("container", f"loader pod {pod.name} cannot start: {reason}: {message}")
    for reason, message in reversed(events):
        if reason == "FailedMount":
            missing = _missing(pod, message, credentials_key)
            if missing is not None:
                return missing
    if age_seconds >= START_GRACE_SECONDS:
        state = pod.waiting[0] if pod.waiting else "Pending"
        return Blockage(
            "not-started",
            f"loader pod {pod.name} has not started after {_age(age_seconds)} ({state}); "
            f"`kubectl -n {pod.namespace} describe pod {pod.name}` shows why",
        )
    return None
