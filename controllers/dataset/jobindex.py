"""Loader Jobs by PVC, and the ones still running, kept current from the Job informer's events.

A reconcile needs its PVC's Jobs and the number of loads running cluster-wide; scanning every
cached Job for each would make a burst of N PVCs cost N² steps. The informer's handler (on its
thread) updates the index; reconciles (on the event loop) read it. Every update replaces a whole
value or pops a key, which is atomic under the GIL, so readers never see half a change.
"""

from __future__ import annotations

from controllers.dataset.records import JobRecord


def _job_key(job: JobRecord) -> str:
    return f"{job.namespace}/{job.name}"


class JobIndex:
    def __init__(self) -> None:
        self._by_pvc: dict[str, frozenset[str]] = {}  # pvc key -> its Jobs' keys
        self._unfinished: dict[str, str] = {}  # job key -> pvc key

    def update(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """Called by the Job informer's handler, for every event."""
        record = new or old
        if record is None:
            return
        key, pvc = _job_key(record), record.pvc_key
        jobs = self._by_pvc.get(pvc, frozenset())
        if new is None:
            jobs = jobs - {key}
            self._unfinished.pop(key, None)
        else:
            jobs = jobs | {key}
            if new.finished:
                self._unfinished.pop(key, None)
            else:
                self._unfinished[key] = pvc
        if jobs:
            self._by_pvc[pvc] = jobs
        else:
            self._by_pvc.pop(pvc, None)

    def jobs_of(self, pvc_key: str) -> frozenset[str]:
        return self._by_pvc.get(pvc_key, frozenset())

    def running(self, excluding_pvc: str | None = None) -> int:
        """Unfinished loader Jobs, those of `excluding_pvc` left out."""
        unfinished = list(self._unfinished.values())
        return sum(1 for pvc in unfinished if pvc != excluding_pvc)

    def running_keys(self) -> frozenset[str]:
        return frozenset(self._unfinished)
