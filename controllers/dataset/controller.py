"""The dataset loader controller: a loader Job per (PVC, source), state on the PVC, gates removed.

Runs in its own process (`gpu-admission controller`), active on the leader replica only. Five
informers (dataset PVCs, loader Jobs, loader pods, pods waiting for a dataset, and dataset cache
snapshots; all selected by label) feed a de-duplicating work queue, served round-robin by
namespace; workers reconcile one key at a time, in parallel. Load slots (slots), progress
(progress) and the snapshot cache (snapshots) are their own modules. All state lives in the
cluster (Job names are deterministic, phases are PVC annotations), so a restarted controller
carries on where the last one stopped.

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
import os
import socket
import uuid
from collections.abc import Hashable, Iterable
from dataclasses import replace
from typing import Any

from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api

from controllers.dataset.decide import Plan, decide
from controllers.dataset.gates import WaitingPods
from controllers.dataset.load_gauges import LoadStateCollector
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
from controllers.leader import LeaderElector
from controllers.workqueue import RateLimitedQueue, ShutDown
from controllers.writes.background import BackgroundWrites
from controllers.writes.dataset import ApiWriter, NamespaceTerminating
from gpu_admission.cluster.informer import EventType, Informer, describe_error
from gpu_admission.config import Config
from gpu_admission.metrics import Metrics
from gpu_admission.names import PHASE_FAILED, PHASE_SUCCEEDED
from gpu_admission.quiet_log import QuietLog

log = logging.getLogger(__name__)

SYNC_TIMEOUT_SECONDS = 60.0
# How long a stop waits for in-flight reconciles (each a few API calls) before cancelling them.
STOP_GRACE_SECONDS = 10.0
PVC, POD = "pvc", "pod"
Key = tuple[str, str]
# "Job created" status writes in flight at once: they follow the creates and never crowd them out.
STATUS_CONCURRENCY = 2


def _identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _namespace_of(key: Hashable) -> Hashable:
    return key[1].partition("/")[0] if isinstance(key, tuple) else key


class DatasetController:
    name = "dataset-controller"

    def __init__(
        self,
        api_client: ApiClient,
        config: Config,
        registry: Metrics | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.config = config
        self.names = config.names
        self._api_client = api_client
        self._core = CoreV1Api(api_client)
        self._batch = BatchV1Api(api_client)
        self.registry = registry or Metrics(process_metrics=False)
        self.metrics = DatasetMetrics(self.registry)
        self.identity = identity or _identity()
        self.api = ApiWriter(api_client, self.identity, config.dataset.reconcile_workers)
        self._queue: RateLimitedQueue | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._informers: list[Informer[Any]] = []
        self.pvcs: Informer[PvcRecord] | None = None
        self.jobs: Informer[JobRecord] | None = None
        self.loader_pods: Informer[LoaderPod] | None = None
        self.pods: Informer[WaitingPod] | None = None
        self.waiting: WaitingPods | None = None
        self.recorder: LoadRecorder | None = None
        self._graceful_stop = False
        self.progress: ProgressReader | None = None
        self.snapshots: SnapshotKeeper | None = None
        self.starts: LoaderStarts | None = None
        self.slots = LoadSlots(self.api, config, self.metrics)
        self._throttled: set[str] = set()  # PVCs waiting for a free load slot
        self._terminating: set[str] = set()  # namespaces whose work was dropped
        self._failures = QuietLog(log)
        # The "Job created" status write of each PVC whose Job was just made, written beside the
        # next creates rather than before them (a reconcile of the PVC comes back after it).
        self._status_writes: dict[str, asyncio.Task[None]] = {}
        self._after_status_write: set[str] = set()  # PVCs to reconcile once it is written
        self._status_lane = BackgroundWrites(STATUS_CONCURRENCY)
        self._elector: LeaderElector | None = None
        self.leading = asyncio.Event()
        self.registry.registry.register(
            LoadStateCollector(
                self._cached_pvcs, config.dataset.load_stuck_after_seconds, self._blocked
            )
        )

    def _blocked(self) -> dict[tuple[str, str], str]:
        starts = self.starts
        return starts.blocked() if starts is not None and self.leading.is_set() else {}

    def _cached_pvcs(self) -> list[PvcRecord]:
        """The dataset PVCs as the leader's cache holds them; none on a standby."""
        pvcs = self.pvcs
        return pvcs.values() if pvcs is not None and self.leading.is_set() else []

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        election = self.config.leader_election
        if not election.enabled:
            await self._start_leading()
            return
        self._elector = LeaderElector(
            self._api_client,
            namespace=election.namespace,
            name=election.lease_name,
            identity=self.identity,
            lease_duration=election.lease_duration_seconds,
            renew_deadline=election.renew_deadline_seconds,
            retry_period=election.retry_period_seconds,
            on_started_leading=self._start_leading,
            on_stopped_leading=self._stop_leading,
            metrics=self.registry,
        )
        self._elector.start()

    async def stop(self) -> None:
        # A stop (SIGTERM, a rollout) lets each worker finish the reconcile it is in, as
        # controller-runtime does, so a Job is never left without its LoadStarted Event; losing
        # the Lease stops them at once (another replica leads).
        self._graceful_stop = True
        if self._elector is not None:
            await self._elector.stop()  # stops the work, then releases the Lease
        else:
            await self._stop_leading()
        await self.api.drain()  # the Events of the last reconciles
        await self.api.close()

    def readiness(self) -> list[str]:
        """What this replica waits for: its leader election's trouble, or its caches."""
        waiting = self._elector.trouble() if self._elector is not None else []
        return waiting + [
            f"informer {i.name}" + (f" ({i.last_sync_error})" if i.last_sync_error else "")
            for i in self._informers
            if not i.synced
        ]

    async def _start_leading(self) -> None:
        dataset = self.config.dataset
        self._queue = RateLimitedQueue(
            dataset.requeue_base_seconds, dataset.requeue_max_seconds, shard=_namespace_of
        )
        self._terminating.clear()
        self._informers = self._make_informers()
        assert self.jobs is not None
        self.slots.reset(self.jobs)
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not await asyncio.to_thread(informer.wait_synced, SYNC_TIMEOUT_SECONDS):
                log.warning("informer %s has not synced yet; reconciling anyway", informer.name)
        assert self.snapshots is not None
        await self.snapshots.announce()
        assert self.pvcs is not None and self.pods is not None
        for key in [k for k, _ in self.pvcs.items()]:
            self._queue.add((PVC, key))
        for key in [k for k, _ in self.pods.items()]:
            self._queue.add((POD, key))
        self._workers = [
            asyncio.create_task(self._worker(), name=f"dataset-worker-{i}")
            for i in range(dataset.reconcile_workers)
        ]
        self.leading.set()

    async def _stop_leading(self) -> None:
        self.leading.clear()
        if self._queue is not None:
            await self._queue.shutdown()
        if self._graceful_stop and self._workers:
            await asyncio.wait(self._workers, timeout=STOP_GRACE_SECONDS)
        for task in self._workers:
            task.cancel()
        await self._drain_status_writes(STOP_GRACE_SECONDS if self._graceful_stop else 0)
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        for informer in self._informers:
            informer.stop()
        for informer in self._informers:
            await asyncio.to_thread(informer.join, 5.0)
        self._informers = []

    def _make_informers(self) -> list[Informer[Any]]:
        names, dataset = self.names, self.config.dataset
        selector = f"{names.data_load_label}=true"
        self.pvcs = Informer(
            "dataset-pvcs",
            self._core.list_persistent_volume_claim_for_all_namespaces,
            label_selector=selector,
            transform=lambda obj: pvc_record(
                obj, names, dataset.default_parallelism, dataset.max_parallelism
            ),
            handlers=[self._on_pvc],
            shape=DatasetPvc,
        )
        self.jobs = Informer(
            "dataset-loader-jobs",
            self._batch.list_job_for_all_namespaces,
            label_selector=selector,
            transform=job_record,
            handlers=[self._on_job],
            shape=LoaderJob,
        )
        self.loader_pods = Informer(
            "dataset-loader-pods",
            self._core.list_pod_for_all_namespaces,
            label_selector=selector,
            transform=loader_pod,
            handlers=[self._on_loader_pod],
        )
        self.pods = Informer(
            "dataset-waiting-pods",
            self._core.list_pod_for_all_namespaces,
            label_selector=f"{names.data_wait_label}=true",
            transform=waiting_pod,
            handlers=[self._on_pod],
        )
        self.waiting = WaitingPods(self.pods, self.pvcs, self.api, names)
        self.progress = ProgressReader(
            self.api, self.loader_pods, self.metrics, dataset.progress_interval_seconds
        )
        self.snapshots = SnapshotKeeper(self._api_client, self.api, self.config)
        self.starts = LoaderStarts(self.api, self.loader_pods, names)
        self.recorder = LoadRecorder(
            self.api,
            names,
            self.metrics,
            self.loader_pods,
            self.config.dataset.active_deadline_seconds,
            self._retry_later,
            self.snapshots,
        )
        return [self.pvcs, self.jobs, self.loader_pods, self.pods, self.snapshots.informer]

    # -- event handlers (informer threads) ----------------------------------------------------

    def _enqueue(self, key: Key) -> None:
        if self._queue is not None:
            self._queue.add_threadsafe(key)

    def _on_pvc(self, event: EventType, old: PvcRecord | None, new: PvcRecord | None) -> None:
        record = new or old
        if record is not None:
            self._enqueue((PVC, record.key))

    def _on_job(self, event: EventType, old: JobRecord | None, new: JobRecord | None) -> None:
        self.slots.job_changed(old, new)
        record = new or old
        if record is None:
            return
        self._enqueue((PVC, record.pvc_key))
        if new is None or new.finished:  # a load slot may have freed up
            for key in list(self._throttled):
                self._enqueue((PVC, key))

    def _on_loader_pod(
        self, event: EventType, old: LoaderPod | None, new: LoaderPod | None
    ) -> None:
        if new is None or self.jobs is None:
            return
        # A finished attempt (its PVC may be waiting for it), or a pod that has not started and
        # whose status now says something new (why it cannot start).
        news = old is None or (old.waiting, old.unschedulable) != (new.waiting, new.unschedulable)
        if new.exit_code is None and (new.started or not news):
            return
        job = self.jobs.get(new.job_key)
        if job is not None:
            self._enqueue((PVC, job.pvc_key))

    def _retry_later(self, pvc: PvcRecord, seconds: float) -> None:
        if self._queue is not None:
            self._queue.add_after((PVC, pvc.key), seconds)

    def _on_pod(self, event: EventType, old: WaitingPod | None, new: WaitingPod | None) -> None:
        if new is not None:
            self._enqueue((POD, new.key))

    # -- workers ------------------------------------------------------------------------------

    async def _worker(self) -> None:
        queue = self._queue
        assert queue is not None
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                if key[0] == PVC:
                    await self.reconcile_pvc(key[1])
                else:
                    assert self.waiting is not None
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
        assert self.pvcs is not None and self.jobs is not None and self._queue is not None
        if key in self._status_writes:  # back once its status write is done: it counts here
            self._after_status_write.add(key)
            return
        pvc = self.pvcs.get(key)
        if pvc is None:
            self._throttled.discard(key)
            if self.recorder is not None:
                self.recorder.forget(key)
            if self.progress is not None:
                self.progress.forget(key)
            if self.starts is not None:
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
            self._queue.add_after((PVC, key), plan.requeue_after)
        else:
            self._throttled.discard(key)
        if plan.running_job is not None:
            plan = await self._with_progress(pvc, plan, plan.running_job)
            plan = await self._with_start_check(pvc, plan, plan.running_job)
        elif self.starts is not None:
            self.starts.forget(key)
        if plan.phase is not None and started:
            self._write_status_later(pvc, plan)
        elif plan.phase is not None:
            assert self.recorder is not None
            await self.recorder.record(pvc, plan)
        if plan.finished_job is not None and self.progress is not None:
            self.progress.finished(pvc, plan.finished_job)
        if started:
            await self.api.event(
                pvc_ref(pvc),
                "Normal",
                "LoadStarted",
                f"loading {pvc.source} with Job {pvc.current_job}",
            )
        if pvc.loaded or plan.phase in (PHASE_SUCCEEDED, PHASE_FAILED):
            assert self.waiting is not None
            for pod_key in self.waiting.waiting_for(pvc):
                self._queue.add((POD, pod_key))

    def _write_status_later(self, pvc: PvcRecord, plan: Plan) -> None:
        """The status write of a Job just created, in a task of its own: the worker goes on to
        the next PVC's Job. A failed write brings the PVC back, as a failed reconcile does."""
        recorder, queue = self.recorder, self._queue
        assert recorder is not None and queue is not None
        key = (PVC, pvc.key)

        async def write() -> None:
            try:
                await recorder.record(pvc, plan)
            except asyncio.CancelledError:
                raise
            except NamespaceTerminating:
                pass  # its namespace is going: nothing to say there any more
            except Exception as exc:
                self.metrics.reconcile_errors.labels(PVC).inc()
                self._failures.failed(
                    key, f"status write of {pvc.key} failed (will retry): {describe_error(exc)}"
                )
                queue.add_rate_limited(key)
            finally:
                if self._status_writes.get(pvc.key) is task:
                    del self._status_writes[pvc.key]
                if pvc.key in self._after_status_write:
                    self._after_status_write.discard(pvc.key)
                    queue.add(key)

        task = self._status_lane.start(write, name=f"status-{pvc.key}")
        self._status_writes[pvc.key] = task

    async def _drain_status_writes(self, timeout: float) -> None:
        await self._status_lane.drain(timeout)
        self._status_lane.cancel()
        self._status_writes.clear()
        self._after_status_write.clear()

    def _last_failure(self, pvc: PvcRecord, jobs: Iterable[JobRecord]) -> str | None:
        """Why the current Job's last attempt failed, while it retries (from the informer's
        loader pods: no API call)."""
        if self.loader_pods is None:
            return None
        current = next((j for j in jobs if j.name == pvc.current_job), None)
        if current is None or not current.failed or current.finished:
            return None
        return last_failure_cause(self.loader_pods.values(), current.name)

    async def _with_start_check(self, pvc: PvcRecord, plan: Plan, job: JobRecord) -> Plan:
        """A loader pod that cannot start is named on the PVC, in place of the progress."""
        assert self.starts is not None and self._queue is not None
        blocked, recheck = await self.starts.check(pvc, job)
        if recheck is not None:
            self._queue.add_after((PVC, pvc.key), recheck + 1.0)
        if blocked is None:
            return plan
        return replace(plan, message=blocked.message, progress=None)

    async def _with_progress(self, pvc: PvcRecord, plan: Plan, job: JobRecord) -> Plan:
        """A running load: its progress in the message and on the PVC; look again in one
        progress interval."""
        assert self.progress is not None and self._queue is not None
        self._queue.add_after((PVC, pvc.key), self.progress.interval)
        progress = await self.progress.read(pvc, job)
        if progress is None:
            return plan
        return replace(plan, message=f"{plan.message}: {progress.message()}", progress=progress)
