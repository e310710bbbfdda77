"""JobIndex: loader Jobs by PVC and the running count, kept as the Job informer's events come."""

from __future__ import annotations

from dataclasses import replace

from controllers.dataset.jobindex import JobIndex
from controllers.dataset.records import JobRecord


def job(name: str, pvc: str, **changes: object) -> JobRecord:
    record = JobRecord("ml", name, pvc, f"uid-{pvc}", 1, 0, 0, False, False, "", "", True)
    return replace(record, **changes)


def test_running_counts_unfinished_jobs_and_leaves_one_pvc_out() -> None:
    index = JobIndex()
    a1, a2, b1 = job("a1", "a"), job("a2", "a"), job("b1", "b")
    for record in (a1, a2, b1):
        index.update(None, record)
    index.update(a1, a1)  # the same Job again (a resync): counted once
    assert index.running() == 3
    assert index.running(excluding_pvc="ml/a") == 1
    assert index.running(excluding_pvc="ml/none") == 3
    assert index.jobs_of("ml/a") == {"ml/a1", "ml/a2"}


def test_finished_or_deleted_jobs_stop_counting() -> None:
    index = JobIndex()
    a1, b1 = job("a1", "a"), job("b1", "b")
    index.update(None, a1)
    index.update(None, b1)
    done = replace(a1, active=0, succeeded=1, complete=True)
    index.update(a1, done)
    index.update(done, done)  # finished twice: still not counted, never below zero
    assert index.running() == 1 and index.running(excluding_pvc="ml/a") == 1
    assert index.jobs_of("ml/a") == {"ml/a1"}  # finished Jobs stay the PVC's
    index.update(b1, None)
    index.update(done, None)
    assert index.running() == 0 and index.running(excluding_pvc="ml/b") == 0
    assert index.jobs_of("ml/a") == frozenset() and index.jobs_of("ml/b") == frozenset()
