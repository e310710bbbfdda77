"""The played kubelet as a node agent of the real control plane: kube-apiserver, the real
kube-scheduler binding pods to its Node and the real Job controller running Jobs, while it runs
the pods bound to it, writes their status as the kubelet does, serves their logs to `pods/log`
over HTTPS, and finishes the deletion of pods deleted with a grace period."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.kubelet.node import FakeKubelet
from tests.world.namespaces import namespace_ready

pytestmark = pytest.mark.e2e

NS = "node-agent"
NODE = "agent-1"
WAIT = 60


@pytest.fixture(scope="module")
def kubelet(
    real_cluster: ControlPlane, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeKubelet]:
    namespace_ready(api, NS)
    node = FakeKubelet(
        api,
        node_name=NODE,
        pvc_base_dir=Path(tmp_path_factory.mktemp("pvcs")),
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()
        client.CoreV1Api(api).delete_node(NODE)


def job(name: str, script: str, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": NODE},
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sh", "-c", script],
                            "env": [
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                }
                            ],
                            **container,
                        }
                    ],
                }
            },
        },
    }


def finished(api: client.ApiClient, name: str) -> str | None:
    status = client.BatchV1Api(api).read_namespaced_job(name, NS).status
    for condition in (status and status.conditions) or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return str(condition.type)
    return None


def only_pod(api: client.ApiClient, job_name: str) -> client.V1Pod:
    (pod,) = (
        client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=f"job-name={job_name}").items
    )
    return pod


def test_the_node_is_registered_ready(kubelet: FakeKubelet, api: client.ApiClient) -> None:
    node = client.CoreV1Api(api).read_node(NODE)
    ready = {c.type: c.status for c in node.status.conditions}
    assert ready["Ready"] == "True"
    assert node.status.daemon_endpoints.kubelet_endpoint.port > 0


def test_a_job_runs_to_completion_with_the_real_job_controller(
    kubelet: FakeKubelet, api: client.ApiClient
) -> None:
    client.BatchV1Api(api).create_namespaced_job(
        NS, job("hello", "echo hello from $POD_NAME; echo all done > /dev/termination-log")
    )
    assert (
        while_running(lambda: finished(api, "hello"), "the Job to finish", {}, WAIT) == "Complete"
    )
    pod = only_pod(api, "hello")
    assert pod.spec.node_name == NODE  # bound by kube-scheduler
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0 and terminated.message == "all done\n"
    # pods/log: kube-apiserver asks this node's kubelet endpoint, over HTTPS.
    log = client.CoreV1Api(api).read_namespaced_pod_log(pod.metadata.name, NS, container="main")
    assert log == f"hello from {pod.metadata.name}\n"
    tail = client.CoreV1Api(api).read_namespaced_pod_log(pod.metadata.name, NS, tail_lines=0)
    assert tail == ""


def test_a_failing_container_fails_the_job_with_its_exit_code_and_message(
    kubelet: FakeKubelet, api: client.ApiClient
) -> None:
    client.BatchV1Api(api).create_namespaced_job(
        NS,
        job(
            "broken",
            "echo no such bucket >&2; exit 3",
            terminationMessagePolicy="FallbackToLogsOnError",
        ),
    )
    assert while_running(lambda: finished(api, "broken"), "the Job to fail", {}, WAIT) == "Failed"
    terminated = only_pod(api, "broken").status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3
    assert terminated.message == "no such bucket\n"


def test_a_pod_deleted_with_a_grace_period_is_gone_once_its_processes_are(
    kubelet: FakeKubelet, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    pod = {
        "metadata": {"name": "sleeper"},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "300"]}],
        },
    }
    core.create_namespaced_pod(NS, pod)
    while_running(
        lambda: core.read_namespaced_pod("sleeper", NS).status.phase == "Running",
        "the pod to run",
        {},
        WAIT,
    )
    core.delete_namespaced_pod("sleeper", NS)  # the default 30 s grace period

    def gone() -> bool:
        try:
            core.read_namespaced_pod("sleeper", NS)
        except client.ApiException as error:
            return error.status == 404
        return False

    while_running(gone, "the deleted pod to go", {}, WAIT)
