"""What to do for one dataset PVC, decided from the cached PVC and its loader Jobs. Pure.

The reconcile contract is level-based: the plan depends only on the current state, so running it
again (after a restart, a conflict, or a duplicate event) converges on the same result.

Failures: the loader Job retries transient failures itself (backoffLimit, with the Job
controller's back-off) and fails at once on permanent ones (its podFailurePolicy). A failed load
stays Failed until its source or its `data-load-retry` annotation changes: either is a new load
with a new Job name, started once no Job of an older load is still running.

Source edited while a load runs: the old Job is deleted (Foreground propagation, so its pod is
gone before the Job is) and the new Job is created only once the old one has disappeared, so two
loaders never write the volume at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controllers.dataset.records import JobRecord, PvcRecord
from gpu_admission.datasets.progress import LoadProgress
from gpu_admission.names import PHASE_FAILED, PHASE_LOADING, PHASE_PENDING, PHASE_SUCCEEDED

REASON_WAITING_FOR_CAPACITY = "WaitingForCapacity"
REASON_STOPPING_PREVIOUS = "StoppingPreviousLoad"
REASON_JOB_CREATED = "JobCreated"
REASON_INVALID_SOURCE = "InvalidSource"
REASON_INVALID_PARALLELISM = "InvalidParallelism"
REASON_SOURCE_CHANGED = "SourceChanged"


@dataclass(frozen=True)
class Plan:
    delete_jobs: tuple[str, ...] = ()
    create_job: bool = False
    phase: str | None = None  # the phase to record (None: leave the PVC as it is)
    reason: str = ""
    message: str = ""
    finished_job: JobRecord | None = None  # its pods' termination message completes the record
    requeue_after: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    running_job: JobRecord | None = None  # a started load: its progress is worth reading
    progress: LoadProgress | None = None  # read by the controller, written with the status


def decide(
    pvc: PvcRecord,
    jobs: Iterable[JobRecord],
    running_loads: int,
    max_running_loads: int,
    capacity_requeue_seconds: float,
    last_failure: str | None = None,
) -> Plan:
    """`jobs`: the loader Jobs owned by this PVC (uid match). `running_loads`: unfinished loader
    Jobs across the cluster, this PVC's excluded. `last_failure`: the cause of the current Job's
    last failed attempt, said while it retries."""
    own = [j for j in jobs if j.pvc_uid == pvc.uid]
    unfinished = [j for j in own if not j.finished]
    if pvc.deleting:
        return Plan(delete_jobs=tuple(j.name for j in unfinished if not j.deleting))
    current_name = pvc.current_job
    stale = [j for j in unfinished if j.name != current_name]
    if pvc.source_error is not None:
        return Plan(
            delete_jobs=tuple(j.name for j in unfinished if not j.deleting),
            phase=PHASE_FAILED,
            reason=REASON_INVALID_SOURCE,
            message=pvc.source_error,
        )
    if pvc.shards_error and not any(j.name == current_name for j in own):
        return Plan(  # the webhook was bypassed; a running load keeps its shards
            phase=PHASE_FAILED, reason=REASON_INVALID_PARALLELISM, message=pvc.shards_error
        )
    if stale:
        return Plan(
            delete_jobs=tuple(j.name for j in stale if not j.deleting),
            phase=PHASE_PENDING,
            reason=REASON_STOPPING_PREVIOUS,
            message="the data source changed; stopping the previous load before starting anew",
        )
    job = next((j for j in own if j.name == current_name), None)
    if job is None:
        if pvc.load.phase in (PHASE_SUCCEEDED, PHASE_FAILED):
            return Plan()  # finished earlier; its Job has since been cleaned up
        if running_loads >= max_running_loads:
            return Plan(
                phase=PHASE_PENDING,
                reason=REASON_WAITING_FOR_CAPACITY,
                message=f"waiting: {running_loads} loads are running (at most "
                f"{max_running_loads} at once)",
                requeue_after=capacity_requeue_seconds,
            )
        return Plan(
            create_job=True,
            phase=PHASE_PENDING,
            reason=REASON_JOB_CREATED,
            message=f"loader Job {current_name} created",
        )
    if job.complete:
        return Plan(phase=PHASE_SUCCEEDED, reason=PHASE_SUCCEEDED, finished_job=job)
    if job.failed_for_good:
        return Plan(phase=PHASE_FAILED, reason=PHASE_FAILED, finished_job=job)
    if job.started:
        shards = f" with {job.completions} shards" if job.completions > 1 else ""
        why = f": {last_failure}" if last_failure else ""
        retrying = (
            f" (retrying after {job.failed} transient failure{'s' if job.failed > 1 else ''}{why})"
            if job.failed
            else ""
        )
        cloned = (
            f" into a clone of VolumeSnapshot {pvc.cloned_from} (kept if the source is unchanged)"
            if pvc.cloned_from
            else ""
        )
        return Plan(
            phase=PHASE_LOADING,
            reason=PHASE_LOADING,
            message=f"copying {pvc.source}{cloned}{shards}{retrying}",
            running_job=job,
        )
    # Created, not started yet: the same words as when it was created, so nothing is rewritten.
    return Plan(
        phase=PHASE_PENDING,
        reason=REASON_JOB_CREATED,
        message=f"loader Job {current_name} created",
    )
