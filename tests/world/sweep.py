"""What a test left on the shared real control plane, removed after it: the objects of the
kinds tests make that were not there when it began.

New namespaces are deleted whole, without waiting (the namespace controller takes five seconds
at least: it waits that long before acting, `namespaceDeletionGracePeriod`);
`namespaces.namespace_ready` waits for a namespace of the same name to be gone before it
creates it again. In namespaces that were there before (`default`, `kube-system`, a namespace
still being deleted), each new object is deleted; pods with grace period 0, as no kubelet may
be left to confirm. CRDs are left: they are installed once per session, and are idempotent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client

# The service's own namespace: every admission cluster and controller uses it; kept.
SHARED_NAMESPACES = frozenset({"gpu-admission"})

# Listed across namespaces; one request each.
NAMESPACED = (
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/api/v1/pods",
    "/api/v1/persistentvolumeclaims",
    "/api/v1/services",
    "/api/v1/events",
    "/apis/batch/v1/jobs",
    "/apis/coordination.k8s.io/v1/leases",
    "/apis/rbac.authorization.k8s.io/v1/roles",
    "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    "/apis/resource.k8s.io/v1/resourceclaims",
)
CLUSTER_SCOPED = (
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/persistentvolumes",
    "/apis/storage.k8s.io/v1/storageclasses",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/resource.k8s.io/v1/deviceclasses",
    "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses",
)


@dataclass(frozen=True)
class Found:
    collection: str  # one of the lists above
    namespace: str
    name: str
    uid: str

    @property
    def path(self) -> str:
        if not self.namespace:
            return f"{self.collection}/{self.name}"
        prefix, _, plural = self.collection.rpartition("/")
        return f"{prefix}/namespaces/{self.namespace}/{plural}/{self.name}"


def _call(api: client.ApiClient, method: str, path: str, body: object = None) -> object:
    serialized = api.param_serialize(
        method,
        path,
        header_params={"Accept": "application/json", "Content-Type": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized)
    response.read()
    if not 200 <= response.status <= 299:
        raise client.ApiException(http_resp=response)
    return json.loads(response.data)


def snapshot(api: client.ApiClient) -> set[Found]:
    found: set[Found] = set()
    for collection in NAMESPACED + CLUSTER_SCOPED:
        try:
            listed = _call(api, "GET", collection)
        except client.ApiException as error:
            if error.status == 404:
                continue  # a group this server does not serve (the snapshot CRDs)
            raise
        assert isinstance(listed, dict)
        for item in listed.get("items") or []:
            meta = item["metadata"]
            found.add(Found(collection, meta.get("namespace", ""), meta["name"], meta["uid"]))
    return found


def sweep(api: client.ApiClient, before: set[Found]) -> None:
    """Delete what is new since `before`."""
    namespaces = {f.name for f in before if f.collection == "/api/v1/namespaces"}
    for found in sorted(snapshot(api) - before, key=lambda f: f.collection):
        if found.namespace and found.namespace not in namespaces:
            continue  # goes with its namespace
        if found.collection == "/api/v1/namespaces" and found.name in SHARED_NAMESPACES:
            continue
        options = {"propagationPolicy": "Background"}
        if found.collection == "/api/v1/pods":
            options["gracePeriodSeconds"] = 0  # type: ignore[assignment]
        try:
            _call(api, "DELETE", found.path, options)
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise
