"""Prometheus metrics: one registry per process, shared by the webhooks and the controller.

Every metric lives in a `Metrics` object's own `CollectorRegistry` (not the library's global
one), so two apps in one test process never collide and the exposition shows exactly this
service's series. Other parts add theirs with `metrics.counter(...)`, `gauge` or `histogram`;
names get the `gpu_admission_` prefix.
"""

from __future__ import annotations

import math
import platform
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from gpu_admission import __version__

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

NOT_KNOWN = math.nan  # a gauge with nothing to report yet: no alert compares true on it

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
        # Which build answers, for dashboards and for alerts during a rollout.
        Info(
            f"{METRIC_PREFIX}_build",
            "The running gpu-admission: its version and the Python that runs it.",
            registry=self.registry,
        ).info({"version": __version__, "python": platform.python_version()})

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

    def gauge_of(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A gauge read when scraped: `read` runs on the scraping thread and must not block."""
        self.gauge(name, documentation).set_function(read)

    def watch_readiness(self, readiness: Callable[[], list[str]]) -> None:
        """`gpu_admission_ready`: 1 while `readiness` names nothing missing (as /readyz answers
        200), else 0; the alert on lost readiness reads it."""
        self.gauge_of(
            "ready",
            "1 while this process is ready (/readyz answers 200: caches synced, certificates "
            "loaded, not shutting down), else 0",
            lambda: 0.0 if readiness() else 1.0,
        )

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class AnswerTally:
    """Requests answered, their latency and patch sizes, counted in plain dicts and turned into
    metric families only when scraped (a custom collector, prometheus_client's extension point).

    Every admission request records here, so it must cost next to nothing: library metrics take a
    lock per value and a label lookup per call, together several microseconds a request. Records
    come from the event loop's thread only; a scrape reads copies.
    """

    def __init__(self, buckets: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.answers: dict[tuple[str, str, str], int] = {}
        # Per webhook: a count per bucket (the last one is +Inf, beyond every bound), and the sum.
        self.latency_counts: dict[str, list[int]] = {}
        self.latency_sums: dict[str, float] = {}
        self.patch_operations: dict[str, int] = {}

    def record(
        self, webhook: str, operation: str, verdict: str, seconds: float, patch_ops: int = 0
    ) -> None:
        key = (webhook, operation, verdict)
        self.answers[key] = self.answers.get(key, 0) + 1
        counts = self.latency_counts.get(webhook)
        if counts is None:
            counts = self.latency_counts[webhook] = [0] * (len(self.buckets) + 1)
            self.latency_sums[webhook] = 0.0
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le is inclusive).
        counts[bisect_left(self.buckets, seconds)] += 1
        self.latency_sums[webhook] += seconds
        if patch_ops:
            self.patch_operations[webhook] = self.patch_operations.get(webhook, 0) + patch_ops

    def describe(self) -> Iterator[Metric]:
        yield from self._families({}, {}, {}, {})

    def collect(self) -> Iterator[Metric]:
        yield from self._families(
            dict(self.answers),
            {webhook: list(counts) for webhook, counts in list(self.latency_counts.items())},
            dict(self.latency_sums),
            dict(self.patch_operations),
        )

    def _families(
        self,
        answers: dict[tuple[str, str, str], int],
        latency_counts: dict[str, list[int]],
        latency_sums: dict[str, float],
        patch_operations: dict[str, int],
    ) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            f"{METRIC_PREFIX}_admission_requests",
            "Admission requests answered, by webhook path, operation and verdict "
            "(allowed, denied, error).",
            labels=["webhook", "operation", "verdict"],
        )
        for labels, count in answers.items():
            requests.add_metric(list(labels), count)
        yield requests
        latency = HistogramMetricFamily(
            f"{METRIC_PREFIX}_admission_duration_seconds",
            "Time from receiving an admission request to having its answer, by webhook path.",
            labels=["webhook"],
        )
        bounds = [floatToGoString(b) for b in self.buckets] + ["+Inf"]
        for webhook, counts in latency_counts.items():
            cumulative = list(accumulate(counts))
            latency.add_metric(
                [webhook],
                list(zip(bounds, cumulative, strict=True)),
                latency_sums.get(webhook, 0.0),
            )
        yield latency
        patches = CounterMetricFamily(
            f"{METRIC_PREFIX}_admission_patch_operations",
            "JSON Patch operations returned by mutating webhooks, by webhook path.",
            labels=["webhook"],
        )
        for webhook, count in patch_operations.items():
            patches.add_metric([webhook], count)
        yield patches


class AdmissionMetrics:
    """The webhook service's metrics. Answers are tallied by `AnswerTally` (every request);
    the rare events (failures, refusals) are library counters with cached label children."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.tally = AnswerTally()
        metrics.registry.register(self.tally)
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
        self.notices = metrics.counter(
            "admission_policy_notices_total",
            "Events policies noticed while admitting, by webhook path and notice: "
            "unresolved_gpu_claim is a container whose ResourceClaim, template or DeviceClass "
            "could not be resolved (it was counted as a GPU container).",
            ["webhook", "notice"],
        )
        self.decisions = metrics.counter(
            "admission_policy_decisions_total",
            "What policies did with the requests they judged, by policy, mode (enforce, warn, "
            "audit) and decision: denied and changed (enforce), warned (warn), recorded (audit "
            "and warn: admitted as is, written to the API server's audit event).",
            ["policy", "mode", "decision"],
        )
        self._children: dict[tuple[object, ...], Counter] = {}
        # The bound method itself, not a wrapper: one call less on every request.
        self.answered = self.tally.record

    def _child(self, metric: Counter, *labels: str) -> Counter:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def policy_failed(self, webhook: str, policy: str) -> None:
        self._child(self.policy_errors, webhook, policy).inc()

    def lookup_failed(self, webhook: str) -> None:
        self._child(self.lookup_failures, webhook).inc()

    def bad_request(self, webhook: str, reason: str) -> None:
        self._child(self.bad_requests, webhook, reason).inc()

    def decided(self, decisions: Iterable[tuple[str, str, str]]) -> None:
        for policy, mode, decision in decisions:
            self._child(self.decisions, policy, mode, decision).inc()

    def noticed(self, webhook: str, notices: dict[str, int]) -> None:
        for notice, count in notices.items():
            self._child(self.notices, webhook, notice).inc(count)
