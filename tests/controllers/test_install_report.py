"""Where the install's self-check speaks: one Event and one log line per change, not per check;
a gauge per object and state; a series per ServiceAccount whose credentials are not routed."""

from __future__ import annotations

import logging
import math

import pytest

from controllers.install_check.report import InstallMetrics, InstallReporter
from gpu_admission.admission.installed import (
    CredentialsFinding,
    InstallReport,
    ObjectFinding,
    ObjectState,
)
from gpu_admission.gpus.daemons import DaemonFinding
from gpu_admission.process.metrics import Metrics

MAP = ("MutatingAdmissionPolicy", "gpu-admission-gpu-visibility")


def _report(state: ObjectState, *credentials: CredentialsFinding) -> InstallReport:
    finding = ObjectFinding(*MAP, state, "CPU-only pods are not hidden.", "kubectl apply -k x")
    ok = ObjectFinding("ValidatingAdmissionPolicy", "gpu-admission-pods", ObjectState.OK)
    return InstallReport("manifests/", (finding, ok), credentials)


def _value(metrics: Metrics, metric: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(metric, labels)


@pytest.fixture
def said() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(process_metrics=False)


@pytest.fixture
def about() -> list[dict[str, str] | None]:
    return []


@pytest.fixture
def reporter(
    metrics: Metrics, said: list[tuple[str, str]], about: list[dict[str, str] | None]
) -> InstallReporter:
    async def post(reason: str, message: str, involved: dict[str, str] | None) -> None:
        said.append((reason, message))
        about.append(involved)

    return InstallReporter(InstallMetrics(metrics), post)


async def test_each_change_is_said_once(
    reporter: InstallReporter,
    said: list[tuple[str, str]],
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="controllers.install_check.report")
    gauge = "gpu_admission_admission_object_state"
    await reporter.publish(_report(ObjectState.MISSING))
    await reporter.publish(_report(ObjectState.MISSING))
    assert [r for r, _ in said] == ["AdmissionObjectMissing"]
    assert said[0][1].startswith("MutatingAdmissionPolicy gpu-admission-gpu-visibility is missing")
    assert "Fix: kubectl apply -k x" in said[0][1]
    labels = {"kind": MAP[0], "name": MAP[1]}
    assert _value(metrics, gauge, **labels, state="missing") == 1.0
    assert _value(metrics, gauge, **labels, state="ok") == 0.0
    await reporter.publish(_report(ObjectState.STALE))
    assert [r for r, _ in said] == ["AdmissionObjectMissing", "AdmissionObjectStale"]
    await reporter.publish(_report(ObjectState.OK))
    assert len(said) == 2  # back to ok: a log line, no Warning
    assert _value(metrics, gauge, **labels, state="ok") == 1.0
    assert _value(metrics, gauge, **labels, state="stale") == 0.0
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[-1] == (
        "install check: MutatingAdmissionPolicy gpu-admission-gpu-visibility is ok again"
    )


async def test_unrouted_credentials_are_a_series_and_one_event(
    reporter: InstallReporter, said: list[tuple[str, str]], metrics: Metrics
) -> None:
    gauge = "gpu_admission_credentials_not_routed"
    finding = CredentialsFinding("team", "trainer", ("s3",), "l", 0)
    await reporter.publish(_report(ObjectState.OK, finding))
    later = CredentialsFinding("team", "trainer", ("s3",), "l", 3)
    await reporter.publish(_report(ObjectState.OK, later))  # pods came: no second Event
    assert [r for r, _ in said] == ["CredentialsNotRouted"]
    assert _value(metrics, gauge, namespace="team", serviceaccount="trainer") == 3.0
    uncounted = CredentialsFinding("team", "trainer", ("s3",), "l", None)
    await reporter.publish(_report(ObjectState.OK, uncounted))
    value = _value(metrics, gauge, namespace="team", serviceaccount="trainer")
    assert value is not None and math.isnan(value)
    await reporter.publish(_report(ObjectState.OK))
    assert _value(metrics, gauge, namespace="team", serviceaccount="trainer") is None


async def test_a_term_that_ends_takes_its_series_and_the_next_says_all_again(
    reporter: InstallReporter, said: list[tuple[str, str]], metrics: Metrics
) -> None:
    await reporter.publish(_report(ObjectState.MISSING))
    reporter.forget()
    labels = {"kind": MAP[0], "name": MAP[1], "state": "missing"}
    assert _value(metrics, "gpu_admission_admission_object_state", **labels) is None
    await reporter.publish(_report(ObjectState.MISSING))
    assert len(said) == 2


async def test_a_blinded_gpu_daemon_is_told_on_itself_once_and_cleared(
    reporter: InstallReporter,
    said: list[tuple[str, str]],
    about: list[dict[str, str] | None],
    metrics: Metrics,
) -> None:
    daemon = DaemonFinding(
        "DaemonSet",
        "monitoring",
        "dcgm-exporter",
        "uid-1",
        ("exporter",),
        "sets NVIDIA_VISIBLE_DEVICES=all",
        "gpu-admission.io/exempt",
    )
    blinded = InstallReport("manifests/", (), (), (daemon,))
    labels = {"namespace": "monitoring", "kind": "DaemonSet", "name": "dcgm-exporter"}
    await reporter.publish(blinded)
    await reporter.publish(blinded)
    assert [r for r, _ in said] == ["GPUDaemonBlinded"]  # once
    assert about == [daemon.involved]  # on the DaemonSet itself, by uid
    assert "kubectl label namespace monitoring gpu-admission.io/exempt=true" in said[0][1]
    assert _value(metrics, "gpu_admission_blinded_gpu_daemon", **labels) == 1.0
    await reporter.publish(InstallReport("manifests/", ()))
    assert _value(metrics, "gpu_admission_blinded_gpu_daemon", **labels) is None
