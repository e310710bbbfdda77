"""KAI-Scheduler's GPU fractions beside the base's GPU-visibility policy, on the real
kube-apiserver 1.36: KAI's admission webhook (played as its source makes it,
tests/world/stand_ins/kai_webhook.py) runs after the policy, and the API server runs the policy
again after it (`reinvocationPolicy: IfNeeded`), then KAI's webhook once more, so KAI's writes
last. The fraction keeps the visibility KAI gives it; the same pod under the default scheduler is
hidden; one KAI did not place, or whose ConfigMap is not the one it names for the pod, is
refused by the pods policy, which judges the pod as stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.played_webhooks import played_webhook
from tests.world.harness import body, wait_until
from tests.world.stand_ins import kai_webhook

NS = "kai-fractions"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


@pytest.fixture(scope="module")
def kai(kubectl: Kubectl, api: client.ApiClient) -> Iterator[None]:
    apply_base(kubectl)
    namespace_ready(api, NS)
    client.NodeV1Api(api).create_runtime_class(
        body({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
              "metadata": {"name": "nvidia"}, "handler": "nvidia"})
    )  # fmt: skip
    try:
        with played_webhook(api, kai_webhook.app, kai_webhook.configuration):
            wait_until(lambda: _admitted(api, _pod("probe")) is not None, "KAI's webhook called")
            yield
    finally:
        client.NodeV1Api(api).delete_runtime_class("nvidia")


def _pod(name: str, scheduler: str = "kai-scheduler", **annotations: str) -> dict[str, Any]:
    """A researcher's fraction pod, as they write it for KAI: no GPU resource, no env."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-fraction": "0.5", **annotations}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "nvidia/cuda:13.0.2-base-ubi8"},
                {"name": "sidecar", "image": "busybox"},
            ],
        },
    }


def _admitted(api: client.ApiClient, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod as the API server would store it (a server-side dry run); None until KAI's
    webhook has been applied to it."""
    made = client.CoreV1Api(api).create_namespaced_pod(NS, body(pod), dry_run="All")
    stored = client.ApiClient().sanitize_for_serialization(made)
    annotations = stored["metadata"].get("annotations") or {}
    if pod["spec"]["schedulerName"] == "kai-scheduler" and (
        kai_webhook.MAPS_ANNOTATION not in annotations
    ):
        return None
    return stored


def _visible(pod: dict[str, Any], index: int) -> list[dict[str, Any]]:
    env = pod["spec"]["containers"][index].get("env") or []
    return [e for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


def test_a_kai_fraction_keeps_the_visibility_kai_gives_it(api: client.ApiClient, kai: None) -> None:
    stored = _admitted(api, _pod("fraction"))
    assert stored is not None
    maps = stored["metadata"]["annotations"][kai_webhook.MAPS_ANNOTATION]
    [given] = _visible(stored, 0)
    assert given["valueFrom"]["configMapKeyRef"] == {
        "name": f"{maps}-0",
        "key": "NVIDIA_VISIBLE_DEVICES",
    }, json.dumps(stored["spec"]["containers"][0])
    assert _visible(stored, 1) == [NONE]  # the sidecar asked for nothing


def test_the_pod_as_kai_leaves_it_is_kept_and_under_the_default_scheduler_hidden(
    api: client.ApiClient, kai: None
) -> None:
    as_kai_leaves_it = _admitted(api, _pod("fraction"))
    assert as_kai_leaves_it is not None
    again = json.loads(json.dumps(as_kai_leaves_it))
    for key in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
        again["metadata"].pop(key, None)
    again.pop("status", None)
    kept = _admitted(api, again)
    assert kept is not None and _visible(kept, 0) == _visible(as_kai_leaves_it, 0)
    again["spec"]["schedulerName"] = "default-scheduler"
    hidden = _admitted(api, again)
    assert hidden is not None and _visible(hidden, 0) == [NONE]


def _refusal(api: client.ApiClient, pod: dict[str, Any]) -> str:
    try:
        client.CoreV1Api(api).create_namespaced_pod(NS, body(pod), dry_run="All")
    except client.ApiException as error:
        assert error.status == 422, error.body
        return str(json.loads(error.body)["message"])
    raise AssertionError("admitted")


def test_a_fraction_placed_by_hand_is_refused(api: client.ApiClient, kai: None) -> None:
    """A pod for KAI placed by hand (`spec.nodeName`: KAI's binder never runs, so the ConfigMap
    it names is whatever its author wrote, `NVIDIA_VISIBLE_DEVICES=all` say) with a ConfigMap
    prefix of its author's: the visibility policy hides it, then KAI's webhook, which the API
    server calls after it, writes its env back. The pods policy, after every mutation, refuses
    it."""
    pod = _pod("by-hand", **{kai_webhook.MAPS_ANNOTATION: "mine"})
    pod["spec"]["nodeName"] = "gpu-node-1"
    said = _refusal(api, pod)
    assert "ValidatingAdmissionPolicy 'gpu-admission-pods'" in said
    assert (
        'container "main" asks for no GPU and sets NVIDIA_VISIBLE_DEVICES (from valueFrom), '
        "which kai-scheduler did not give it"
    ) in said
    assert "remove spec.nodeName" in said


def test_an_env_from_a_configmap_kai_does_not_name_is_hidden(
    api: client.ApiClient, kai: None
) -> None:
    """A container's env from a ConfigMap other than `<runai/shared-gpu-configmap>-<index>` (its
    author's): KAI writes only the fraction container's, so the policy's hiding stands."""
    pod = _pod("other-map")
    pod["spec"]["containers"][1]["env"] = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
        }
    ]
    stored = _admitted(api, pod)
    assert stored is not None and _visible(stored, 1) == [NONE]


# -- the ConfigMaps KAI gives GPUs through ------------------------------------------------------

BINDER = "system:serviceaccount:kai-scheduler:binder"  # KAI's binder, as KAI installs it


@pytest.fixture
def binder_rbac(api: client.ApiClient) -> Iterator[None]:
    """What KAI's chart grants its binder on ConfigMaps (ClusterRole `kai-binder`,
    deployments/kai-scheduler/templates/rbac/binder.yaml), bound to its ServiceAccount."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(
        body({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": "kai-binder"},
              "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                         "verbs": ["create", "delete", "get", "list", "patch", "update",
                                   "watch"]}]})
    )  # fmt: skip
    rbac.create_cluster_role_binding(
        body({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": "kai-binder"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": "kai-binder"},
              "subjects": [{"kind": "ServiceAccount", "name": "binder",
                            "namespace": "kai-scheduler"}]})
    )  # fmt: skip
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": BINDER, "resourceAttributes": {
                  "namespace": NS, "verb": "create", "resource": "configmaps"}}}  # fmt: skip
    authorization = client.AuthorizationV1Api(api)
    wait_until(
        lambda: authorization.create_subject_access_review(body(review)).status.allowed,
        "the binder's RBAC in force",
    )
    yield
    rbac.delete_cluster_role_binding("kai-binder")
    rbac.delete_cluster_role("kai-binder")


def _as(api: client.ApiClient, user: str) -> client.CoreV1Api:
    """The API as `user` (the admin impersonates it)."""
    impersonated = client.ApiClient(api.configuration)
    impersonated.set_default_header("Impersonate-User", user)
    return client.CoreV1Api(impersonated)


def _configmap(name: str, value: str | None) -> dict[str, Any]:
    data = {"GPU_PORTION": "0.5"} | ({"NVIDIA_VISIBLE_DEVICES": value} if value else {})
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _written(call: Any) -> str | None:
    try:
        call()
    except client.ApiException as error:
        assert error.status == 403, error.body
        return str(json.loads(error.body)["message"])
    return None


def test_only_the_scheduler_writes_the_gpus_into_its_configmaps(
    api: client.ApiClient, kai: None, binder_rbac: None
) -> None:
    """KAI's binder creates the pod's ConfigMap empty and patches the GPU's UUID in at binding
    (`pkg/binder/plugins/gpusharing/gpu_sharing.go`); the pod's owner may then neither change
    that value (the kubelet reads it again at each container start) nor write a ConfigMap of
    their own with the key, but may touch the rest."""
    core = client.CoreV1Api(api)
    binder = _as(api, BINDER)
    name = "fraction-x7k2p9q-shared-gpu-0"
    binder.create_namespaced_config_map(NS, body(_configmap(name, None)))
    try:
        uuid = {"data": {"NVIDIA_VISIBLE_DEVICES": "GPU-4b8e3c1a"}}
        assert _written(lambda: binder.patch_namespaced_config_map(name, NS, uuid)) is None
        widened = {"data": {"NVIDIA_VISIBLE_DEVICES": "all"}}
        said = _written(lambda: core.patch_namespaced_config_map(name, NS, widened))
        assert said is not None and "ValidatingAdmissionPolicy" in said
        assert "only the GPU-sharing schedulers (kai-scheduler) may write it" in said
        labelled = {"metadata": {"labels": {"team": "vision"}}, "data": {"GPU_PORTION": "0.5"}}
        assert _written(lambda: core.patch_namespaced_config_map(name, NS, labelled)) is None
        own = _configmap("mine-0", "all")
        assert _written(lambda: core.create_namespaced_config_map(NS, body(own))) is not None
        stored = core.read_namespaced_config_map(name, NS)
        assert stored.data["NVIDIA_VISIBLE_DEVICES"] == "GPU-4b8e3c1a"
    finally:
        core.delete_namespaced_config_map(name, NS)
