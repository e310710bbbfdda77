"""Load slots: how many loads run cluster-wide, and creating a loader Job only under the limit.

A Job this controller creates is counted from the moment its create is sent, before the Job
informer shows it (`launched`), so a burst of reconciles never overshoots
`dataset.max_concurrent_loads`. Counting and reserving happen in one step of the event loop (no
await between them); the creates themselves overlap, up to the writer's thread pool
(`dataset.reconcile_workers`), so a burst is written as fast as a plain client would write it.
"""

from __future__ import annotations

from typing import Any

from controllers.dataset.decide import REASON_WAITING_FOR_CAPACITY, Plan
from controllers.dataset.jobindex import JobIndex
from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.records import JobRecord, PvcRecord
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.config.model import Config


class LoadSlots:
    """The counts of one term of leadership, over its Job informer."""

    def __init__(
        self,
        api: ApiWriter,
        config: Config,
        metrics: DatasetMetrics,
        jobs: Informer[JobRecord],
    ) -> None:
        self.api, self.config, self.metrics, self.jobs = api, config, metrics, jobs
        self.index = JobIndex()
        self._launched: set[str] = set()  # Jobs being created, or not yet seen by the informer

    def job_changed(self, old: JobRecord | None, new: JobRecord | None) -> None:
        self.index.update(old, new)

    def jobs_of(self, pvc_key: str) -> list[JobRecord]:
        return [j for k in self.index.jobs_of(pvc_key) if (j := self.jobs.get(k)) is not None]

    def running(self, excluding_pvc: str | None = None) -> int:
        """Unfinished loads (this PVC's excluded); also keeps the gauge current."""
        # Launched Jobs the informer shows now are counted by the index (or finished).
        self._launched = {key for key in self._launched if self.jobs.get(key) is None}
        self.metrics.loads_running.set(self.index.running() + len(self._launched))
        return self.index.running(excluding_pvc) + len(self._launched)

    async def launch(self, pvc: PvcRecord, plan: Plan) -> tuple[Plan, bool]:
        """Create the loader Job, unless the load limit says wait; (plan, created)."""
        limits = self.config.dataset
        # Count and reserve with no await between: no other reconcile can count in between.
        running = self.running(excluding_pvc=pvc.key)
        if running >= limits.max_concurrent_loads:
            waiting = Plan(
                phase=plan.phase,
                reason=REASON_WAITING_FOR_CAPACITY,
                message=f"waiting: {running} loads are running (at most "
                f"{limits.max_concurrent_loads} at once)",
                requeue_after=limits.capacity_requeue_seconds,
            )
            return waiting, False
        key = f"{pvc.namespace}/{pvc.current_job}"
        self._launched.add(key)
        try:
            created = await self.api.create_job(pvc.namespace, self._job(pvc))
        except BaseException:
            self._launched.discard(key)  # nothing was made: give the slot back
            raise
        # Not created (409): it exists already, made by an earlier pass; it stays counted until
        # the informer shows it.
        return plan, created

    def _job(self, pvc: PvcRecord) -> dict[str, Any]:
        inputs = LoaderJobInputs.of(pvc, sync=self.config.dataset.sync_delete)
        return build_loader_job(inputs, self.config)
