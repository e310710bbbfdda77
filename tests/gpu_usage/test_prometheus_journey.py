"""The node agent against the real kube-apiserver and a real Prometheus (Debian's `prometheus`
package, beside promtool): the agent names each GPU process's namespace, pod, container and
workload from the node's real pods, writes the over-share Event on the real pod, Prometheus
scrapes it and evaluates the monitoring overlay's rules as kustomize renders them, and
`gpu-admission usage` prints the workload's share and the namespace's GPU-hours from them.

Played: NVML (tests/gpu_usage/nvml_shim, the binding's calls answered from a file), the node's
/proc (real file formats, in a folder given to `--proc`), and the kubelet's status writes (through
the API, as the kubelet makes them). Everything else is the real thing."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from commands.parser import main as cli
from gpu_usage.idle_report import IDLE_SERIES
from gpu_usage.usage_report import GPUS_HELD, MEMORY_USED, hours_query
from tests.manifests.monitoring_queries import named_series, rule_spec
from tests.support.node_agent import running_status, start_agent
from tests.support.ports import free_port
from tests.support.prometheus_tools import prometheus_binary, short_idle_window, start_prometheus
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.namespaces import namespace_ready

pytestmark = pytest.mark.e2e

GIB = 1024**3
NAMESPACE = "gpu-usage-team"
NODE = "gpu-node-7"
H200 = 150754820096  # bytes, as NVML gives an H200's memory
TIMEOUT = 90.0


@pytest.fixture(scope="module")
def prometheus() -> str:
    return prometheus_binary("prometheus")


def _pod(name: str, container: dict, owner: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": NODE, "containers": [container]},
    }


def _jobset(api: client.ApiClient, name: str) -> dict:
    """A JobSet (the real CRD; no JobSet controller runs here, so it makes no pod itself), as
    the controller reference of the pod it would have made."""
    template = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1"}]}
    }
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [{"name": "workers", "template": {"spec": {"template": template}}}]
        },
    }
    made = client.CustomObjectsApi(api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", body
    )
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": name,
        "uid": made["metadata"]["uid"],
        "controller": True,
    }


def _running(core: client.CoreV1Api, name: str, container_id: str) -> str:
    """The kubelet's status write for a started pod; returns the pod's UID."""
    pod = core.patch_namespaced_pod_status(name, NAMESPACE, running_status(container_id))
    return str(pod.metadata.uid)


def _query(url: str, promql: str) -> list:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        return list(json.loads(answer.read())["data"]["result"])


@pytest.fixture
def node_pods(api: client.ApiClient, crds: None) -> Iterator[dict[str, str]]:
    """Two GPU pods on the node: a pod of its own on a quarter of a shared GPU with a 4 GiB
    share, and a JobSet's worker on a whole GPU (a Deployment's replica is followed to it in
    test_workloads.py: here a ReplicaSet controller would manage the pod). Returns each pod's
    UID and container ID."""
    namespace_ready(api, NAMESPACE, {"gpu-admission.io/exempt": "true"})
    core = client.CoreV1Api(api)
    # The node, as its kubelet registers it (a pod bound to no Node is collected by PodGC).
    node = {"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}}
    with contextlib.suppress(client.ApiException):
        core.create_node(node)
    train = _pod(
        "train-0",
        {
            "name": "main",
            "image": "trainer:1",
            "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
            "env": [
                {"name": "GPU_MEMORY_LIMIT_MIB", "value": "4096"},
                {"name": "GPU_SHARED_REPLICAS", "value": "4"},
            ],
        },
    )
    worker = _pod(
        "pretrain-workers-0-0-abcde",
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        _jobset(api, "pretrain"),
    )
    ids = {"train-0": "a" * 64, "pretrain-workers-0-0-abcde": "b" * 64}
    uids = {}
    for pod in (train, worker):
        core.create_namespaced_pod(NAMESPACE, pod)
        name = pod["metadata"]["name"]
        uids[name] = _running(core, name, ids[name])
    try:
        yield {name: f"{uids[name]}/{ids[name]}" for name in ids}
    finally:
        core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", "pretrain"
        )
        core.delete_node(NODE)


def test_prometheus_scrapes_the_agent_and_usage_prints_from_the_rules(
    real_cluster: ControlPlane,
    api: client.ApiClient,
    node_pods: dict[str, str],
    prometheus: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The node: /proc entries of the two processes (pod UID and container ID in the cgroup
    # path, as the cgroupfs driver writes it), and what NVML says of them.
    proc = tmp_path / "proc"
    for pid, name in ((4101, "train-0"), (4102, "pretrain-workers-0-0-abcde")):
        uid, container_id = node_pods[name].split("/")
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid}/{container_id}\n")
        (proc / str(pid) / "comm").write_text("python\n")
    nvml = tmp_path / "nvml.json"
    nvml.write_text(
        json.dumps(
            {
                "gpus": [
                    # 6 GiB against a 4 GiB share: past it, with a context's allowance.
                    {
                        "uuid": "GPU-a",
                        "total": H200,
                        "processes": {"4101": 6 * GIB},
                        "sm": {"4101": 30},
                    },
                    # The JobSet's worker holds its GPU and memory and computes nothing.
                    {
                        "uuid": "GPU-b",
                        "total": H200,
                        "processes": {"4102": 20 * GIB},
                        "sm": {"4102": 0},
                    },
                ]
            }
        )
    )
    metrics_port, prometheus_port = free_port(), free_port()

    def start(log_name: str) -> subprocess.Popen[bytes]:
        return start_agent(
            real_cluster.kubeconfig, NODE, proc, nvml, metrics_port, tmp_path / log_name
        )

    agent = start("agent.log")
    rules = short_idle_window(rule_spec())
    server = start_prometheus(
        prometheus, tmp_path, rules, f"127.0.0.1:{metrics_port}", prometheus_port
    )
    url = f"http://127.0.0.1:{prometheus_port}"
    running = {"agent": agent, "prometheus": server}
    try:
        exposition = while_running(
            # The containers' duty: a second sweep's (the first opens NVML's window), after
            # the pods' listing, which runs beside the sweeps.
            lambda: _text(
                f"http://127.0.0.1:{metrics_port}/metrics",
                "gpu_admission_container_gpu_duty_cycle{",
            ),
            "the agent's containers, named, with their duty cycle",
            running,
            TIMEOUT,
            tmp_path / "agent.log",
        )
        # Every series the overlay's agent rules read is exposed by the agent.
        missing = [name for name in named_series(agent=True) if name not in exposition]
        assert not missing, missing
        assert (
            'container_accelerator_memory_used_bytes{acc_id="GPU-a",container="main",'
            'gpu_model="NVIDIA H200",gpu_uuid="GPU-a",make="nvidia",model="NVIDIA H200",'
            'namespace="gpu-usage-team",pod="train-0",preallocated="false",workload="train-0",'
            'workload_kind="Pod"} 6.442450944e+09'
        ) in exposition
        # The over-share Event, on the real pod, with the numbers.
        core = client.CoreV1Api(api)
        event = while_running(
            lambda: _event(core, "train-0"), "the over-share Event", running, TIMEOUT
        )
        assert event.type == "Warning"
        assert event.involved_object.uid == node_pods["train-0"].split("/")[0]
        assert "uses 6,144 MiB of GPU 0" in event.message and "over its share of 4,096 MiB" in (
            event.message
        )
        # Prometheus scraped it and evaluated the rules.
        for record in (
            "gpu_admission:workload_gpu_memory_used_bytes:max5m",
            "gpu_admission:workload_gpu_duty_cycle:avg5m",
            "gpu_admission:namespace_gpus_held:sum",
            "gpu_admission:namespace_gpu_memory_used_bytes:sum",
        ):
            while_running(lambda r=record: _query(url, r), record, running, TIMEOUT)
        alerting = while_running(
            lambda: _query(url, "gpu_admission_container_gpu_memory_over_share_bytes"),
            "the over-share series",
            running,
            TIMEOUT,
        )
        assert float(alerting[0]["value"][1]) == GIB  # 6 GiB - (4 GiB + one context)

        assert cli(["usage", "--prometheus", url, "--since", "1h", "-o", "json"]) == 0
        by_workload = {row["workload"]: row for row in json.loads(capsys.readouterr().out)}
        train = by_workload["train-0"]
        assert (train["workload_kind"], train["peak_bytes"], train["share_bytes"]) == (
            "Pod",
            6 * GIB,
            4 * GIB,
        )
        assert train["needed_bytes"] == 6912 * 1024**2  # 6 GiB + 10 %, in 256 MiB steps
        assert train["replicas"] == {"NVIDIA H200": 20}
        assert by_workload["pretrain"]["workload_kind"] == "JobSet"

        # A minute's worth of steps (2 s apart over 2m) must hold a sample before the bill can.
        for series in (GPUS_HELD, MEMORY_USED):
            query = hours_query(series, "2m")
            while_running(lambda q=query: _query(url, q), query, running, TIMEOUT)
        assert cli(["usage", "--prometheus", url, "--by", "namespace", "--since", "2m"]) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == ["NAMESPACE", "GPU-HOURS", "GPU-MEMORY", "GIB-HOURS"]
        assert table[1].split()[0] == NAMESPACE
        assert (
            cli(["usage", "--prometheus", url, "--by", "namespace", "--since", "2m", "-o", "csv"])
            == 0
        )
        header, row = capsys.readouterr().out.splitlines()
        assert header == "namespace,gpu_hours,gpu_memory_gib_hours"
        ns, gpu_hours, memory_hours = row.split(",")
        # 1.25 GPUs held and 26 GiB used for the seconds it ran, within the 2 minutes.
        assert ns == NAMESPACE
        assert 0 < float(gpu_hours) <= 1.25 * 120 / 3600
        assert 0 < float(memory_hours) <= 26 * 120 / 3600

        # The JobSet's worker is idle once the (shortened) window has passed, the busy pod not;
        # `usage --idle` names what the rule has.
        idle = while_running(
            lambda: _query(url, IDLE_SERIES), "the idle workload", running, TIMEOUT
        )
        assert [(s["metric"]["workload"], float(s["value"][1])) for s in idle] == [("pretrain", 1)]
        assert cli(["usage", "--prometheus", url, "--idle", "--since", "10m", "-o", "json"]) == 0
        (named,) = json.loads(capsys.readouterr().out)
        assert (named["namespace"], named["workload_kind"], named["workload"]) == (
            NAMESPACE,
            "JobSet",
            "pretrain",
        )
        assert named["gpus"] == 1 and named["gpu_hours_idle"] > 0
        assert cli(["usage", "--prometheus", url, "--idle", "--by", "namespace"]) == 0
        header, row = capsys.readouterr().out.splitlines()
        assert header.split() == ["NAMESPACE", "IDLE", "NOW", "GPU-HOURS", "IDLE"]
        assert row.split()[:2] == [NAMESPACE, "1"]

        # The agent restarts with the container still over its share: the same rise, so the
        # same Event's name, which the API server has; it counts as written, and no second.
        agent.terminate()
        agent.wait(timeout=30)
        agent = running["agent"] = start("agent-restarted.log")
        while_running(
            lambda: _text(
                f"http://127.0.0.1:{metrics_port}/metrics",
                'gpu_admission_gpu_usage_over_share_events_total{result="written"} 1.0',
            ),
            "the restarted agent's judgement",
            running,
            TIMEOUT,
            tmp_path / "agent-restarted.log",
        )
        events = core.list_namespaced_event(
            NAMESPACE, field_selector="involvedObject.name=train-0,reason=GPUMemoryOverShare"
        ).items
        assert len(events) == 1, [e.metadata.name for e in events]
    finally:
        for process in (agent, server):
            process.terminate()
            process.wait(timeout=30)


def _text(url: str, needle: str) -> str | None:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return text if needle in text else None


def _event(core: client.CoreV1Api, pod: str) -> client.CoreV1Event | None:
    events = core.list_namespaced_event(
        NAMESPACE, field_selector=f"involvedObject.name={pod},reason=GPUMemoryOverShare"
    ).items
    return events[0] if events else None
