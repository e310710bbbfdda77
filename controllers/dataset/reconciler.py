"""What the leading replica runs for one term of leadership: the informers, the work queue, the
workers, and the reconciles of dataset PVCs and of the pods that wait for them.

Five informers (dataset PVCs, loader Jobs, loader pods, pods waiting for a dataset, and dataset
cache snapshots; all selected by label) feed a de-duplicating work queue, served round-robin by
namespace; workers reconcile one key at a time, in parallel. Load slots (slots), progress
(progress), the snapshot cache (snapshot_keeper), pods that cannot start (starts) and the status
writes (recorder) are their own modules. A Reconciler is made complete, every part in place, when
a term begins, and is not reused after it ends: the next term starts from fresh caches.

API calls per new dataset PVC: create its Job, one status write (condition and annotations
together), one Event (the two after the Job in tasks of their own, so that the worker goes on to
the next PVC's Job; a reconcile of the PVC meanwhile comes back once it is written); then one
status write when the copy starts, and one status write and one Event when it ends (the loader's
summary is read from the loader pod informer, not fetched), plus a VolumeSnapshot create where
the cache is on; while it runs, one pods/log read per running loader pod and at most one status
write per progress interval. No read precedes a write: what a write needs comes from the
informers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable
from dataclasses import replace
from typing import Any

from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api

from controllers.dataset.decide import Plan, decide
from controllers.dataset.gates import WaitingPods
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.progress import ProgressReader
from controllers.dataset.recorder import LoadRecorder, pvc_ref
from controllers.dataset.records import (
    JobRecord,
    LoaderPod,
    PvcRecord,
    WaitingPod,
    job_record,
    loader_pod,
    pvc_record,
    waiting_pod,
)
from controllers.dataset.slots import LoadSlots
from controllers.dataset.snapshot_keeper import SnapshotKeeper
from controllers.dataset.starts import LoaderStarts
from controllers.dataset.summary import last_failure_cause
from controllers.dataset.watched_fields import DatasetPvc, LoaderJob
from controllers.workqueue import RateLimitedQueue, ShutDown
from controllers.writes.background import BackgroundWrites
from controllers.writes.dataset import ApiWriter, NamespaceTerminating
from gpu_admission.cluster.informer import EventType, Informer, describe_error
from gpu_admission.config.model import Config
from gpu_admission.names import PHASE_FAILED, PHASE_SUCCEEDED
from gpu_admission.process.quiet_log import QuietLog

log = logging.getLogger(__name__)

SYNC_TIMEOUT_SECONDS = 60.0
# How long a graceful stop waits for in-flight reconciles (each a few API calls) before
# cancelling them.
STOP_GRACE_SECONDS = 10.0
PVC, POD = "pvc", "pod"
Key = tuple[str, str]
# "Job created" status writes in flight at once: they follow the creates and never crowd them out.
STATUS_CONCURRENCY = 2


def _namespace_of(key: Hashable) -> Hashable:
    return key[1].partition("/")[0] if isinstance(key, tuple) else key


class Reconciler:
    def __init__(
        self, api_client: ApiClient, api: ApiWriter, config: Config, metrics: DatasetMetrics
    ) -> None:
        self.config, self.api, self.metrics = config, api, metrics
        names, dataset = config.names, config.dataset
        core, batch = CoreV1Api(api_client), BatchV1Api(api_client)
        self.queue = RateLimitedQueue(
            dataset.requeue_base_seconds, dataset.requeue_max_seconds, shard=_namespace_of
        )
        selector = f"{names.data_load_label}=true"
        self.pvcs: Informer[PvcRecord] = Informer(
            "dataset-pvcs",
            core.list_persistent_volume_claim_for_all_namespaces,
            label_selector=selector,
            transform=lambda obj: pvc_record(
                obj, names, dataset.default_parallelism, dataset.max_parallelism
            ),
            handlers=[self._on_pvc],
            shape=DatasetPvc,
        )
        self.jobs: Informer[JobRecord] = Informer(
            "dataset-loader-jobs",
            batch.list_job_for_all_namespaces,
            label_selector=selector,
            transform=job_record,
            handlers=[self._on_job],
            shape=LoaderJob,
        )
        self.loader_pods: Informer[LoaderPod] = Informer(
            "dataset-loader-pods",
            core.list_pod_for_all_namespaces,
            label_selector=selector,
            transform=loader_pod,
            handlers=[self._on_loader_pod],
        )
        self.pods: Informer[WaitingPod] = Informer(
            "dataset-waiting-pods",
            core.list_pod_for_all_namespaces,
            label_selector=f"{names.data_wait_label}=true",
            transform=waiting_pod,
            handlers=[self._on_pod],
        )
        self.slots = LoadSlots(api, config, metrics, self.jobs)
        self.waiting = WaitingPods(self.pods, self.pvcs, api, names)
        self.progress = ProgressReader(
            api, self.loader_pods, metrics, dataset.progress_interval_seconds
        )
        self.snapshots = SnapshotKeeper(api_client, api, config)
        self.starts = LoaderStarts(api, self.loader_pods, names)
        self.recorder = LoadRecorder(
            api,
            names,
            metrics,
            self.loader_pods,
            dataset.active_deadline_seconds,
            self._retry_later,
            self.snapshots,
        )
        self.informers: list[Informer[Any]] = [
            self.pvcs,
            self.jobs,
            self.loader_pods,
            self.pods,
            self.snapshots.informer,
        ]
        self._workers: list[asyncio.Task[None]] = []
        self._throttled: set[str] = set()  # PVCs waiting for a free load slot
        self._terminating: set[str] = set()  # namespaces whose work was dropped
        self._failures = QuietLog(log)
        # The "Job created" status write of each PVC whose Job was just made, written beside the
        # next creates rather than before them (a reconcile of the PVC comes back after it).
        self._status_writes: dict[str, asyncio.Task[None]] = {}
        self._after_status_write: set[str] = set()  # PVCs to reconcile once it is written
        self._status_lane = BackgroundWrites(STATUS_CONCURRENCY)

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fill the caches, queue everything they hold, and set the workers going."""
        for informer in self.informers:
            informer.start()
        for informer in self.informers:
            if not await asyncio.to_thread(informer.wait_synced, SYNC_TIMEOUT_SECONDS):
                log.warning("informer %s has not synced yet; reconciling anyway", informer.name)
        await self.snapshots.announce()
        for key in [k for k, _ in self.pvcs.items()]:
            self.queue.add((PVC, key))
        for key in [k for k, _ in self.pods.items()]:
            self.queue.add((POD, key))
        self._workers = [
            asyncio.create_task(self._worker(), name=f"dataset-worker-{i}")
            for i in range(self.config.dataset.reconcile_workers)
        ]

    async def stop(self, graceful: bool) -> None:
        """`graceful` (SIGTERM, a rollout): each worker finishes the reconcile it is in, as
        controller-runtime does, so a Job is never left without its LoadStarted Event; else
        (the Lease was lost: another replica leads) they stop at once."""
        await self.queue.shutdown()
        if graceful and self._workers:
            await asyncio.wait(self._workers, timeout=STOP_GRACE_SECONDS)
        for task in self._workers:
            task.cancel()
        await self._status_lane.drain(STOP_GRACE_SECONDS if graceful else 0)
        self._status_lane.cancel()
        self._status_writes.clear()
        self._after_status_write.clear()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        for informer in self.informers:
            informer.stop()
        for informer in self.informers:
            await asyncio.to_thread(informer.join, 5.0)

    def unsynced(self) -> list[str]:
        """The informers this term still waits for, with why, for readiness."""
        return [
            f"informer {i.name}" + (f" ({i.last_sync_error})" if i.last_sync_error else "")
            for i in self.informers
            if not i.synced
        ]

    # -- event handlers (informer threads) ----------------------------------------------------

    def _on_pvc(self, event: EventType, old: PvcRecord | None, new: PvcRecord | None) -> None:
        record = new or old
        if record is not None:
            self.queue.add_threadsafe((PVC, record.key))

    def _on_job(self, event: EventType, old: JobRecord | None, new: JobRecord | None) -> None:
        self.slots.job_changed(old, new)
        record = new or old
        if record is None:
            return
        self.queue.add_threadsafe((PVC, record.pvc_key))
        if new is None or new.finished:  # a load slot may have freed up
            for key in list(self._throttled):
                self.queue.add_threadsafe((PVC, key))

    def _on_loader_pod(
        self, event: EventType, old: LoaderPod | None, new: LoaderPod | None
    ) -> None:
        if new is None:
            return
        # A finished attempt (its PVC may be waiting for it), or a pod that has not started and
        # whose status now says something new (why it cannot start).
        news = old is None or (old.waiting, old.unschedulable) != (new.waiting, new.unschedulable)
        if new.exit_code is None and (new.started or not news):
            return
        job = self.jobs.get(new.job_key)
        if job is not None:
            self.queue.add_threadsafe((PVC, job.pvc_key))

    def _retry_later(self, pvc: PvcRecord, seconds: float) -> None:
        self.queue.add_after((PVC, pvc.key), seconds)

    def _on_pod(self, event: EventType, old: WaitingPod | None, new: WaitingPod | None) -> None:
        if new is not None:
            self.queue.add_threadsafe((POD, new.key))

    # -- workers ------------------------------------------------------------------------------

    async def _worker(self) -> None:
        queue = self.queue
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                if key[0] == PVC:
                    await self.reconcile_pvc(key[1])
                else:
                    await self.waiting.reconcile(key[1])
                queue.forget(key)
                self._failures.recovered(key, f"reconcile {key[0]} {key[1]} succeeded again")
            except asyncio.CancelledError:
                raise
            except NamespaceTerminating as gone:
                # Nothing can be created there any more, and its objects are going: drop it.
                queue.forget(key)
                if gone.namespace not in self._terminating:
                    self._terminating.add(gone.namespace)
                    log.info(
                        "namespace %s is being deleted; its dataset work is dropped", gone.namespace
                    )
            except Exception as exc:
                self.metrics.reconcile_errors.labels(key[0]).inc()
                self._failures.failed(
                    key, f"reconcile {key[0]} {key[1]} failed (will retry): {describe_error(exc)}"
                )
                queue.add_rate_limited(key)
            finally:
                queue.done(key)
                self.metrics.queue_depth.set(len(queue))

    # -- PVCs -----------------------------------------------------------------------------------

    async def reconcile_pvc(self, key: str) -> None:
        if key in self._status_writes:  # back once its status write is done: it counts here
            self._after_status_write.add(key)
            return
        pvc = self.pvcs.get(key)
        if pvc is None:
            self._throttled.discard(key)
            self.recorder.forget(key)
            self.progress.forget(key)
            self.starts.forget(key)
            return
        jobs = self.slots.jobs_of(key)
        limits = self.config.dataset
        plan = decide(
            pvc,
            jobs,
            self.slots.running(excluding_pvc=key),
            limits.max_concurrent_loads,
            limits.capacity_requeue_seconds,
            self._last_failure(pvc, jobs),
        )
        for name in plan.delete_jobs:
            await self.api.delete_job(pvc.namespace, name)
        started = False
        if plan.create_job:
            plan, started = await self.slots.launch(pvc, plan)
            if started:
                self.metrics.loads_started.inc()  # counted as the Job is created
        if plan.requeue_after is not None:
            self._throttled.add(key)
            self.queue.add_after((PVC, key), plan.requeue_after)
        else:
            self._throttled.discard(key)
        if plan.running_job is not None:
            plan = await self._with_progress(pvc, plan, plan.running_job)
            plan = await self._with_start_check(pvc, plan, plan.running_job)
        else:
            self.starts.forget(key)
        if plan.phase is not None and started:
            self._write_status_later(pvc, plan)
        elif plan.phase is not None:
            await self.recorder.record(pvc, plan)
        if plan.finished_job is not None:
            self.progress.finished(pvc, plan.finished_job)
        if started:
            await self.api.event(
                pvc_ref(pvc),
                "Normal",
                "LoadStarted",
                f"loading {pvc.source} with Job {pvc.current_job}",
            )
        if pvc.loaded or plan.phase in (PHASE_SUCCEEDED, PHASE_FAILED):
            for pod_key in self.waiting.waiting_for(pvc):
                self.queue.add((POD, pod_key))

    def _write_status_later(self, pvc: PvcRecord, plan: Plan) -> None:
        """The status write of a Job just created, in a task of its own: the worker goes on to
        the next PVC's Job. A failed write brings the PVC back, as a failed reconcile does."""
        key = (PVC, pvc.key)

        async def write() -> None:
            try:
                await self.recorder.record(pvc, plan)
            except asyncio.CancelledError:
                raise
            except NamespaceTerminating:
                pass  # its namespace is going: nothing to say there any more
            except Exception as exc:
                self.metrics.reconcile_errors.labels(PVC).inc()
                self._failures.failed(
                    key, f"status write of {pvc.key} failed (will retry): {describe_error(exc)}"
                )
                self.queue.add_rate_limited(key)
            finally:
                if self._status_writes.get(pvc.key) is task:
                    del self._status_writes[pvc.key]
                if pvc.key in self._after_status_write:
                    self._after_status_write.discard(pvc.key)
                    self.queue.add(key)

        task = self._status_lane.start(write, name=f"status-{pvc.key}")
        self._status_writes[pvc.key] = task

    def _last_failure(self, pvc: PvcRecord, jobs: Iterable[JobRecord]) -> str | None:
        """Why the current Job's last attempt failed, while it retries (from the informer's
        loader pods: no API call)."""
        current = next((j for j in jobs if j.name == pvc.current_job), None)
        if current is None or not current.failed or current.finished:
            return None
        return last_failure_cause(self.loader_pods.values(), current.name)

    async def _with_start_check(self, pvc: PvcRecord, plan: Plan, job: JobRecord) -> Plan:
        """A loader pod that cannot start is named on the PVC, in place of the progress."""
        blocked, recheck = await self.starts.check(pvc, job)
        if recheck is not None:
            self.queue.add_after((PVC, pvc.key), recheck + 1.0)
        if blocked is None:
            return plan
        return replace(plan, message=blocked.message, progress=None)

    async def _with_progress(self, pvc: PvcRecord, plan: Plan, job: JobRecord) -> Plan:
        """A running load: its progress in the message and on the PVC; look again in one
        progress interval."""
        self.queue.add_after((PVC, pvc.key), self.progress.interval)
        progress = await self.progress.read(pvc, job)
        if progress is None:
            return plan
        return replace(plan, message=f"{plan.message}: {progress.message()}", progress=progress)
