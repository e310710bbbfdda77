"""The admission answer tally exposes exactly what prometheus_client's own Counter and Histogram
would for the same requests: same names, labels, buckets (a bound is inclusive), sums."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gpu_admission import __version__
from gpu_admission.process.metrics import LATENCY_BUCKETS, METRIC_PREFIX, AdmissionMetrics, Metrics

ANSWERS = [
    ("/mutate/pods", "CREATE", "allowed", 0.0001, 3),  # exactly on a bound
    ("/mutate/pods", "CREATE", "allowed", 0.00012, 0),
    ("/mutate/pods", "CREATE", "denied", 0.004, 0),
    ("/validate/secrets", "UPDATE", "allowed", 7.5, 0),  # beyond the last bound: +Inf only
    ("/validate/secrets", "UNKNOWN", "error", 0.0, 0),
    ("/mutate/pods", "CREATE", "allowed", 5.0, 1),
]


def _library_exposition() -> list[str]:
    registry = CollectorRegistry()
    requests = Counter(
        f"{METRIC_PREFIX}_admission_requests_total",
        "x",
        ["webhook", "operation", "verdict"],
        registry=registry,
    )
    latency = Histogram(
        f"{METRIC_PREFIX}_admission_duration_seconds",
        "x",
        ["webhook"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    patches = Counter(
        f"{METRIC_PREFIX}_admission_patch_operations_total", "x", ["webhook"], registry=registry
    )
    for webhook, operation, verdict, seconds, patch_ops in ANSWERS:
        requests.labels(webhook, operation, verdict).inc()
        latency.labels(webhook).observe(seconds)
        if patch_ops:
            patches.labels(webhook).inc(patch_ops)
    return _series(generate_latest(registry).decode())


def _series(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line and not line.startswith("#"))


def test_the_tally_exposes_what_library_metrics_would():
    metrics = Metrics(process_metrics=False)
    admission = AdmissionMetrics(metrics)
    for answer in ANSWERS:
        admission.answered(*answer)
    ours = _series(metrics.exposition().decode())
    assert [
        line for line in ours if "_admission_admission_" in line and "bad_requests" not in line
    ] == [line for line in _library_exposition() if "_created" not in line]


def test_nothing_answered_exposes_the_families_without_series():
    metrics = Metrics(process_metrics=False)
    AdmissionMetrics(metrics)
    text = metrics.exposition().decode()
    for family in ("requests_total", "duration_seconds", "patch_operations_total"):
        assert f"# TYPE {METRIC_PREFIX}_admission_{family.removesuffix('_total')}" in text
    assert not [line for line in _series(text) if "admission_requests_total{" in line]


def test_build_info_and_readiness_are_exposed() -> None:
    metrics = Metrics(process_metrics=False)
    waiting = ["informer nodes"]
    metrics.watch_readiness(lambda: waiting)
    assert "gpu_admission_ready 0.0" in metrics.exposition().decode()
    waiting.clear()
    text = metrics.exposition().decode()
    assert "gpu_admission_ready 1.0" in text
    assert f'version="{__version__}"' in text and "gpu_admission_build_info{" in text
