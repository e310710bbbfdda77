"""The idle controller's requests to the API server: read a workload, its namespace's labels,
patch it, and post an Event on it. Blocking (the check runs in a thread), through the
ApiClient's credentials; objects come and go as plain dicts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.idle.targets import Kind
from gpu_admission.cluster.events import event_body

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT_SECONDS = 30.0
COMPONENT = "gpu-admission-controller"


def _path(kind: Kind, namespace: str, name: str = "") -> str:
    root = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    return f"{root}/namespaces/{namespace}/{kind.plural}" + (f"/{name}" if name else "")


class WorkloadApi:
    def __init__(self, api: client.ApiClient, identity: str) -> None:
        self.api = api
        self.identity = identity

    def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        answer = self.api.call_api(*request, _request_timeout=TIMEOUT_SECONDS)
        data = answer.read()
        if not 200 <= answer.status < 300:
            raise ApiException(http_resp=answer)
        return json.loads(data) if data else {}

    def read(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it is gone (or its kind is not served: no such CRD)."""
        try:
            return self._request("GET", _path(kind, namespace, name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def patch(
        self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        return self._request("PATCH", _path(kind, namespace, name), dict(patch), MERGE_PATCH)

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        try:
            found = self._request("GET", f"/api/v1/namespaces/{namespace}")
        except ApiException as error:
            if error.status == 404:
                return {}
            raise
        return dict((found.get("metadata") or {}).get("labels") or {})

    def event(
        self,
        involved: Mapping[str, str],
        event_type: str,
        reason: str,
        message: str,
    ) -> None:
        body = event_body(dict(involved), event_type, reason, message, COMPONENT, self.identity)
        self._request("POST", f"/api/v1/namespaces/{involved['namespace']}/events", body)


def reference(
    kind: Kind | None, kind_name: str, namespace: str, name: str, obj: Mapping[str, Any] | None
) -> dict[str, str]:
    """The Event's involvedObject: with its uid where the object was read (kubectl describe
    matches on it), by kind and name alone for a kind the controller does not read."""
    ref = {"kind": kind.kind if kind else kind_name, "namespace": namespace, "name": name}
    if kind is not None:
        ref["apiVersion"] = kind.api_version
    uid = ((obj or {}).get("metadata") or {}).get("uid")
    if uid:
        ref["uid"] = str(uid)
    return ref
