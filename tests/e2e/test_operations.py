"""What operators see of a running install: every series the monitoring overlay's rules and
dashboard read is exposed by the real processes (`serve` and `controller`, started as the
Deployments start them, against the session's real kube-apiserver), and an API server outage
(kube-apiserver stopped, then started again on its port) is said in a few lines, not in one
warning per retry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import ROOT
from tests.manifests.monitoring_queries import named_series
from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.harness import register_webhooks, seed_namespaces
from tests.world.sweep import record, sweep

START_TIMEOUT = 60.0  # cold interpreters import the kubernetes client on a shared CPU
OUTAGE_SECONDS = 6.0  # how long the API server is away: the scenario, not a wait for a result


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    metrics_url: str
    log_path: Path

    def lines(self, start: int = 0) -> list[dict[str, Any]]:
        text = self.log_path.read_bytes()[start:].decode(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            return response.read().decode()


@dataclass
class Install:
    plane: ControlPlane
    serve: Process
    controller: Process
    api: client.ApiClient


def wait_until(check: Callable[[], bool], what: str, processes: list[Process]) -> None:
    while_running(check, what, {p.name: p.popen for p in processes}, START_TIMEOUT)


def scraped(process: Process, sample: str) -> bool:
    try:
        return sample in process.metrics()
    except OSError:
        return False


def seed(api: client.ApiClient, serve_port: int) -> None:
    """What `kubectl apply -k manifests/` leaves for the processes to find: their namespace and
    the webhook configurations whose caBundle `serve` keeps current (calling it by URL: nothing
    routes the Service here)."""
    seed_namespaces(api, "gpu-admission.io/exempt")
    register_webhooks(api, None, f"127.0.0.1:{serve_port}")


def launch(command: str, kubeconfig: Path, workdir: Path, *extra: str) -> Process:
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_ADMISSION_")}
    env["GPU_ADMISSION_SERVER__HOST"] = "127.0.0.1"
    # The webhooks here are registered by URL (nothing routes the Service): the controller only
    # reports them, rather than writing the Service-bound ones the configuration implies.
    env["GPU_ADMISSION_INSTALL__WRITE_ADMISSION_OBJECTS"] = "false"
    log_path = workdir / f"{command}.log"
    with log_path.open("wb") as log_file:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commands",
                command,
                "--kubeconfig",
                str(kubeconfig),
                "--metrics-port",
                str(metrics_port),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env=env,
            cwd=ROOT,
        )
    return Process(command, popen, f"http://127.0.0.1:{metrics_port}/metrics", log_path)


@pytest.fixture(scope="module")
def install(
    tmp_path_factory: pytest.TempPathFactory, real_cluster: ControlPlane, api: client.ApiClient
) -> Iterator[Install]:
    workdir = tmp_path_factory.mktemp("install")
    before = record(api)
    processes: list[Process] = []
    try:
        serve_port = free_port()
        seed(api, serve_port)
        certs = workdir / "certs"  # as the base's emptyDir: serve issues its own CA there
        serve_flags = ("--port", str(serve_port), "--cert-dir", str(certs))
        kubeconfig = real_cluster.kubeconfig  # straight to the server: an outage is real
        processes.append(launch("serve", kubeconfig, workdir, *serve_flags))
        processes.append(launch("controller", kubeconfig, workdir))
        serve, controller = processes
        wait_until(lambda: scraped(serve, "gpu_admission_ready 1.0"), "serve ready", processes)
        wait_until(
            lambda: (
                scraped(controller, "gpu_admission_leader 1.0")
                and scraped(controller, "gpu_admission_ready 1.0")
            ),
            "the controller leading and ready",
            processes,
        )
        yield Install(real_cluster, serve, controller, api)
    finally:
        for process in processes:
            process.popen.terminate()
        for process in processes:
            try:
                process.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.popen.kill()
        if real_cluster.apiserver is None:
            real_cluster.start_apiserver()
        sweep(api, before)


def exposed_series(exposition: str) -> set[str]:
    """Series names in a text exposition, families without samples yet included (a labelled
    counter before its first increment shows only its HELP and TYPE lines)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
            if kind == "counter":
                names.add(name.removesuffix("_total") + "_total")
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def test_every_series_the_rules_and_dashboard_read_is_exposed(install: Install) -> None:
    exposed = exposed_series(install.serve.metrics()) | exposed_series(install.controller.metrics())
    missing = {name: sorted(where) for name, where in named_series().items() if name not in exposed}
    assert not missing, f"named by the monitoring overlay but exposed by neither process: {missing}"
    # Both processes say which build runs; the service says when its certificate expires.
    for process in (install.serve, install.controller):
        assert 'gpu_admission_build_info{python="' in process.metrics()
    assert (
        "gpu_admission_serving_certificate_expiry_timestamp_seconds 1." in install.serve.metrics()
    )


def said(process: Process, start: int) -> list[str]:
    """What an operator sees at the default level: INFO and above."""
    return [
        f"{line['level']}: {line['message']}"
        for line in process.lines(start)
        if line["level"] in ("info", "warning", "error")
    ]


def test_an_api_server_outage_is_said_once_when_it_begins_and_once_when_it_ends(
    install: Install,
) -> None:
    processes = [install.serve, install.controller]
    # What the install's self-check found at start (the webhooks called by URL here) has been
    # told on the Deployment before the outage begins: its Events are not the outage's lines.
    core = client.CoreV1Api(install.api)
    wait_until(
        lambda: bool(
            core.list_namespaced_event(
                "gpu-admission", field_selector="reason=AdmissionObjectStale"
            ).items
        ),
        "the self-check's first findings told",
        processes,
    )
    start = {p.name: p.log_size() for p in processes}
    install.plane.stop_apiserver()
    try:
        wait_until(
            lambda: all(
                any("cannot be reached" in m for m in said(p, start[p.name])) for p in processes
            ),
            "both processes to notice the outage",
            processes,
        )
        time.sleep(OUTAGE_SECONDS)  # the outage itself: retries pile up meanwhile
    finally:
        install.plane.start_apiserver()
    back = "the Kubernetes API server reachable again after"
    wait_until(
        lambda: (
            all(any(back in m for m in said(p, start[p.name])) for p in processes)
            and any(
                "lease" in m and "reachable again" in m
                for m in said(install.controller, start["controller"])
            )
        ),
        "both processes to say the API server is back",
        processes,
    )
    serve, controller = (said(p, start[p.name]) for p in processes)
    print("serve:", *serve, "controller:", *controller, sep="\n  ")
    for lines in (serve, controller):
        assert not any("Retrying" in line for line in lines)
        # A restarted server's watch cache no longer holds the versions the watches resume
        # from: every informer relists, which is routine and not said at INFO.
        assert not any("relisting" in line for line in lines)
        assert all(len(line) < 200 for line in lines), lines  # no client error dumps
        assert sum("cannot be reached" in line for line in lines) == 1
        assert sum(back in line for line in lines) == 1
    assert len(serve) <= 2, serve
    assert len(controller) <= 4, controller
