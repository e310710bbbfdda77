"""What the pod-create benchmark reads beside the client's times: kube-apiserver's own figures
(each webhook's `apiserver_admission_webhook_admission_duration_seconds`, each admission plugin's
`apiserver_admission_controller_admission_duration_seconds`: MutatingAdmissionPolicy,
ValidatingAdmissionPolicy, MutatingAdmissionWebhook, ValidatingAdmissionWebhook), the TLS
connections each webhook server accepted and the HTTP versions it was spoken to in, and the
project's event-loop lag. Snapshots are taken before and after each timed block; the figures are
their differences, so nothing else of the run counts.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
PLUGIN_METRIC = "apiserver_admission_controller_admission_duration_seconds"
LAG_METRIC = "gpu_admission_event_loop_lag_seconds"
SERVICE_METRIC = "gpu_admission_admission_duration_seconds"
LATE_SECONDS = 0.001  # a tick later than this counts as late


@dataclass
class Snapshot:
    """Sums and counts of durations (seconds) by what took them, and plain counters."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)


def apiserver_snapshot(text: str) -> Snapshot:
    """kube-apiserver's /metrics: `webhook <name>` and `plugin <name>`, CREATE only."""
    snap = Snapshot()
    for family in text_string_to_metric_families(text):
        if family.name not in (WEBHOOK_METRIC, PLUGIN_METRIC):
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("operation") != "CREATE":
                continue
            what = "webhook" if family.name == WEBHOOK_METRIC else "plugin"
            key = f"{what} {labels.get('name', '')}"
            if sample.name.endswith("_sum"):
                snap.sums[key] = snap.sums.get(key, 0.0) + sample.value
            elif sample.name.endswith("_count"):
                snap.counts[key] = snap.counts.get(key, 0.0) + sample.value
    return snap


def project_snapshot(text: str) -> Snapshot:
    """The project's /metrics: its event-loop lag, as `lag` (sum, count) and `late` ticks, and
    its own time per review, as `service <path>` (from reading the body to the answer written)."""
    snap = Snapshot()
    for family in text_string_to_metric_families(text):
        if family.name == SERVICE_METRIC:
            for sample in family.samples:
                key = f"service {sample.labels.get('webhook', '')}"
                if sample.name.endswith("_sum"):
                    snap.sums[key] = sample.value
                elif sample.name.endswith("_count"):
                    snap.counts[key] = sample.value
            continue
        if family.name != LAG_METRIC:
            continue
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                snap.sums["lag"] = sample.value
            elif sample.name.endswith("_count"):
                snap.counts["lag"] = sample.value
            elif sample.name.endswith("_bucket") and float(sample.labels["le"]) == LATE_SECONDS:
                snap.counters["on time"] = sample.value
    snap.counters["late"] = snap.counts.get("lag", 0.0) - snap.counters.get("on time", 0.0)
    return snap


def connections_snapshot(answer: Mapping[str, object], label: str, own: int = 0) -> Snapshot:
    """A server's /connections: `<label> connections` and `<label> HTTP/x.y` requests. `own`:
    the connections the reading itself opened, counted by the server (the Go peer answers on
    its TLS port: each snapshot is a connection of its own)."""
    snap = Snapshot()
    accepted = float(answer.get("accepted", 0))  # type: ignore[arg-type]
    snap.counters[f"{label} connections"] = accepted - own
    for version, count in dict(answer.get("requests") or {}).items():  # type: ignore[call-overload]
        snap.counters[f"{label} {version}"] = float(count)
    return snap


def merged(*snapshots: Snapshot) -> Snapshot:
    whole = Snapshot()
    for snap in snapshots:
        whole.sums.update(snap.sums)
        whole.counts.update(snap.counts)
        whole.counters.update(snap.counters)
    return whole


def figures(before: Snapshot, after: Snapshot, creates: int) -> dict[str, float]:
    """Per timed block: each duration's mean (ms) and calls per create; each counter's increase."""
    out: dict[str, float] = {}
    for key, total in after.sums.items():
        calls = after.counts.get(key, 0.0) - before.counts.get(key, 0.0)
        if calls <= 0:
            continue
        spent = total - before.sums.get(key, 0.0)
        out[f"{key} ms"] = 1000.0 * spent / calls
        out[f"{key} calls/create"] = calls / creates
    for key, value in after.counters.items():
        out[key] = value - before.counters.get(key, 0.0)
    return out


def https_json(url: str, ca: str) -> dict[str, object]:
    context = ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen(url, context=context, timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()  # type: ignore[no-any-return]


class GoPeerConnections:
    """The Go peer's /connections, read over its TLS port: each read is a connection of its
    own, which the peer counts, so the reads so far are taken off its count."""

    def __init__(self, url: str, ca: str, label: str = "go") -> None:
        self.url, self.ca, self.label = url, ca, label
        self.reads = 0

    def _read(self) -> dict[str, object]:
        self.reads += 1
        return https_json(f"{self.url}/connections", self.ca)

    def snapshot(self) -> Snapshot:
        return connections_snapshot(self._read(), self.label, self.reads)

    def reviews(self) -> int:
        """The reviews it has answered, in any HTTP version."""
        requests = self._read().get("requests") or {}
        return sum(int(n) for n in dict(requests).values())  # type: ignore[call-overload]


def read_all(
    apiserver_metrics: Callable[[], str],
    project_stats: str,
    go_peers: Iterable[GoPeerConnections],
) -> Snapshot:
    """One snapshot of everything: the API server's, the project's (plain HTTP stats port) and
    the Go peers'."""
    return merged(
        apiserver_snapshot(apiserver_metrics()),
        project_snapshot(http_text(f"{project_stats}/metrics")),
        connections_snapshot(json.loads(http_text(f"{project_stats}/connections")), "project"),
        *(peer.snapshot() for peer in go_peers),
    )
