"""Workloads through a real kube-apiserver 1.36 calling the webhook service beside the base's
policies, with the real kube-controller-manager making their pods:

- `kubectl apply` of a Deployment (and a CronJob) naming a credential Secret that does not exist
  yet succeeds, with a warning that names the Secret;
- a good Deployment, ReplicaSet, StatefulSet, DaemonSet or Job is stored as written (templates
  are never changed), and the pod its controller makes gets exactly the changes a bare pod of
  the same template gets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from gpu_admission.config.model import Config
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.service import served
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from webhooks.dispatch.workload_checks import STATE_DEPENDENT

NAMESPACE = "ml-workload-hooks"
EXEMPT = "exempt-workload-hooks"
CREDS = "gpu-admission.io/cloud-credentials"
PREFIX = "gpu-admission.io/"


@pytest.fixture(scope="module")
def apps(
    real_cluster: ControlPlane, kubectl: Kubectl, api: client.ApiClient, crds: None
) -> Iterator[client.AppsV1Api]:
    apply_base(kubectl)
    namespace_ready(api, NAMESPACE)
    namespace_ready(api, EXEMPT, labels={Config().exempt_label: "true"})
    core = client.CoreV1Api(api)
    core.create_node(NODE)  # for the DaemonSet controller to make a pod for
    try:
        with served(real_cluster):
            yield client.AppsV1Api(api)
    finally:
        core.delete_node(NODE["metadata"]["name"])


def deployment(name: str, annotations: dict[str, str], containers: list[dict]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": containers},
            },
        },
    }


def applied(kubectl: Kubectl, obj: dict[str, Any]) -> str:
    """`kubectl apply` of `obj`; returns what kubectl said on stderr (the warnings)."""
    done = kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(obj))
    return done.stderr


def test_a_missing_secret_is_a_warning_at_apply(apps: client.AppsV1Api, kubectl: Kubectl) -> None:
    notebook = deployment(
        "notebook", {CREDS: "s3-creds"}, [{"name": "nb", "image": "jupyter/base-notebook"}]
    )
    said = applied(kubectl, notebook)
    assert f'Warning: Deployment "notebook": {STATE_DEPENDENT}: ' in said
    assert 'Secret "s3-creds"' in said
    apps.read_namespaced_deployment("notebook", NAMESPACE)  # admitted
    nightly = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "metadata": {"annotations": {CREDS: "s3-creds"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "batch", "image": "python"}],
                        },
                    }
                }
            },
        },
    }
    said = applied(kubectl, nightly)
    assert f'Warning: CronJob "nightly": {STATE_DEPENDENT}: ' in said and "s3-creds" in said
    # Scaling says nothing: the template did not change.
    scaled = kubectl("scale", "deployment/notebook", "-n", NAMESPACE, "--replicas=0")
    assert "Warning" not in scaled.stderr


def _ours(pod: dict[str, Any]) -> dict[str, Any]:
    """What gpu-admission changes in a pod, less what differs between any two pods."""
    meta = pod["metadata"]
    return {
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if PREFIX in k},
        "env": [c.get("env") for c in pod["spec"]["containers"]],
        "gates": pod["spec"].get("schedulingGates"),
    }


KINDS_THAT_MAKE_PODS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")
# A Node object, no kubelet behind it: the DaemonSet controller makes a pod for it all the same
# (daemon pods tolerate the not-ready taint a new Node gets).
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "workload-hooks-node", "labels": {"kubernetes.io/hostname": "w"}},
}


def good(kind: str, name: str) -> dict[str, Any]:
    """A `kind` whose template a GPU pod and a CPU pod would both be admitted from."""
    containers = [
        {"name": "cpu", "image": "python", "env": [{"name": "MODE", "value": "serve"}]},
        {"name": "gpu", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}},
    ]
    template = {
        "metadata": {
            "labels": {"app": name},
            "annotations": {"gpu-admission.io/gpu-app": "pytorch"},
        },
        "spec": {"containers": containers},
    }
    selector = {"matchLabels": {"app": name}}
    if kind == "Job":
        template["spec"]["restartPolicy"] = "Never"
        spec: dict[str, Any] = {"template": template}
        api_version = "batch/v1"
    else:
        spec = {"replicas": 1, "selector": selector, "template": template}
        if kind == "DaemonSet":
            del spec["replicas"]
        if kind == "StatefulSet":
            spec["serviceName"] = name
        api_version = "apps/v1"
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec}


def _template_of(obj: dict[str, Any]) -> dict[str, Any]:
    template = obj["spec"]["template"]
    labels = template["metadata"].get("labels") or {}
    uid_free = {k: v for k, v in labels.items() if "controller-uid" not in k}
    return {**template, "metadata": {**template["metadata"], "labels": uid_free}}


@pytest.mark.parametrize("kind", KINDS_THAT_MAKE_PODS)
def test_a_good_workload_is_stored_as_written_and_its_pods_changed_like_bare_ones(
    apps: client.AppsV1Api, api: client.ApiClient, kind: str
) -> None:
    name = f"good-{kind.lower()}"
    manifest = good(kind, name)
    resource = dynamic.DynamicClient(api).resources.get(
        api_version=manifest["apiVersion"], kind=kind
    )
    as_written = resource.create(body=manifest, namespace=EXEMPT, dry_run="All").to_dict()
    made = resource.create(body=manifest, namespace=NAMESPACE).to_dict()
    # Never changed: the template is stored as the same object stored where nothing applies
    # (less the Job controller's labels naming this Job's uid).
    assert _template_of(made) == _template_of(as_written)
    core = client.CoreV1Api(api)
    selector = f"app={name}"

    def pod_made() -> bool:
        return bool(core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)

    while_running(pod_made, f"the {kind}'s pod", {}, 60)
    pod = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items[0]
    template = manifest["spec"]["template"]
    serialize = api.sanitize_for_serialization
    spec = dict(template["spec"])
    if kind == "DaemonSet":  # its controller pins each pod to its node: a bare pod pinned alike
        spec["affinity"] = serialize(pod.spec.affinity)
    bare = core.create_namespaced_pod(
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "bare-", **template["metadata"]},
            "spec": spec,
        },
        dry_run="All",
    )
    assert _ours(serialize(pod)) == _ours(serialize(bare))
    # The changes are there at all: the CPU container is hidden from the GPUs.
    cpu_env = _ours(serialize(pod))["env"][0]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in cpu_env
