"""`gpu-admission usage --idle`: idle stretches read from the idle rule's history, since when a
workload has been idle (the rule's hour before it was named included), the GPU-hours held idle,
and the rule and the report agreeing on that hour."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from commands.parser import main as cli
from gpu_usage.idle_report import (
    IDLE_SERIES,
    IDLE_WINDOW_SECONDS,
    idle_namespaces,
    idle_workloads,
    range_step,
    render_idle_namespaces,
    render_idle_workloads,
    stretches,
)
from tests.manifests.monitoring_queries import rules

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
STEP = 60


def minutes(first: int, last: int, gpus: float) -> list[tuple[float, float]]:
    """A point a minute from `first` to `last` minutes before NOW."""
    return [(NOW - m * 60, gpus) for m in range(first, last - 1, -1)]


def labels(workload: str, kind: str = "Deployment", namespace: str = "team-a") -> dict:
    return {"namespace": namespace, "workload_kind": kind, "workload": workload}


def test_a_gap_of_more_than_a_step_ends_a_stretch() -> None:
    runs = stretches(minutes(100, 91, 1) + minutes(30, 0, 1), STEP)
    assert [(NOW - r.first, NOW - r.last) for r in runs] == [(6000, 5460), (1800, 0)]
    # Named idle 30 minutes ago: idle since the hour before; held 1 GPU for 1.5 hours.
    assert runs[1].since == NOW - 1800 - IDLE_WINDOW_SECONDS
    assert runs[1].gpu_hours == pytest.approx(1.5)


def test_only_workloads_idle_now_are_listed_with_since_when() -> None:
    matrix = [
        (labels("notebook", "StatefulSet"), minutes(90, 0, 1)),
        (labels("finished"), minutes(200, 100, 2)),  # idle once, busy again since
        (labels("holder", "Pod", "team-b"), minutes(0, 0, 0.25)),  # named idle just now
    ]
    rows = idle_workloads(matrix, NOW, STEP)
    assert [(r.namespace, r.workload, r.gpus) for r in rows] == [
        ("team-a", "notebook", 1),
        ("team-b", "holder", 0.25),
    ]
    assert rows[0].idle_since == "2027-01-15T05:30:00+00:00"  # 90 minutes and the hour before
    assert rows[0].gpu_hours_idle == pytest.approx(2.5)
    assert rows[1].gpu_hours_idle == pytest.approx(0.25)


def test_per_namespace_every_stretch_of_the_period_is_summed() -> None:
    matrix = [
        (labels("notebook", "StatefulSet"), minutes(90, 0, 1)),
        (labels("finished"), minutes(200, 140, 2)),  # an hour and the hour before, at 2 GPUs
    ]
    [row] = idle_namespaces(matrix, NOW, STEP)
    assert (row.namespace, row.workloads_idle_now) == ("team-a", 1)
    assert row.gpu_hours_idle == pytest.approx(2.5 + 4)


def test_the_step_stays_under_prometheus_points_limit() -> None:
    assert range_step(3600) == 60  # the rule's own resolution
    assert range_step(7 * 86400) == 120
    assert range_step(365 * 86400) == 3180
    assert 365 * 86400 / range_step(365 * 86400) <= 11_000


def test_the_outputs() -> None:
    rows = idle_workloads([(labels("notebook", "StatefulSet"), minutes(90, 0, 0.25))], NOW, STEP)
    table = render_idle_workloads(rows, "table").splitlines()
    header = ["NAMESPACE", "WORKLOAD", "GPUS", "IDLE", "SINCE", "GPU-HOURS", "IDLE"]
    assert table[0].split() == header
    since = "2027-01-15T05:30:00+00:00"
    assert table[1].split() == ["team-a", "StatefulSet/notebook", "0.25", since, "0.62"]
    [row] = csv.DictReader(io.StringIO(render_idle_workloads(rows, "csv")))
    assert row == {
        "namespace": "team-a",
        "workload_kind": "StatefulSet",
        "workload": "notebook",
        "gpus": "0.25",
        "idle_since": "2027-01-15T05:30:00+00:00",
        "gpu_hours_idle": "0.6250",
    }
    assert json.loads(render_idle_workloads(rows, "json"))[0]["gpus"] == 0.25
    namespaces = idle_namespaces([(labels("notebook"), minutes(90, 0, 1))], NOW, STEP)
    assert render_idle_namespaces(namespaces, "csv").splitlines() == [
        "namespace,workloads_idle_now,gpu_hours_idle",
        "team-a,1,2.5000",
    ]


def test_the_rule_and_the_report_agree_on_the_window() -> None:
    by_name = {rule.get("record"): rule["expr"] for rule in rules()}
    assert IDLE_SERIES in by_name
    windows = set(re.findall(r"\[(\d+)h\]", by_name["gpu_admission:container_gpus_idle:1h"]))
    assert windows == {str(IDLE_WINDOW_SECONDS // 3600)}


def test_an_unreachable_prometheus_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["usage", "--prometheus", "http://127.0.0.1:9", "--idle"]) == 1
    assert capsys.readouterr().err.startswith("error: cannot query Prometheus at")
