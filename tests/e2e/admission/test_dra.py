"""GPUs through Dynamic Resource Allocation, end to end: kubectl and the client create
DeviceClasses, templates, claims and pods in the real kube-apiserver, which calls the real HTTPS
webhook service; what is checked is what the API stores, the warnings kubectl prints and the
metrics."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from kubernetes import client

from tests.world.harness import AdmissionCluster, AdmissionClusterFactory, body

NS = "ml"
CUDA_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


def device_class(name: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }


def claim_template(name: str, device_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "dev", "exactly": {"deviceClassName": device_class_name}}]
                }
            }
        },
    }


def dra_pod(name: str, template: str, *, sidecar: bool = True) -> dict[str, Any]:
    containers = [
        {"name": "trainer", "image": CUDA_IMAGE, "resources": {"claims": [{"name": "dev"}]}}
    ]
    if sidecar:
        containers.append({"name": "sidecar", "image": CUDA_IMAGE})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": containers,
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
        },
    }


def create(cluster: AdmissionCluster, *manifests: dict[str, Any]) -> str:
    stream = yaml.safe_dump_all(list(manifests))
    done = cluster.kubectl("create", "-f", "-", stdin=stream)
    assert done.returncode == 0, done.stderr
    return done.stderr


def hidden(cluster: AdmissionCluster, name: str) -> list[str]:
    done = cluster.kubectl("get", "pod", name, "-o", "json")
    assert done.returncode == 0, done.stderr
    pod = json.loads(done.stdout)
    return [c["name"] for c in pod["spec"]["containers"] if NONE in (c.get("env") or [])]


def notices(cluster: AdmissionCluster) -> float:
    text = cluster.metrics.exposition().decode()
    match = re.search(
        r'gpu_admission_admission_policy_notices_total\{notice="unresolved_gpu_claim",'
        r'webhook="/mutate/pods"\} (\S+)',
        text,
    )
    return float(match.group(1)) if match else 0.0


def test_dra_gpu_containers_keep_their_gpu_and_other_drivers_claims_do_not(
    admission_cluster: AdmissionCluster,
) -> None:
    cluster = admission_cluster
    dra = client.ResourceV1Api(cluster.api)
    dra.create_device_class(body(device_class("gpu.nvidia.com", "gpu.nvidia.com")))
    dra.create_device_class(body(device_class("rdma.example.com", "rdma.example.com")))
    create(cluster, claim_template("one-gpu", "gpu.nvidia.com"))
    create(cluster, claim_template("one-nic", "rdma.example.com"))
    cluster.wait_until(
        lambda: cluster.view.resource_claim_template(NS, "one-nic") is not None,
        "the templates in the service's cache",
    )
    warnings = create(cluster, dra_pod("train", "one-gpu"), dra_pod("net", "one-nic"))
    assert hidden(cluster, "train") == ["sidecar"]
    assert hidden(cluster, "net") == ["trainer", "sidecar"]
    assert "Warning" not in warnings
    assert notices(cluster) == 0


def test_a_template_created_right_before_the_pod_is_found(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    # The service's template watch is held back, so the template is not in its cache when the
    # pod arrives: the service waits briefly for it, then GETs it.
    cluster = admission_cluster_factory()
    watch_path = r"^/apis/resource\.k8s\.io/v1/resourceclaimtemplates$"
    cluster.faults.delay("GET", watch_path, 2.0, times=1)
    cluster.faults.drop_watches()
    gets_before = cluster.faults.request_count(
        "GET", r"/namespaces/ml/resourceclaimtemplates/just-made$"
    )
    create(cluster, claim_template("just-made", "gpu.nvidia.com"), dra_pod("fresh", "just-made"))
    assert hidden(cluster, "fresh") == ["sidecar"]
    gets = cluster.faults.request_count("GET", r"/namespaces/ml/resourceclaimtemplates/just-made$")
    assert gets - gets_before >= 1
    assert notices(cluster) == 0
    cluster.wait_until(  # and the held-back watch catches up
        lambda: cluster.view.claim_template_informer.get(f"{NS}/just-made") is not None,
        "the template in the service's informer",
    )


def test_an_unresolvable_claim_keeps_the_gpu_warns_and_is_counted(
    admission_cluster: AdmissionCluster,
) -> None:
    cluster = admission_cluster
    warnings = create(cluster, dra_pod("orphan", "never-created"))
    assert hidden(cluster, "orphan") == ["sidecar"]
    assert (
        'container "trainer": ResourceClaimTemplate "never-created" was not found in namespace ml;'
        in warnings
    )
    assert notices(cluster) == 1


def test_a_cluster_without_dra_stays_ready_and_serves_pods(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    cluster = admission_cluster_factory()
    cluster.kube_api.unserved_groups.add("resource.k8s.io")
    # The informers relist after a dropped watch and learn the group is gone.
    cluster.kube_api.faults.drop_watches()
    cluster.wait_until(
        lambda: not cluster.view.claim_template_informer.served, "the DRA informers to notice"
    )
    assert cluster.view.ready() == []
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": NS}}
    plain["spec"] = {"containers": [{"name": "app", "image": CUDA_IMAGE}]}
    create(cluster, plain)
    assert hidden(cluster, "cpu") == ["app"]


def validating_calls(cluster: AdmissionCluster) -> float:
    """How many pod reviews the validating webhook answered."""
    text = cluster.metrics.exposition().decode()
    return sum(
        float(value)
        for value in re.findall(
            r'gpu_admission_admission_requests_total\{[^}]*webhook="/validate/pods"[^}]*\} (\S+)',
            text,
        )
    )


def test_only_pods_with_claims_reach_the_validating_webhook(
    admission_cluster: AdmissionCluster,
) -> None:
    """The env guard of a claim GPU needs the claim's DeviceClass: the webhook decides it. Pods
    without claims are checked by the ValidatingAdmissionPolicy inside the API server alone."""
    cluster = admission_cluster
    dra = client.ResourceV1Api(cluster.api)
    dra.create_device_class(body(device_class("gpu.nvidia.com", "gpu.nvidia.com")))
    create(cluster, claim_template("one-gpu", "gpu.nvidia.com"))
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu", "namespace": NS}}
    plain["spec"] = {"containers": [{"name": "app", "image": CUDA_IMAGE}]}
    create(cluster, plain)
    assert validating_calls(cluster) == 0

    widened = dra_pod("widened", "one-gpu", sidecar=False)
    widened["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    done = cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(widened))

    assert done.returncode == 1
    assert (
        'admission webhook "pods.validate.gpu-admission.io" denied the request: '
        'container "trainer" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)'
    ) in done.stderr
    assert validating_calls(cluster) == 1
