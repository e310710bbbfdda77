"""What a test left on the shared real control plane, removed after it: the objects of the
kinds tests make that were not there when it began.

Namespaces are emptied, not deleted: each test finds the namespaces it asks for as new (nothing
in them but what kube-controller-manager puts in every namespace: the `default` ServiceAccount
and `kube-root-ca.crt`). Deleting them would cost every test that reuses a name five seconds:
the namespace controller waits that long before it acts (`namespaceDeletionGracePeriod`), and a
namespace of that name cannot be made again until it is gone. Tests that delete a namespace on
purpose still meet the real namespace controller.

Each new object is deleted (pods with grace period 0: no kubelet may be left to confirm), and
the sweep waits until they are gone, so the next test can reuse their names. CRDs are left: they
are installed once per session, and are idempotent.

A namespace that was there before gets its labels back as they were. One label is taken off every
namespace that did not have it: the ServiceAccount-credentials label sends all of a namespace's
pods to the webhook (and its guard keeps it on), so a later test of that namespace would meet
another webhook entry than it asked for.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from kubernetes import client

GONE_SECONDS = 60.0
ROUTING_LABEL = "gpu-admission.io/serviceaccount-credentials"
MERGE_PATCH = "application/merge-patch+json"
# What kube-controller-manager puts in every namespace, kept with it.
PER_NAMESPACE = frozenset(
    {("/api/v1/serviceaccounts", "default"), ("/api/v1/configmaps", "kube-root-ca.crt")}
)

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
    "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    "/apis/snapshot.storage.k8s.io/v1/volumesnapshots",
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
    "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "/apis/resource.k8s.io/v1/deviceclasses",
    "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses",
    "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents",
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


@dataclass(frozen=True)
class Before:
    """What was on the server when a test began."""

    objects: set[Found]
    namespace_labels: dict[str, dict[str, str]]


def _call(
    api: client.ApiClient,
    method: str,
    path: str,
    body: object = None,
    content_type: str = "application/json",
) -> object:
    serialized = api.param_serialize(
        method,
        path,
        header_params={"Accept": "application/json", "Content-Type": content_type},
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


def namespace_labels(api: client.ApiClient) -> dict[str, dict[str, str]]:
    listed = _call(api, "GET", "/api/v1/namespaces")
    assert isinstance(listed, dict)
    return {i["metadata"]["name"]: i["metadata"].get("labels") or {} for i in listed["items"]}


def record(api: client.ApiClient) -> Before:
    return Before(snapshot(api), namespace_labels(api))


def _labels_back(api: client.ApiClient, before: dict[str, dict[str, str]]) -> None:
    """Each namespace's labels as they were (see the module's docstring)."""
    for name, labels in namespace_labels(api).items():
        if name in before:
            wanted = before[name]
            change: dict[str, str | None] = {k: None for k in labels if k not in wanted}
            change.update({k: v for k, v in wanted.items() if labels.get(k) != v})
        else:
            change = {ROUTING_LABEL: None} if ROUTING_LABEL in labels else {}
        if not change:
            continue
        path = f"/api/v1/namespaces/{name}"
        deadline = time.monotonic() + GONE_SECONDS
        while True:
            try:
                _call(api, "PATCH", path, {"metadata": {"labels": change}}, MERGE_PATCH)
                break
            except client.ApiException as error:
                # The label's guard, deleted by this sweep, may be in force a moment longer.
                if error.status not in (403, 422) or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # polling a condition, bounded by the deadline


def _claim_uid(api: client.ApiClient, volume: Found) -> str | None:
    try:
        found = _call(api, "GET", volume.path)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    assert isinstance(found, dict)
    return ((found.get("spec") or {}).get("claimRef") or {}).get("uid")


def sweep(api: client.ApiClient, before: Before) -> None:
    """Delete what is new since `before` (namespaces emptied, not deleted), wait until it is
    gone, and give the namespaces their labels back."""
    deleted: set[str] = set()
    claims_before = {
        f.uid for f in before.objects if f.collection == "/api/v1/persistentvolumeclaims"
    }
    for found in sorted(snapshot(api) - before.objects, key=lambda f: f.collection):
        if found.collection == "/api/v1/namespaces":
            continue
        if (found.collection, found.name) in PER_NAMESPACE:
            continue
        volume = found.collection == "/api/v1/persistentvolumes"
        if volume and _claim_uid(api, found) in claims_before:
            # A provisioner the test ran gave a volume to a claim someone made earlier: it
            # belongs to that claim now (and stays while the claim is bound to it).
            continue
        options: dict[str, object] = {"propagationPolicy": "Background"}
        if found.collection == "/api/v1/pods":
            options["gracePeriodSeconds"] = 0
        try:
            _call(api, "DELETE", found.path, options)
        except client.ApiException as error:
            if error.status not in (404, 409):
                raise
        deleted.add(found.uid)
    deadline = time.monotonic() + GONE_SECONDS
    while left := [f for f in snapshot(api) if f.uid in deleted]:
        assert time.monotonic() < deadline, f"still there after the test: {[f.path for f in left]}"
        time.sleep(0.05)  # polling a condition, bounded by the deadline
    _labels_back(api, before.namespace_labels)
