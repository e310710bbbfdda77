"""The image as users' scanners and clusters see it: a numeric non-root user whose group agrees,
OCI labels, the package's version, nothing of the build left in; and `serve` and `controller`
started as the base's Deployments start them (their args, env, volumes, securityContext and
read-only root, from the rendered manifests), where `serve` answers real AdmissionReviews over
TLS and `controller` says why it is not ready when no API server answers."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest

from certs.issue import issue_ca
from gpu_admission import __version__
from tests import REVIEW_FIXTURES, ROOT
from tests.image.pods import container_run, deployment_pod
from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.containers.engine import ContainerRun, Engine, ImageConfig

WAIT = 60.0  # a cold container imports the kubernetes client on a shared CPU
SERVICE_DNS = "gpu-admission.gpu-admission.svc"


def run_to_end(runner: Engine, run: ContainerRun) -> tuple[int, str]:
    with tempfile.TemporaryFile() as output:
        code = runner.start(run, output).wait(timeout=120)
        output.seek(0)
        return code, output.read().decode(errors="replace")


def test_the_user_is_numeric_and_its_group_agrees(image: str, runner: Engine) -> None:
    assert ImageConfig.inspect(image).user == "65532:65532"  # runAsNonRoot can verify it
    # A pod that sets runAsUser but no runAsGroup gets the user's group from the image's
    # /etc/passwd: it must be 65532 too, not what `useradd --system` would pick.
    code, said = run_to_end(runner, ContainerRun(image, command=["id"], user=65532))
    assert code == 0, said
    assert said.split()[:2] == ["uid=65532(gpu-admission)", "gid=65532(gpu-admission)"]


def test_labels_and_version_say_what_was_built(image: str, runner: Engine) -> None:
    labels = ImageConfig.inspect(image).labels
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    assert labels["org.opencontainers.image.revision"] in (head, "unknown")
    code, said = run_to_end(runner, ContainerRun(image, args=["--version"], read_only_root=True))
    assert (code, said.strip()) == (0, f"gpu-admission {__version__}")


def test_nothing_of_the_build_is_left(image: str, runner: Engine) -> None:
    probe = (
        "import importlib.util as u, sys; "
        "print([m for m in ('pip', 'setuptools', 'wheel', 'kubernetes.aio') if u.find_spec(m)])"
    )
    code, said = run_to_end(
        runner, ContainerRun(image, command=["python", "-c", probe], read_only_root=True)
    )
    assert (code, said.strip()) == (0, "[]")


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return ""


def wait_for(
    check: Callable[[], Any], what: str, process: subprocess.Popen[bytes], log: Path
) -> Any:
    return while_running(check, what, {"the container": process}, WAIT, log)


@pytest.fixture
def started(runner: Engine, tmp_path: Path) -> Iterator[Callable[[ContainerRun], tuple[Any, Path]]]:
    runs: list[tuple[ContainerRun, subprocess.Popen[bytes]]] = []

    def start(run: ContainerRun) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{run.name}.log"
        with log.open("wb") as output:
            process = runner.start(run, output)
        runs.append((run, process))
        return process, log

    yield start
    for run, process in runs:
        runner.kill(run)
        process.wait(timeout=30)


async def test_serve_as_the_deployment_runs_it_answers_captured_reviews_over_tls(
    image: str, started: Any, tmp_path: Path
) -> None:
    https, metrics = free_port(), free_port()
    pod = deployment_pod("gpu-admission")
    # Host network here: the two ports move to free ones; everything else is the manifests'.
    ports = {
        "GPU_ADMISSION_SERVER__PORT": str(https),
        "GPU_ADMISSION_SERVER__METRICS_PORT": str(metrics),
    }
    run = container_run(image, pod, tmp_path / "pod", env=ports)
    assert run.read_only_root and run.user == 65532 and 65532 in run.supplemental_groups
    process, log = started(run)
    wait_for(lambda: "gpu_admission_ready 1.0" in scrape(metrics), "readiness", process, log)
    # With no cluster access the certificate is issued into the certs emptyDir, CA beside it.
    certs = next(m.source for m in run.mounts if m.target == "/var/run/gpu-admission/certs")
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    sent = json.loads((REVIEW_FIXTURES / "pod-cpu-cuda-image.mutating.json").read_text())
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{https}/mutate/pods",
            json=sent,
            ssl=context,
            server_hostname=SERVICE_DNS,
        ) as answer,
    ):
        assert answer.status == 200
        review = await answer.json()
    response = review["response"]
    assert response["uid"] == sent["request"]["uid"] and response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(sent["request"]["object"], patch)
    env = patched["spec"]["containers"][0]["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env
    assert "Traceback" not in log.read_text()


async def test_the_controller_says_why_it_is_not_ready_when_no_api_server_answers(
    image: str, started: Any, tmp_path: Path
) -> None:
    metrics, nothing_listens = free_port(), free_port()
    account = tmp_path / "serviceaccount"  # what kube-api-access would hold
    account.mkdir()
    (account / "token").write_text("not-a-real-token")
    (account / "namespace").write_text("gpu-admission")
    (account / "ca.crt").write_bytes(issue_ca()[0])  # a CA no server here uses
    for path in [account, *account.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    env = {
        "GPU_ADMISSION_SERVER__METRICS_PORT": str(metrics),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(nothing_listens),
    }
    run = container_run(
        image,
        deployment_pod("gpu-admission-controller"),
        tmp_path / "pod",
        env=env,
        service_account=account,
    )
    process, log = started(run)

    def readyz() -> tuple[int, dict[str, Any]] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=2) as got:
                return got.status, json.load(got)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)
        except OSError:
            return None

    def refused() -> tuple[int, dict[str, Any]] | None:
        answer = readyz()  # "not read yet" until its first try at the Lease has failed
        return answer if answer and "connection refused" in json.dumps(answer[1]) else None

    status, body = wait_for(refused, "/readyz to say why", process, log)
    assert status == 503, body
    [reason] = body["waiting_for"]
    assert reason.startswith("lease gpu-admission/gpu-admission-controller: cannot be read or")
    assert "(connection refused)" in reason
    await asyncio.sleep(0)  # the process keeps running: it retries, it does not crash
    assert process.poll() is None
