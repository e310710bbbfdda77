"""The pod-create benchmark's server-side figures: the API server's per-webhook and per-plugin
durations and the servers' counters, as differences between two snapshots."""

from __future__ import annotations

from bench.server_side import (
    apiserver_snapshot,
    connections_snapshot,
    figures,
    merged,
    project_snapshot,
)

HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"
PLUGIN = "apiserver_admission_controller_admission_duration_seconds"
SERVICE = "gpu_admission_admission_duration_seconds"


def _apiserver(calls: int, seconds: float) -> str:
    labels = 'name="pods.mutate.gpu-admission.io",operation="CREATE",rejected="false",type="admit"'
    update = 'name="pods.mutate.gpu-admission.io",operation="UPDATE",rejected="false",type="admit"'
    plugin = 'name="MutatingAdmissionPolicy",operation="CREATE",rejected="false",type="admit"'
    return "\n".join(
        [
            f"# TYPE {HISTOGRAM} histogram",
            f'{HISTOGRAM}_bucket{{{labels},le="+Inf"}} {calls}',
            f"{HISTOGRAM}_sum{{{labels}}} {seconds}",
            f"{HISTOGRAM}_count{{{labels}}} {calls}",
            f'{HISTOGRAM}_bucket{{{update},le="+Inf"}} 7',
            f"{HISTOGRAM}_sum{{{update}}} 9.0",
            f"{HISTOGRAM}_count{{{update}}} 7",
            f"# TYPE {PLUGIN} histogram",
            f'{PLUGIN}_bucket{{{plugin},le="+Inf"}} {calls * 2}',
            f"{PLUGIN}_sum{{{plugin}}} {seconds / 4}",
            f"{PLUGIN}_count{{{plugin}}} {calls * 2}",
            "",
        ]
    )


def _lag(count: int, on_time: int, seconds: float) -> str:
    name = "gpu_admission_event_loop_lag_seconds"
    return "\n".join(
        [
            f"# TYPE {name} histogram",
            f'{name}_bucket{{le="0.0005"}} {on_time - 1}',
            f'{name}_bucket{{le="0.001"}} {on_time}',
            f'{name}_bucket{{le="+Inf"}} {count}',
            f"{name}_sum {seconds}",
            f"{name}_count {count}",
            f"# TYPE {SERVICE} histogram",
            f'{SERVICE}_bucket{{webhook="/mutate/pods",le="+Inf"}} {count}',
            f'{SERVICE}_sum{{webhook="/mutate/pods"}} {seconds * 2}',
            f'{SERVICE}_count{{webhook="/mutate/pods"}} {count}',
            "",
        ]
    )


def test_the_figures_are_what_happened_between_the_snapshots() -> None:
    before = merged(
        apiserver_snapshot(_apiserver(100, 0.3)),
        project_snapshot(_lag(50, 48, 0.02)),
        connections_snapshot({"accepted": 2, "requests": {"HTTP/1.1": 100}}, "project"),
    )
    after = merged(
        apiserver_snapshot(_apiserver(300, 0.7)),
        project_snapshot(_lag(150, 140, 0.05)),
        connections_snapshot({"accepted": 5, "requests": {"HTTP/1.1": 300}}, "project"),
    )
    got = figures(before, after, creates=200)
    # 200 calls took 0.4 s: 2 ms each, one per create; UPDATE reviews are not counted.
    assert abs(got["webhook pods.mutate.gpu-admission.io ms"] - 2.0) < 1e-9
    assert got["webhook pods.mutate.gpu-admission.io calls/create"] == 1.0
    assert abs(got["plugin MutatingAdmissionPolicy ms"] - 0.25) < 1e-9
    assert got["plugin MutatingAdmissionPolicy calls/create"] == 2.0
    assert abs(got["lag ms"] - 0.3) < 1e-9  # 30 ms over 100 ticks
    assert got["late"] == 8.0  # 100 ticks, 92 of them within 1 ms
    assert abs(got["service /mutate/pods ms"] - 0.6) < 1e-9
    assert got["project connections"] == 3.0
    assert got["project HTTP/1.1"] == 200.0
