"""The API server's side of the agent: its own node's pods, and Events on them.

The pods are listed with `spec.nodeName=<node>` (the API server filters them; the agent never
holds the cluster's pods) when a sweep meets a container it does not know, at most every
`REFRESH_SECONDS`, and at least every `MAX_AGE_SECONDS`. Events are written on the pod, as the
kubelet writes its own, by the agent's ServiceAccount.

The two calls go through the ApiClient's own request path (its credentials, its TLS, its
retries), not through `CoreV1Api`: that class's module alone holds 19 MiB resident, a third of
what the agent on every GPU node may take.

Neither call's failure leaves this module: an API server down, restarting or cut off mid-answer
is said (the listing keeps its last pods, the Event counts as not written) and the agent sweeps
on. That path raises more than `ApiException`: urllib3's own errors (`MaxRetryError` once its
retries are spent, `ProtocolError` for an answer cut off while read) are not OSErrors.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_admission.cluster.events import event_body
from gpu_admission.config.model import GpuConfig
from gpu_usage.pod_index import PodIndex
from gpu_usage.workloads import MIG_SLICES, mig_slices

log = logging.getLogger("gpu_admission.gpu_usage")

REFRESH_SECONDS = 5.0
MAX_AGE_SECONDS = 60.0
COMPONENT = "gpu-admission-gpu-usage"
TIMEOUT_SECONDS = 30.0
# What the API path raises for a call that did not get through: the API server's answer, the
# socket's and TLS's (OSError), urllib3's (HTTPError: MaxRetryError, ProtocolError, timeouts).
API_ERRORS = (ApiException, OSError, HTTPError)


class NodePods:
    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        gpu: GpuConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self._node = node
        self._gpu = gpu or GpuConfig()  # the GPU resource names, as the policies read them
        self._clock = clock
        self._listed_at: float | None = None
        self.index = PodIndex([])
        self.error = ""  # the last listing's failure, "" once one succeeds
        self._mig_slices = MIG_SLICES

    def know_gpus(self, models: Iterable[str]) -> None:
        """The node's GPU models, as NVML names them: a MIG slice's share of a GPU depends on
        them; the next refresh lists again when it changed."""
        slices = mig_slices(models)
        if slices != self._mig_slices:
            self._mig_slices, self._listed_at = slices, None

    def refresh(self, unknown: bool) -> None:
        """List again if `unknown` containers were met and the list is older than
        REFRESH_SECONDS, or if it is older than MAX_AGE_SECONDS."""
        now = self._clock()
        age = None if self._listed_at is None else now - self._listed_at
        if age is not None and age < (REFRESH_SECONDS if unknown else MAX_AGE_SECONDS):
            return
        self._listed_at = now
        try:
            answer = self._call(
                "GET", "/api/v1/pods", [("fieldSelector", f"spec.nodeName={self._node}")]
            )
            pods = json.loads(answer).get("items") or []
        except (*API_ERRORS, ValueError) as error:  # ValueError: an answer that is not JSON
            self.error = _listing_error(error, self._node)
            log.warning("%s", self.error)
            return
        self.index = PodIndex(pods, self._gpu, self._mig_slices)
        self.error = ""

    def event(
        self,
        pod: tuple[str, str],
        reason: str,
        message: str,
        instance: str,
        name: str | None = None,
    ) -> bool:
        """A Warning Event on the pod (namespace, name); False when it could not be written.
        `name`: the Event's own, where the same finding must be written once: one that exists
        already (409) was written, by this agent before a restart."""
        namespace, pod_name = pod
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": pod_name,
            "uid": self.index.uid_of(namespace, pod_name),
        }
        body = event_body(
            involved, "Warning", reason, message, COMPONENT, instance, name=name, host=self._node
        )
        try:
            self._call("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
        except API_ERRORS as error:
            if isinstance(error, ApiException) and error.status == 409 and name is not None:
                return True
            log.warning("could not write %s on pod %s/%s: %s", reason, namespace, pod_name, error)
            return False
        return True

    def _call(
        self, method: str, path: str, query: list[tuple[str, str]] | None = None, body: Any = None
    ) -> bytes:
        return call(self.api, method, path, query, body)


def call(
    api: client.ApiClient,
    method: str,
    path: str,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    timeout: float = TIMEOUT_SECONDS,
) -> bytes:
    """One request through the ApiClient's own path: the answer's body. Raises ApiException
    for an answer that is not 2xx."""
    return bytes(_request(api, method, path, query, body, timeout).read())


def stream(
    api: client.ApiClient, path: str, query: list[tuple[str, str]], timeout: float
) -> Iterable[bytes]:
    """A GET whose body's lines are handed over as they come (a watch)."""
    return _request(api, "GET", path, query, None, timeout).response  # urllib3's: by lines


def _request(
    api: client.ApiClient,
    method: str,
    path: str,
    query: list[tuple[str, str]] | None,
    body: Any,
    timeout: float,
) -> Any:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    answer = api.call_api(*request, _request_timeout=timeout)
    if not 200 <= answer.status < 300:
        answer.read()
        raise ApiException(http_resp=answer)
    return answer


def _listing_error(error: Exception, node: str) -> str:
    status = getattr(error, "status", None)
    if status in (401, 403):
        return (
            f"cannot list the pods of node {node} ({status}): the agent's ServiceAccount needs "
            "get/list on pods (manifests/overlays/gpu-usage has the ClusterRole); processes "
            "are shown by pod UID until it can"
        )
    return f"cannot list the pods of node {node}: {error}; retrying"
