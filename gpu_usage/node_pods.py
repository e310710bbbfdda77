"""The API server's side of the agent: its own node's pods, and Events on them.

The pods are listed with `spec.nodeName=<node>` (the API server filters them; the agent never
holds the cluster's pods) when a sweep meets a container it does not know, at most every
`REFRESH_SECONDS`, and at least every `MAX_AGE_SECONDS`. Events are written on the pod, as the
kubelet writes its own, by the agent's ServiceAccount.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_usage.pod_index import PodIndex

log = logging.getLogger("gpu_admission.gpu_usage")

REFRESH_SECONDS = 5.0
MAX_AGE_SECONDS = 60.0
COMPONENT = "gpu-admission-gpu-usage"


class NodePods:
    def __init__(
        self, api: client.ApiClient, node: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._node = node
        self._clock = clock
        self._listed_at: float | None = None
        self.index = PodIndex([])
        self.running: set[str] = set()  # runtime IDs of the node's running containers
        self.error = ""  # the last listing's failure, "" once one succeeds

    def refresh(self, unknown: bool) -> None:
        """List again if `unknown` containers were met and the list is older than
        REFRESH_SECONDS, or if it is older than MAX_AGE_SECONDS."""
        now = self._clock()
        age = None if self._listed_at is None else now - self._listed_at
        if age is not None and age < (REFRESH_SECONDS if unknown else MAX_AGE_SECONDS):
            return
        self._listed_at = now
        try:
            answer = self._core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self._node}", _preload_content=False
            )
        except (ApiException, OSError) as error:
            self.error = _listing_error(error, self._node)
            log.warning("%s", self.error)
            return
        pods = json.loads(answer.data).get("items") or []
        self.index = PodIndex(pods)
        self.running = self.index.container_ids()
        self.error = ""

    def event(self, pod: tuple[str, str], reason: str, message: str, instance: str) -> bool:
        """A Warning Event on the pod (namespace, name); False when it could not be written."""
        namespace, name = pod
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": self.index.uid_of(namespace, name),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": COMPONENT, "host": self._node},
            "reportingComponent": COMPONENT,
            "reportingInstance": instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(namespace, body, _preload_content=False)
        except (ApiException, OSError) as error:
            log.warning("could not write %s on pod %s/%s: %s", reason, namespace, name, error)
            return False
        return True


def _listing_error(error: Exception, node: str) -> str:
    status = getattr(error, "status", None)
    if status in (401, 403):
        return (
            f"cannot list the pods of node {node} ({status}): the agent's ServiceAccount needs "
            "get/list on pods (manifests/overlays/gpu-usage has the ClusterRole); processes "
            "are shown by pod UID until it can"
        )
    return f"cannot list the pods of node {node}: {error}; retrying"
