"""Per-PVC load state as Prometheus series, computed from the PVC cache when scraped.

Alerts must name the PVC that is stuck or failed, and counters cannot: these gauges carry
`namespace` and `persistentvolumeclaim` labels, one series per PVC that is loading or failed
(bounded by the dataset PVCs in the cluster, gone as soon as the state clears). They are read
from the leader's informer cache on scrape: no API call, no state kept between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controllers.dataset.records import PvcRecord
from gpu_admission.names import PHASE_FAILED, PHASE_LOADING, PHASE_PENDING
from gpu_admission.process.metrics import METRIC_PREFIX

PVC_LABELS = ["namespace", "persistentvolumeclaim"]


@dataclass(frozen=True)
class LoadStates:
    loading_since: dict[tuple[str, str], float]  # (namespace, name) -> Unix time
    failed: list[tuple[str, str]]


def load_states(pvcs: Iterable[PvcRecord]) -> LoadStates:
    """Which PVCs wait for their current load (and since when) and which failed it. Pure."""
    since: dict[tuple[str, str], float] = {}
    failed: list[tuple[str, str]] = []
    for pvc in pvcs:
        if pvc.deleting or pvc.job not in (None, pvc.current_job):
            continue  # a state about an older source, about to be replaced
        where = (pvc.namespace, pvc.name)
        if pvc.phase in (PHASE_PENDING, PHASE_LOADING) and pvc.condition is not None:
            # The Loading condition turns True when the load is asked for and keeps its
            # lastTransitionTime through Pending and Loading.
            started = _timestamp(pvc.condition.last_transition)
            if started is not None:
                since[where] = started
        elif pvc.phase == PHASE_FAILED:
            failed.append(where)
    return LoadStates(since, sorted(failed))


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class LoadStateCollector(Collector):
    """Registers with the process's registry; `pvcs` returns the cached records (empty on a
    replica that is not leading, so only the leader reports)."""

    def __init__(
        self,
        pvcs: Callable[[], Iterable[PvcRecord]],
        stuck_after: float,
        blocked: Callable[[], dict[tuple[str, str], str]] = dict,
    ) -> None:
        self._pvcs = pvcs
        self._stuck_after = stuck_after
        self._blocked = blocked  # (namespace, PVC) -> why its loader pod cannot start

    def describe(self) -> Iterator[Metric]:
        return iter(self._families(LoadStates({}, []), {}))

    def collect(self) -> Iterator[Metric]:
        return iter(self._families(load_states(self._pvcs()), self._blocked()))

    def _families(self, states: LoadStates, blocked: dict[tuple[str, str], str]) -> list[Metric]:
        since = GaugeMetricFamily(
            f"{METRIC_PREFIX}_dataset_loading_since_timestamp_seconds",
            "When the current load of a PVC still Pending or Loading was asked for (Unix time)",
            labels=PVC_LABELS,
        )
        for (namespace, name), started in sorted(states.loading_since.items()):
            since.add_metric([namespace, name], started)
        failed = GaugeMetricFamily(
            f"{METRIC_PREFIX}_dataset_load_failed",
            "1 for each PVC whose current load failed for good (until it is retried or deleted)",
            labels=PVC_LABELS,
        )
        for namespace, name in states.failed:
            failed.add_metric([namespace, name], 1.0)
        threshold = GaugeMetricFamily(
            f"{METRIC_PREFIX}_dataset_load_stuck_after_seconds",
            "dataset.load_stuck_after_seconds: how long a load may wait or run before the "
            "DatasetLoadStuck alert fires",
            value=self._stuck_after,
        )
        stuck = GaugeMetricFamily(
            f"{METRIC_PREFIX}_dataset_loader_blocked",
            "1 for each PVC whose loader pod cannot start, by cause (config-map, secret, image, "
            "unschedulable, container, not-started); the PVC's Loading condition says more",
            labels=[*PVC_LABELS, "cause"],
        )
        for (namespace, name), cause in sorted(blocked.items()):
            stuck.add_metric([namespace, name, cause], 1.0)
        return [since, failed, threshold, stuck]
