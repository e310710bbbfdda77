"""Loader Jobs by PVC, and the ones still running, kept current from the Job informer's events.

A reconcile needs its PVC's Jobs and the number of loads running cluster-wide; scanning every
cached Job (or every running one) for each would make a burst of N PVCs cost N² steps, so the
running loads are counted as they change. The informer's handler (on its thread) updates the
index; reconciles (on the event loop) read it, under one lock, so a count never sees half a
change.
"""

from __future__ import annotations

import threading
from collections import Counter

from controllers.dataset.records import JobRecord


def _job_key(job: JobRecord) -> str:
    return f"{job.namespace}/{job.name}"


class JobIndex:
    def __init__(self) -> None:
        self._by_pvc: dict[str, frozenset[str]] = {}  # pvc key -> its Jobs' keys
        self._unfinished: dict[str, str] = {}  # job key -> pvc key
        self._running_by_pvc: Counter[str] = Counter()  # pvc key -> its unfinished Jobs
        self._lock = threading.Lock()

    def update(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """Called by the Job informer's handler, for every event."""
        record = new or old
        if record is None:
            return
        key, pvc = _job_key(record), record.pvc_key
        with self._lock:
            jobs = self._by_pvc.get(pvc, frozenset())
            if new is None:
                jobs = jobs - {key}
                self._finished(key)
            else:
                jobs = jobs | {key}
                if new.finished:
                    self._finished(key)
                elif key not in self._unfinished:
                    self._unfinished[key] = pvc
                    self._running_by_pvc[pvc] += 1
            if jobs:
                self._by_pvc[pvc] = jobs
            else:
                self._by_pvc.pop(pvc, None)

    def _finished(self, key: str) -> None:
        pvc = self._unfinished.pop(key, None)
        if pvc is not None:
            self._running_by_pvc[pvc] -= 1
            if self._running_by_pvc[pvc] <= 0:
                del self._running_by_pvc[pvc]

    def jobs_of(self, pvc_key: str) -> frozenset[str]:
        return self._by_pvc.get(pvc_key, frozenset())

    def running(self, excluding_pvc: str | None = None) -> int:
        """Unfinished loader Jobs, those of `excluding_pvc` left out."""
        with self._lock:
            mine = self._running_by_pvc.get(excluding_pvc, 0) if excluding_pvc else 0
            return len(self._unfinished) - mine
