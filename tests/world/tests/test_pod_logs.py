"""`pods/log` through the real kube-apiserver: proxied to the played kubelet of the pod's node,
with the API server's container checks and the kubelet's tailLines/limitBytes."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from tests.world.kubelet.logs import tail
from tests.world.tests.workloads import NAMESPACE, job, job_condition, job_pods, wait_for

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier


def test_tail_then_limit_like_the_kubelet():
    data = b"one\ntwo\nthree\n"
    assert tail(data, 2, None) == b"two\nthree\n"
    assert tail(data, 2, 5) == b"two\nt"
    assert tail(data, 0, None) == b""
    assert tail(data, None, None) == data


def test_a_job_pods_log_is_read_through_the_api(kubelet, core, batch):
    script = "for i in 1 2 3 4 5; do echo line-$i; done"
    batch.create_namespaced_job(
        NAMESPACE, job("talk", {"name": "main", "command": ["sh", "-c", script]})
    )
    wait_for(batch.list_namespaced_job, "talk", lambda j: job_condition(j) is not None)
    [pod] = job_pods(core, "talk")
    name = pod.metadata.name
    assert core.read_namespaced_pod_log(name, NAMESPACE) == "".join(
        f"line-{i}\n" for i in range(1, 6)
    )
    assert core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=2) == "line-4\nline-5\n"
    assert core.read_namespaced_pod_log(name, NAMESPACE, tail_lines=2, limit_bytes=3) == "lin"
    assert core.read_namespaced_pod_log(name, NAMESPACE, container="main", tail_lines=1) == (
        "line-5\n"
    )
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log(name, NAMESPACE, container="other")
    assert caught.value.status == 400
    assert (
        json.loads(caught.value.body)["message"] == f"container other is not valid for pod {name}"
    )


def test_container_must_be_named_when_there_are_several_and_unscheduled_pods_are_empty(core):
    body = {
        "metadata": {"name": "two"},
        "spec": {
            "nodeSelector": {"no-such": "node"},
            "containers": [
                {"name": "a", "image": "busybox"},
                {"name": "b", "image": "busybox"},
            ],
        },
    }
    core.create_namespaced_pod(NAMESPACE, body)
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log("two", NAMESPACE)
    assert caught.value.status == 400
    assert json.loads(caught.value.body)["message"] == (
        "a container name must be specified for pod two, choose one of: [a b]"
    )
    # Not scheduled yet: 204 No Content (which the client reads as None).
    empty = core.read_namespaced_pod_log("two", NAMESPACE, container="a", _preload_content=False)
    assert (empty.status, empty.data) == (204, b"")
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod_log("missing", NAMESPACE)
    assert caught.value.status == 404
