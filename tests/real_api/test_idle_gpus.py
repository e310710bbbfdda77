"""Idle GPUs announced and given back, on the real kube-apiserver 1.36 with its real Deployment,
ReplicaSet and Job controllers: the node agent (played NVML) reports what each container uses, a
real Prometheus evaluates the monitoring component's idle rules (their hour shortened to 10
seconds), and the controller, as its own ServiceAccount with the RBAC of the base and of
manifests/components/idle-gpus, announces and gives back what the rules name.

In an opted-in namespace: an idle Deployment is announced (GPUIdle), scaled to zero after the
grace period, and comes back with the command its Event gives; an idle Job is suspended and
resumes with its command; a Deployment labelled keep-idle-gpus is announced and kept; a bursting
one is never named. `usage --idle` names what the rule names. When the agent stops reporting,
nothing is idle: the kept Deployment's stretch ends, and what came back is left alone.

Played: NVML (tests/gpu_usage/nvml_shim), the node's /proc, and the kubelet's writes for the
node's pods (PlayedGpuNode: a pod bound to the node is marked running with a container ID, and a
deleted one's deletion finished), through the API, as the kubelet makes them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from commands.controller import ControllerProcess
from commands.parser import main as cli
from gpu_admission.config.model import Config
from gpu_admission.gpus.idle_series import IDLE_SERIES
from gpu_admission.process.metrics import Metrics
from tests import ROOT
from tests.manifests.monitoring_queries import rule_spec
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.support.node_agent import running_status, start_agent
from tests.support.ports import free_port
from tests.support.prometheus_tools import prometheus_binary, short_idle_window, start_prometheus
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.harness import KUBECTL

pytestmark = pytest.mark.e2e

NAMESPACE = "idle-team"
NODE = "gpu-node-idle"
CONTROLLER = "system:serviceaccount:gpu-admission:gpu-admission-controller"
GIB = 1024**3
H200 = 150754820096
WINDOW, GRACE = 10, 3  # the shortened rules' window; the grace set below
TIMEOUT = 120.0
# What each workload's process does on its GPU: memory, and SM % per agent sweep (a list: a
# burst every other sweep, a second or two apart on a busy machine, well inside the window).
USE: dict[str, tuple[int, int | list[int]]] = {
    "notebook": (2 * GIB, 0),
    "kept": (3 * GIB, 0),
    "bursty": (4 * GIB, [60, 0]),
    "sweep": (5 * GIB, 0),
}


class PlayedGpuNode:
    """The kubelet's writes for the pods bound to NODE, and what NVML and /proc show of them:
    each pod is marked running with a container ID and gets a process on its workload's GPU; a
    deleted pod's deletion is finished (grace period 0, by UID) once its process is gone."""

    def __init__(self, api: client.ApiClient, proc: Path, nvml: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.proc, self.nvml = proc, nvml
        self.running: dict[str, tuple[int, str]] = {}  # pod uid -> (pid, workload)
        self.next_pid = 5000
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._write_nvml()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()
        self._thread.join(timeout=30)

    def _write_nvml(self) -> None:
        gpus = []
        for workload, (memory, sm) in USE.items():
            pids = [pid for pid, name in self.running.values() if name == workload]
            gpus.append(
                {
                    "uuid": f"GPU-{workload}",
                    "total": H200,
                    "processes": {str(pid): memory for pid in pids},
                    "sm": {str(pid): sm for pid in pids},
                }
            )
        self.nvml.write_text(json.dumps({"gpus": gpus}))

    def _serve(self) -> None:
        selector = f"spec.nodeName={NODE}"
        while not self._stopped.is_set():
            try:
                for event in self._watch.stream(
                    self.core.list_namespaced_pod,
                    NAMESPACE,
                    field_selector=selector,
                    timeout_seconds=5,
                ):
                    with contextlib.suppress(client.ApiException):  # gone meanwhile
                        self._seen(event["object"])
            except (client.ApiException, urllib3.exceptions.HTTPError):
                # The watch cache behind the version asked (504), gone (410), a stream cut: list
                # again, as the kubelet's informer does; a pod seen twice is handled once.
                self._watch = watch.Watch()

    def _seen(self, pod: client.V1Pod) -> None:
        uid, name = pod.metadata.uid, pod.metadata.name
        if pod.metadata.deletion_timestamp is not None:
            if self.running.pop(uid, None) is not None:
                self._write_nvml()
            # As the kubelet's status manager: grace 0, by UID, in the body (the API server reads
            # the query's gracePeriodSeconds only when no body is sent).
            finish = client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
            )
            with contextlib.suppress(client.ApiException):  # gone already
                self.core.delete_namespaced_pod(name, NAMESPACE, body=finish)
            return
        if uid in self.running or pod.status.phase != "Pending":
            return
        container_id = hashlib.sha256(uid.encode()).hexdigest()
        pid, self.next_pid = self.next_pid, self.next_pid + 1
        (self.proc / str(pid)).mkdir(parents=True)
        # The cgroupfs driver's path: the pod's UID and the container's ID.
        (self.proc / str(pid) / "cgroup").write_text(
            f"0::/kubepods/besteffort/pod{uid}/{container_id}\n"
        )
        (self.proc / str(pid) / "comm").write_text("python\n")
        self.core.patch_namespaced_pod_status(name, NAMESPACE, running_status(container_id))
        self.running[uid] = (pid, pod.metadata.labels["app"])
        self._write_nvml()


def _template(name: str, restart: str = "Always") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def _deployment(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": _template(name),
        },
    }


SWEEP = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "sweep"},
    "spec": {"backoffLimit": 0, "template": _template("sweep", "Never")},
}


def _as_controller(api: client.ApiClient) -> client.ApiClient:
    """The admin connection, impersonating the controller's ServiceAccount: RBAC decides."""
    return client.ApiClient(
        api.configuration, header_name="Impersonate-User", header_value=CONTROLLER
    )


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as answer:
        return list(json.loads(answer.read())["data"]["result"])


OURS = ("GPUIdle", "GPUsReturned", "GPUReturnFailed")


def _events(core: client.CoreV1Api, kind: str, name: str) -> list[client.CoreV1Event]:
    """The idle check's Events on the object (kube-controller-manager writes its own)."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    events = core.list_namespaced_event(NAMESPACE, field_selector=selector).items
    ours = [e for e in events if e.reason in OURS]
    return sorted(ours, key=lambda e: (e.metadata.creation_timestamp, e.metadata.name))


def _reasons(core: client.CoreV1Api, kind: str, name: str) -> list[str]:
    return [e.reason for e in _events(core, kind, name)]


def _restore(kubeconfig: Path, message: str) -> None:
    """Run the command the GPUsReturned Event gives, as a researcher would paste it."""
    (command,) = re.findall(r"Bring it back with: (.+)$", message)
    assert KUBECTL
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{Path(KUBECTL).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (command, done.stderr)


async def _wait(
    condition: Callable[[], Any],
    what: str,
    running: dict[str, subprocess.Popen[bytes]],
    timeout: float = TIMEOUT,
) -> Any:
    return await asyncio.to_thread(while_running, condition, what, running, timeout)


@pytest.fixture
def idle_world(
    real_cluster: ControlPlane, api: client.ApiClient, kubectl: Kubectl, crds: None
) -> Iterator[ControlPlane]:
    apply_base(kubectl)  # the controller's ServiceAccount and role
    rbac = ROOT / "manifests" / "components" / "idle-gpus" / "rbac.yaml"
    kubectl("apply", "-f", str(rbac))
    labels = {"gpu-admission.io/exempt": "true", "gpu-admission.io/return-idle-gpus": "true"}
    namespace_ready(api, NAMESPACE, labels)
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):
        core.create_node({"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}})
    try:
        yield real_cluster
    finally:
        apps = client.AppsV1Api(api)
        for name in USE:
            with contextlib.suppress(client.ApiException):
                apps.delete_namespaced_deployment(name, NAMESPACE)
        with contextlib.suppress(client.ApiException):
            client.BatchV1Api(api).delete_namespaced_job("sweep", NAMESPACE)
        core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
        core.delete_node(NODE)


async def test_idle_workloads_are_announced_given_back_and_brought_back(
    idle_world: ControlPlane,
    api: client.ApiClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    prometheus = prometheus_binary("prometheus")
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    proc, nvml = tmp_path / "proc", tmp_path / "nvml.json"
    proc.mkdir()
    node = PlayedGpuNode(api, proc, nvml)
    node.start()
    metrics_port, prometheus_port = free_port(), free_port()
    agent = start_agent(
        idle_world.kubeconfig, NODE, proc, nvml, metrics_port, tmp_path / "agent.log"
    )
    rules = short_idle_window(rule_spec())
    server = start_prometheus(
        prometheus, tmp_path, rules, f"127.0.0.1:{metrics_port}", prometheus_port
    )
    url = f"http://127.0.0.1:{prometheus_port}"
    running = {"agent": agent, "prometheus": server}
    config = Config.model_validate(
        {
            "idle": {"prometheus_url": url, "interval": 1, "grace": GRACE},
            "server": {"metrics_port": 0},
            "leader_election": {"namespace": "gpu-admission", "retry_period_seconds": 0.2},
            "install": {"write_admission_objects": False},
        }
    )
    metrics = Metrics(process_metrics=False)
    process = ControllerProcess(config, _as_controller(api), metrics, identity="idle-test")
    checker = process.idle_checker
    assert checker is not None
    caplog.set_level(logging.INFO, logger="gpu_admission.audit.idle")
    for name in USE.keys() - {"sweep"}:
        keep = {"gpu-admission.io/keep-idle-gpus": "true"} if name == "kept" else None
        apps.create_namespaced_deployment(NAMESPACE, _deployment(name, keep))
    batch.create_namespaced_job(NAMESPACE, SWEEP)
    await process.start()
    try:
        # The idle Deployment: announced with its grace, then scaled to zero.
        await _wait(
            lambda: apps.read_namespaced_deployment("notebook", NAMESPACE).spec.replicas == 0,
            "the idle Deployment scaled to zero",
            running,
        )
        deployment = apps.read_namespaced_deployment("notebook", NAMESPACE)
        assert deployment.metadata.annotations["gpu-admission.io/replicas-before-idle"] == "1"
        assert "gpu-admission.io/idle-gpus-announced" not in deployment.metadata.annotations
        announced, returned = _events(core, "Deployment", "notebook")
        assert (announced.reason, announced.type) == ("GPUIdle", "Warning")
        assert announced.involved_object.uid == deployment.metadata.uid
        assert "Deployment notebook holds 1 GPU it has not used" in announced.message
        assert "unless it uses them, it will be scaled to zero at" in announced.message
        assert (returned.reason, returned.type) == ("GPUsReturned", "Normal")
        assert returned.message.endswith(
            f"Bring it back with: kubectl -n {NAMESPACE} scale deployment/notebook --replicas=1"
        )
        # The idle Job: suspended (the Job controller deletes its pod).
        await _wait(
            lambda: batch.read_namespaced_job("sweep", NAMESPACE).spec.suspend,
            "the idle Job suspended",
            running,
        )
        assert _reasons(core, "Job", "sweep") == ["GPUIdle", "GPUsReturned"]
        # Every action counted and in the audit log.
        registry = metrics.registry
        for kind in ("Deployment", "Job"):
            returned_hours = registry.get_sample_value(
                "gpu_admission_gpu_hours_returned_total", {"namespace": NAMESPACE, "kind": kind}
            )
            assert returned_hours is not None and returned_hours > 0, kind
        audited = [r for r in caplog.records if r.name == "gpu_admission.audit.idle"]
        given = [
            (r.action, r.workload) for r in audited if r.action in ("scaled to zero", "suspended")
        ]
        assert sorted(given) == [("scaled to zero", "notebook"), ("suspended", "sweep")]

        # Labelled to be kept: announced, saying so, never given back; the same checks ran.
        kept = apps.read_namespaced_deployment("kept", NAMESPACE)
        assert kept.spec.replicas == 1
        (kept_event,) = _events(core, "Deployment", "kept")
        assert kept_event.reason == "GPUIdle" and "Stop it or scale it down" in kept_event.message
        # Bursting: never named by the rule, never announced, untouched.
        assert apps.read_namespaced_deployment("bursty", NAMESPACE).spec.replicas == 1
        assert _reasons(core, "Deployment", "bursty") == []
        assert not _query(url, f'count_over_time({IDLE_SERIES}{{workload="bursty"}}[10m])')

        # Once the given-back pods are gone, `usage --idle` names what the rule names.
        await _wait(
            lambda: [s["metric"]["workload"] for s in _query(url, IDLE_SERIES)] == ["kept"],
            "the rule naming only the kept Deployment",
            running,
        )
        ruled = {
            (s["metric"]["namespace"], s["metric"]["workload_kind"], s["metric"]["workload"]): (
                float(s["value"][1])
            )
            for s in _query(url, IDLE_SERIES)
        }
        assert (
            await asyncio.to_thread(cli, ["usage", "--prometheus", url, "--idle", "-o", "json"])
            == 0
        )
        listed = {
            (r["namespace"], r["workload_kind"], r["workload"]): r["gpus"]
            for r in json.loads(capsys.readouterr().out)
        }
        assert listed == ruled == {(NAMESPACE, "Deployment", "kept"): 1.0}

        # Brought back with the commands the Events give.
        await asyncio.to_thread(_restore, idle_world.kubeconfig, returned.message)
        (job_returned,) = [e for e in _events(core, "Job", "sweep") if e.reason == "GPUsReturned"]
        await asyncio.to_thread(_restore, idle_world.kubeconfig, job_returned.message)
        assert not batch.read_namespaced_job("sweep", NAMESPACE).spec.suspend
        back = {"notebook", "sweep"}
        await _wait(
            lambda: back <= {w for _, w in list(node.running.values())},
            "the notebook's and the Job's new pods running",
            running,
        )

        # The agent stops reporting: nothing is idle, the kept Deployment's stretch ends, and
        # what came back is left alone past a window and a grace.
        agent.terminate()
        agent.wait(timeout=30)
        del running["agent"]
        stopped = time.time()
        await _wait(
            lambda: (
                not _query(url, IDLE_SERIES)
                and "gpu-admission.io/idle-gpus-announced"
                not in (
                    apps.read_namespaced_deployment("kept", NAMESPACE).metadata.annotations or {}
                )
            ),
            "the kept Deployment's stretch to end without figures",
            running,
        )
        await _wait(
            lambda: checker.last_check_started > stopped + WINDOW + GRACE + 2,
            "a check a window and a grace after the agent stopped",
            running,
        )
        assert apps.read_namespaced_deployment("notebook", NAMESPACE).spec.replicas == 1
        assert not batch.read_namespaced_job("sweep", NAMESPACE).spec.suspend
        assert _reasons(core, "Deployment", "notebook") == ["GPUIdle", "GPUsReturned"]
    finally:
        await process.stop()
        node.stop()
        for child in (agent, server):
            if child.poll() is None:
                child.terminate()
                child.wait(timeout=30)
