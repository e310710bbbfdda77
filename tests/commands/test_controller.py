"""`gpu-admission controller` as a process of its own: it leads, loads a dataset PVC's data
through a Job, serves its probes and metrics, says a Lease it cannot take in one line (once), and
exits 0 on SIGTERM with the Lease released. `serve` runs no controller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from commands import cli, parser
from commands.serve import AdmissionServer
from gpu_admission.config.model import Config
from tests import ROOT
from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.namespaces import namespace_ready

from .test_serve import START_TIMEOUT

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

PREFIX = "gpu-admission.io/"


def environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_ADMISSION_", "KUBERNETES_SERVICE_"))
    }
    env.update(
        {
            "GPU_ADMISSION_LEADER_ELECTION__RETRY_PERIOD_SECONDS": "0.2",
            "GPU_ADMISSION_LEADER_ELECTION__RENEW_DEADLINE_SECONDS": "1",
            "GPU_ADMISSION_LEADER_ELECTION__LEASE_DURATION_SECONDS": "2",
            "GPU_ADMISSION_SERVER__HOST": "127.0.0.1",
        }
    )
    return env


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_for(check: Callable[[], Any], what: str, process: subprocess.Popen[bytes]) -> Any:
    return while_running(check, what, {"the controller": process}, START_TIMEOUT)


@pytest.fixture
def controller_process(kube_api, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    started: list[subprocess.Popen[bytes]] = []

    def launch(*extra: str, **env: str) -> tuple[subprocess.Popen[bytes], int, Path]:
        port = free_port()
        log_path = tmp_path / f"controller-{len(started)}.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commands",
                "controller",
                "--kubeconfig",
                str(kube_api.kubeconfig_path),
                "--metrics-port",
                str(port),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env={**environment(), **env},
            cwd=ROOT,
        )
        started.append(process)
        return process, port, log_path

    yield launch
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_controller_process_leads_loads_and_stops_cleanly(
    kube_client, controller_process
) -> None:
    for name in ("ml", "gpu-admission"):
        namespace_ready(kube_client, name)
    core = client.CoreV1Api(kube_client)
    process, port, log_path = controller_process()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: get(f"{base}/readyz")[0] == 200, "/readyz", process)
    # The libraries mapped into the running process: its event loop's, and no certificate code
    # (the webhook service's part, 7.5 MiB resident).
    maps = Path(f"/proc/{process.pid}/maps").read_text()
    assert "uvloop" in maps and "cryptography" not in maps
    core.create_namespaced_persistent_volume_claim(
        "ml",
        {
            "metadata": {
                "name": "imagenet",
                "annotations": {f"{PREFIX}data-source": "s3://ml-datasets/imagenet"},
                "labels": {f"{PREFIX}data-load": "true"},
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    batch = client.BatchV1Api(kube_client)
    (job,) = wait_for(lambda: batch.list_namespaced_job("ml").items, "the loader Job", process)
    assert job.metadata.name.startswith("dl-imagenet-")
    started = b"gpu_admission_dataset_loads_started_total 1.0"
    status, body = wait_for(
        lambda: (answer := get(f"{base}/metrics")) and started in answer[1] and answer,
        "the loads-started counter",
        process,
    )
    assert status == 200
    assert b"gpu_admission_leader 1.0" in body
    assert started in body
    assert get(f"{base}/healthz")[0] == 200

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    lease = client.CoordinationV1Api(kube_client).read_namespaced_lease(
        "gpu-admission-controller", "gpu-admission"
    )
    assert lease.spec.holder_identity == ""  # released: a standby takes over at once
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    assert all(line["level"] != "error" for line in lines)
    (started_line,) = [line for line in lines if line["message"] == "dataset controller started"]
    assert started_line["event_loop"] == "uvloop"


def test_a_lease_namespace_that_does_not_exist_is_said_once_and_shown_in_readyz(
    kube_client, controller_process
) -> None:
    # The shared cluster has gpu-admission: the Lease is set to live in a namespace never made.
    process, port, log_path = controller_process(
        GPU_ADMISSION_LEADER_ELECTION__NAMESPACE="never-made"
    )
    base = f"http://127.0.0.1:{port}"

    def not_ready_because_of_the_lease() -> list[str] | None:
        status, body = get(f"{base}/readyz")
        waiting = json.loads(body).get("waiting_for") or []
        # "not read yet" until its first try at the Lease has been answered.
        tried = waiting and not waiting[0].endswith("not read yet")
        return waiting if status == 503 and tried else None

    (reason,) = wait_for(not_ready_because_of_the_lease, "/readyz to say why", process)
    assert reason == (
        "lease never-made/gpu-admission-controller: namespace never-made does not exist; "
        "create it, or set leader_election.namespace to the namespace the controller runs in"
    )
    # Several more tries (every 0.2 s) fail, each counted: none may be logged again.
    retries = 5

    def failures() -> float:
        _, body = get(f"{base}/metrics")
        for line in body.decode().splitlines():
            if line.startswith("gpu_admission_leader_election_failures_total "):
                return float(line.split()[1])
        return 0.0

    seen = failures()
    wait_for(lambda: failures() >= seen + retries, f"{retries} more failed tries", process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    said = [line for line in lines if "does not exist" in line["message"]]
    assert len(said) == 1 and said[0]["level"] == "warning"
    assert all("\n" not in line["message"] for line in lines)  # no multi-line client dumps
    assert all("HTTP response headers" not in line["message"] for line in lines)


def test_serve_runs_no_controller_and_controller_needs_a_cluster(
    monkeypatch, caplog, tmp_path
) -> None:
    config = Config.model_validate({"certs": {"cert_dir": str(tmp_path)}})
    assert AdmissionServer(config, None).extra_services == []
    monkeypatch.setattr(parser, "setup_logging", lambda *args, **kwargs: None)
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["controller"]) == 2
    assert "no cluster configuration" in caplog.text
