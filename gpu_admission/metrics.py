"""Prometheus metrics: one registry per process, shared by the webhooks and the controller.

Every metric lives in a `Metrics` object's own `CollectorRegistry` (not the library's global
one), so two apps in one test process never collide and the exposition shows exactly this
service's series. Other parts add theirs with `metrics.counter(...)`, `gauge` or `histogram`;
names get the `gpu_admission_` prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

_Metric = TypeVar("_Metric", Counter, Histogram)

METRIC_PREFIX = "gpu_admission"
EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST
# From a fraction of a millisecond (a cached-view policy run) to the API server's 5 s default
# webhook timeout; anything slower has already failed on the API server's side.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)

VERDICT_ALLOWED = "allowed"
VERDICT_DENIED = "denied"
VERDICT_ERROR = "error"  # no policy decision: a bad request or a policy that failed
UNKNOWN_OPERATION = "UNKNOWN"  # the body could not be parsed far enough to know it

# `*_created` series double the exposition and no dashboard of this service reads them.
disable_created_metrics()


class Metrics:
    """A registry and factories for metrics in it."""

    def __init__(self, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(
            f"{METRIC_PREFIX}_{name}", documentation, list(labels), registry=self.registry
        )

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(f"{METRIC_PREFIX}_{name}", documentation, list(labels), registry=self.registry)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> Histogram:
        return Histogram(
            f"{METRIC_PREFIX}_{name}",
            documentation,
            list(labels),
            buckets=buckets,
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class AdmissionMetrics:
    """The webhook service's metrics. Label children are cached: `.labels()` costs a lock and a
    dict lookup per call, and a request touches up to three of them."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.requests = metrics.counter(
            "admission_requests_total",
            "Admission requests answered, by webhook path, operation and verdict "
            "(allowed, denied, error).",
            ["webhook", "operation", "verdict"],
        )
        self.latency = metrics.histogram(
            "admission_duration_seconds",
            "Time from receiving an admission request to having its answer, by webhook path.",
            ["webhook"],
        )
        self.patch_operations = metrics.counter(
            "admission_patch_operations_total",
            "JSON Patch operations returned by mutating webhooks, by webhook path.",
            ["webhook"],
        )
        self.policy_errors = metrics.counter(
            "admission_policy_errors_total",
            "Policies that raised an unexpected error, by webhook path and policy.",
            ["webhook", "policy"],
        )
        self.bad_requests = metrics.counter(
            "admission_bad_requests_total",
            "Requests refused before review (wrong method, content type, size or body), "
            "by webhook path and reason.",
            ["webhook", "reason"],
        )
        self.lookup_failures = metrics.counter(
            "admission_lookup_failures_total",
            "Requests whose referenced objects were neither cached nor fetchable, by webhook path.",
            ["webhook"],
        )
        self._children: dict[tuple[object, ...], Counter | Histogram] = {}

    def _child(self, metric: _Metric, *labels: str) -> _Metric:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return cast(_Metric, child)  # the key holds the metric: same type

    def answered(
        self, webhook: str, operation: str, verdict: str, seconds: float, patch_ops: int = 0
    ) -> None:
        self._child(self.requests, webhook, operation, verdict).inc()
        self._child(self.latency, webhook).observe(seconds)
        if patch_ops:
            self._child(self.patch_operations, webhook).inc(patch_ops)

    def policy_failed(self, webhook: str, policy: str) -> None:
        self._child(self.policy_errors, webhook, policy).inc()

    def lookup_failed(self, webhook: str) -> None:
        self._child(self.lookup_failures, webhook).inc()

    def bad_request(self, webhook: str, reason: str) -> None:
        self._child(self.bad_requests, webhook, reason).inc()
