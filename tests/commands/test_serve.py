"""`gpu-admission serve` as a process: offline start with self-issued certificates, a review over
HTTPS, and SIGTERM -> graceful exit 0. Plus the command line's usage and configuration errors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import cli, parser
from tests import ROOT
from tests.support.ports import free_port
from tests.webhooks.server_helpers import fixture_bytes

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

START_TIMEOUT = 60.0  # a cold interpreter imports the kubernetes client on a shared CPU


def offline_environment() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_ADMISSION_", "KUBERNETES_SERVICE_"))
    }
    env["GPU_ADMISSION_CERTS__EXTRA_IPS"] = '["127.0.0.1"]'
    return env


@contextlib.contextmanager
def reaped(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """The process, killed on the way out if the test left it running."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def wait_ready(url: str, context: ssl.SSLContext, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert process.poll() is None, "serve exited during start-up"
        try:
            with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, ssl.SSLError):
            pass
        time.sleep(0.1)  # polling a condition, bounded by the deadline
    raise AssertionError("serve did not become ready")


def test_serve_offline_answers_reviews_and_exits_0_on_sigterm(tmp_path):
    cert_dir = tmp_path / "certs"
    port, metrics_port = free_port(), free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commands",
                "serve",
                "--cert-dir",
                str(cert_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--metrics-port",
                str(metrics_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env=offline_environment(),
            cwd=ROOT,
        )
        with reaped(process):
            url = f"https://127.0.0.1:{port}"
            wait_ready(url, _context(cert_dir, process), process)
            request = urllib.request.Request(
                f"{url}/validate/pods",
                data=fixture_bytes("pod-gpu.validating.json"),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(
                request, context=_context(cert_dir, process), timeout=10
            ) as response:
                answer = json.load(response)
            assert answer["kind"] == "AdmissionReview"
            assert "allowed" in answer["response"]
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    messages = [line["message"] for line in lines]
    assert any("no kubeconfig and no in-cluster configuration" in m for m in messages)
    assert "received SIGTERM: shutting down" in messages
    assert messages[-1] == "shutdown complete"
    assert all(line["level"] != "error" for line in lines)


def _context(cert_dir: Path, process: subprocess.Popen[bytes]) -> ssl.SSLContext:
    # The CA appears once serve has issued it; until then nothing can verify the server.
    deadline = time.monotonic() + START_TIMEOUT
    while not (cert_dir / "ca.crt").exists():
        assert process.poll() is None, "serve exited during start-up"
        assert time.monotonic() < deadline, "serve did not issue certificates"
        time.sleep(0.1)
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


# -- usage and configuration errors (in-process) ------------------------------------------------


@pytest.fixture
def no_logging_setup(monkeypatch):
    # serve configures the root logger for the process; keep pytest's capture in place.
    monkeypatch.setattr(parser, "setup_logging", lambda *args, **kwargs: None)
    for key in list(os.environ):
        if key.startswith(("GPU_ADMISSION_", "KUBERNETES_SERVICE_")):
            monkeypatch.delenv(key)


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "required: COMMAND" in capsys.readouterr().err


def test_bad_port_flag_is_a_usage_error(capsys):
    assert cli.main(["serve", "--port", "https"]) == 2
    assert "--port: 'https' is not a port number" in capsys.readouterr().err


def test_config_error_names_the_field_and_exits_2(tmp_path, capsys, no_logging_setup):
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  shutdown_grace_seconds: -1\n")
    assert cli.main(["serve", "--config", str(config), "--cert-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "server.shutdown_grace_seconds" in err
    assert str(config) in err


def test_flags_override_the_config_file(tmp_path, capsys, no_logging_setup):
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  port: 70000\n")
    # The file's bad port is overridden by the flag, so the next problem is reported instead.
    assert cli.main(["serve", "--config", str(config), "--port", "8443"]) == 2
    assert "server.port" not in capsys.readouterr().err


def test_missing_cert_dir_offline_says_what_to_pass(capsys, caplog, no_logging_setup):
    assert cli.main(["serve", "--port", str(free_port())]) == 2
    assert "pass --cert-dir DIR" in caplog.text


def test_unusable_kubeconfig_exits_2(tmp_path, caplog, no_logging_setup):
    missing = tmp_path / "nowhere.kubeconfig"
    assert cli.main(["serve", "--kubeconfig", str(missing), "--cert-dir", str(tmp_path)]) == 2
    assert f"kubeconfig {missing} does not exist" in caplog.text


def test_certs_issue_is_a_sub_command(tmp_path, capsys):
    out = tmp_path / "issued"
    argv = ["certs", "issue", "--out", str(out), "--service", "gpu-admission"]
    assert cli.main([*argv, "--namespace", "ops", "--ip", "127.0.0.1"]) == 0
    assert (out / "tls.crt").exists() and (out / "ca.crt").exists()


def test_sigterm_while_waiting_for_the_api_server_stops_at_once(tmp_path):
    # A pod whose node starts before the API server answers: the service waits, saying so once,
    # and a SIGTERM meanwhile (a rollout, a delete) ends it cleanly instead of at SIGKILL.
    kubeconfig = tmp_path / "kubeconfig"
    dead = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": dead}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    config = tmp_path / "config.yaml"
    config.write_text("certs:\n  secret_name: gpu-admission-tls\n  namespace: gpu-admission\n")
    log_path = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "commands", "serve", "--config", str(config)]
    argv += ["--kubeconfig", str(kubeconfig), "--port", str(free_port()), "--metrics-port", "0"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=log_file, env=offline_environment(), cwd=ROOT
        )
        with reaped(process):
            deadline = time.monotonic() + START_TIMEOUT
            while "cannot be reached" not in log_path.read_text():
                assert process.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "no word about the API server"
                time.sleep(0.1)  # polling a condition, bounded by the deadline
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    messages = [json.loads(line)["message"] for line in log_path.read_text().splitlines() if line]
    assert any("connection refused" in m and "gpu-admission-tls" in m for m in messages)
    assert messages[-1] == "received SIGTERM while starting: stopped"
    assert "Traceback" not in log_path.read_text()
