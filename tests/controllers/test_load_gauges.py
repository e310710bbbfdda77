"""Per-PVC load state as series: which PVCs wait for their data (since when) and which failed,
read from the leader's cache when scraped, so alerts can name the PVC."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client.utils import floatToGoString

from controllers.dataset.load_gauges import LoadStateCollector, load_states
from controllers.dataset.records import Condition, PvcRecord
from gpu_admission.process.metrics import Metrics
from tests.controllers.pvc_records import changed, dataset_pvc

BASE = dataset_pvc()
SINCE = "2026-11-23T10:00:00Z"
SINCE_UNIX = datetime(2026, 11, 23, 10, tzinfo=UTC).timestamp()


def loading(name: str, phase: str = "Loading", **fields) -> PvcRecord:  # type: ignore[no-untyped-def]
    pvc = changed(BASE, name=name, phase=phase, **fields)
    condition = Condition("True", phase, "copying", SINCE)
    return changed(pvc, condition=condition, job=pvc.current_job)


def test_pending_and_loading_pvcs_wait_since_their_condition_turned_true() -> None:
    states = load_states([loading("a"), loading("b", phase="Pending")])
    assert states.loading_since == {("ml", "a"): SINCE_UNIX, ("ml", "b"): SINCE_UNIX}
    assert states.failed == []


def test_failed_pvcs_are_listed_and_finished_or_stale_states_are_not() -> None:
    failed = changed(BASE, name="broken", phase="Failed")
    failed = changed(failed, job=failed.current_job)
    succeeded = changed(loading("done"), phase="Succeeded")
    stale = changed(loading("edited"), job="dl-edited-an-older-source")  # source changed since
    deleting = changed(loading("going"), deleting=True)
    states = load_states([failed, succeeded, stale, deleting])
    assert states.failed == [("ml", "broken")]
    assert states.loading_since == {}


def test_the_collector_exposes_the_states_and_the_threshold_on_scrape() -> None:
    cache: list[PvcRecord] = []
    metrics = Metrics(process_metrics=False)
    metrics.registry.register(LoadStateCollector(lambda: cache, stuck_after=1800.0))
    before = metrics.exposition().decode()
    assert "gpu_admission_dataset_load_stuck_after_seconds 1800.0" in before
    assert 'persistentvolumeclaim="' not in before
    cache.append(loading("imagenet"))  # read again at the next scrape: nothing kept in between
    after = metrics.exposition().decode()
    series = (
        'gpu_admission_dataset_loading_since_timestamp_seconds{namespace="ml",'
        f'persistentvolumeclaim="imagenet"}} {floatToGoString(SINCE_UNIX)}'
    )
    assert series in after
