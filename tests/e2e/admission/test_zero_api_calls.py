"""Admission never waits on the Kubernetes API: with the caches synced, reviews are answered from
memory. The fault proxy in front of the API server counts every request it gets, so "zero" is
measured, not assumed."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import uuid
from typing import Any

import jsonpatch

from tests import REVIEW_FIXTURES
from tests.world.harness import AdmissionCluster, AdmissionClusterFactory

FIXTURES = REVIEW_FIXTURES
ADMISSIONS = 1000
GPU_NODE = {
    "metadata": {
        "name": "a10g-4way",
        "labels": {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.memory": "23028"},
    },
    "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu.shared": "4"}},
}


def deployment_pod_review() -> dict[str, Any]:
    """The Pod the ReplicaSet controller created for a Deployment, as kube-apiserver sent it."""
    review: dict[str, Any] = json.loads(
        (FIXTURES / "pod-from-deployment.mutating.json").read_bytes()
    )
    return review


class WebhookConnection:
    """One keep-alive HTTPS connection to the service, trusting only its CA, as the API server
    holds one."""

    def __init__(self, cluster: AdmissionCluster) -> None:
        host, port = cluster.service_address.rsplit(":", 1)
        self.connection = http.client.HTTPSConnection(
            host, int(port), context=cluster.ssl_context(), timeout=30
        )

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        self.connection.request(
            "POST",
            f"{path}?timeout=5s",
            body=json.dumps(review).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        response = self.connection.getresponse()
        payload = response.read()
        assert response.status == 200, payload
        answer: dict[str, Any] = json.loads(payload)
        return answer

    def close(self) -> None:
        self.connection.close()


def test_a_thousand_admissions_make_no_request_to_the_api(
    admission_cluster_factory: AdmissionClusterFactory,
) -> None:
    cluster = admission_cluster_factory(nodes=[GPU_NODE])
    review = deployment_pod_review()
    pod = review["request"]["object"]
    # Everything the policies look up for this pod is cached: its node candidates and its
    # ServiceAccount (listed by the informer when the namespace was created).
    assert cluster.view.service_account("ml", "default") is not None
    assert cluster.view.node("a10g-4way") is not None
    connection = WebhookConnection(cluster)
    before = cluster.faults.request_count()
    sockets = set()
    answers = []
    try:
        for _ in range(ADMISSIONS):
            review["request"]["uid"] = str(uuid.uuid4())
            answer = connection.review("/mutate/pods", review)
            sockets.add(id(connection.connection.sock))
            answers.append((review["request"]["uid"], answer))
    finally:
        connection.close()
    after = cluster.faults.request_count()

    assert after - before == 0
    assert len(sockets) == 1  # one kept-alive connection served them all
    for uid, answer in answers:
        response = answer["response"]
        assert response["uid"] == uid
        assert response["allowed"] is True
        assert response["patchType"] == "JSONPatch"
        operations = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(copy.deepcopy(pod), operations)
        (embedder,) = patched["spec"]["containers"]
        assert {e["name"]: e["value"] for e in embedder["env"]} == {
            "GPU_MEMORY_FRACTION": "0.237",
            "GPU_SHARED_REPLICAS": "4",
            "GPU_MEMORY_LIMIT_MIB": "5457",
            "PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.237",
        }
        assert patched["metadata"]["annotations"]["gpu-admission.io/gpu-replicas"] == "4"


def test_the_count_sees_the_lookup_a_cache_miss_costs(admission_cluster: AdmissionCluster) -> None:
    """The control for the test above: a Secret the caches cannot hold (it does not exist) is
    looked up with one GET, and the proxy's count shows it."""
    review = deployment_pod_review()
    annotations = review["request"]["object"]["metadata"]["annotations"]
    annotations["gpu-admission.io/cloud-credentials"] = "not-created-yet"
    connection = WebhookConnection(admission_cluster)
    before = admission_cluster.faults.request_count()
    try:
        answer = connection.review("/mutate/pods", review)
    finally:
        connection.close()

    secret_reads = admission_cluster.faults.request_count(
        "GET", r"^/api/v1/namespaces/ml/secrets/not-created-yet$"
    )
    assert secret_reads == 1
    assert admission_cluster.faults.request_count() - before == 1
    assert answer["response"]["allowed"] is False
    assert "not-created-yet" in answer["response"]["status"]["message"]
