"""The dataset loader controller: a loader Job per (PVC, source), state on the PVC, gates removed.

Runs in the service process, active on the leader replica only. Three informers (dataset PVCs,
loader Jobs, pods waiting for a dataset; all selected by label) feed a de-duplicating work queue;
workers reconcile one key at a time. All state lives in the cluster (Job names are deterministic,
phases are PVC annotations), so a restarted controller carries on where the last one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from jsonpointer import escape
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from controllers.api import write
from controllers.dataset.decide import REASON_WAITING_FOR_CAPACITY, Plan, decide
from controllers.dataset.jobspec import build_loader_job
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.records import (
    JOB_NAME_LABEL,
    JobRecord,
    PvcRecord,
    WaitingPod,
    job_record,
    pvc_record,
    waiting_pod,
)
from controllers.dataset.status import (
    annotation_patch,
    condition_patch,
    loading_condition,
    now_rfc3339,
)
from controllers.leader import LeaderElector
from controllers.workqueue import RateLimitedQueue, ShutDown
from gpu_admission.cluster.informer import EventType, Informer
from gpu_admission.config import Config
from gpu_admission.datasource import parse_data_source
from gpu_admission.metrics import Metrics
from gpu_admission.names import PHASE_FAILED, PHASE_SUCCEEDED

log = logging.getLogger(__name__)

COMPONENT = "gpu-admission"
SYNC_TIMEOUT_SECONDS = 60.0
PVC, POD = "pvc", "pod"
Key = tuple[str, str]


def _identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


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
        self.metrics = DatasetMetrics(registry or Metrics(process_metrics=False))
        self.identity = identity or _identity()
        self._queue: RateLimitedQueue | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._informers: list[Informer[Any]] = []
        self.pvcs: Informer[PvcRecord] | None = None
        self.jobs: Informer[JobRecord] | None = None
        self.pods: Informer[WaitingPod] | None = None
        self._launch_lock = asyncio.Lock()
        self._launched: set[str] = set()  # Jobs created but not yet seen by the informer
        self._throttled: set[str] = set()  # PVCs waiting for a free load slot
        self._warned: set[tuple[str, str]] = set()  # (pod uid, job) failure events sent
        self._elector: LeaderElector | None = None
        self.leading = asyncio.Event()

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
        )
        self._elector.start()

    async def stop(self) -> None:
        if self._elector is not None:
            await self._elector.stop()  # stops the work, then releases the Lease
        else:
            await self._stop_leading()

    async def _start_leading(self) -> None:
        self._queue = RateLimitedQueue(
            self.config.dataset.requeue_base_seconds, self.config.dataset.requeue_max_seconds
        )
        self._launched.clear()
        self._informers = self._make_informers()
        for informer in self._informers:
            informer.start()
        for informer in self._informers:
            if not await asyncio.to_thread(informer.wait_synced, SYNC_TIMEOUT_SECONDS):
                log.warning("informer %s has not synced yet; reconciling anyway", informer.name)
        assert self.pvcs is not None and self.pods is not None
        for key in [k for k, _ in self.pvcs.items()]:
            self._queue.add((PVC, key))
        for key in [k for k, _ in self.pods.items()]:
            self._queue.add((POD, key))
        self._workers = [
            asyncio.create_task(self._worker(), name=f"dataset-worker-{i}")
            for i in range(self.config.dataset.reconcile_workers)
        ]
        self.leading.set()

    async def _stop_leading(self) -> None:
        self.leading.clear()
        if self._queue is not None:
            await self._queue.shutdown()
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        for informer in self._informers:
            informer.stop()
        self._informers = []

    def _make_informers(self) -> list[Informer[Any]]:
        selector = f"{self.names.data_load_label}=true"
        names = self.names
        self.pvcs = Informer(
            "dataset-pvcs",
            self._core.list_persistent_volume_claim_for_all_namespaces,
            label_selector=selector,
            transform=lambda obj: pvc_record(obj, names),
            handlers=[self._on_pvc],
        )
        self.jobs = Informer(
            "dataset-loader-jobs",
            self._batch.list_job_for_all_namespaces,
            label_selector=selector,
            transform=job_record,
            handlers=[self._on_job],
        )
        self.pods = Informer(
            "dataset-waiting-pods",
            self._core.list_pod_for_all_namespaces,
            label_selector=f"{self.names.data_wait_label}=true",
            transform=waiting_pod,
            handlers=[self._on_pod],
        )
        return [self.pvcs, self.jobs, self.pods]

    # -- event handlers (informer threads) ----------------------------------------------------

    def _enqueue(self, key: Key) -> None:
        if self._queue is not None:
            self._queue.add_threadsafe(key)

    def _on_pvc(self, event: EventType, old: PvcRecord | None, new: PvcRecord | None) -> None:
        record = new or old
        if record is not None:
            self._enqueue((PVC, record.key))

    def _on_job(self, event: EventType, old: JobRecord | None, new: JobRecord | None) -> None:
        record = new or old
        if record is None:
            return
        self._enqueue((PVC, record.pvc_key))
        if new is None or new.finished:  # a load slot may have freed up
            for key in list(self._throttled):
                self._enqueue((PVC, key))

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
                    await self.reconcile_pod(key[1])
                queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.reconcile_errors.labels(key[0]).inc()
                log.warning("reconcile %s %s failed (will retry): %s", key[0], key[1], exc)
                queue.add_rate_limited(key)
            finally:
                queue.done(key)
                self.metrics.queue_depth.set(len(queue))

    # -- PVCs -----------------------------------------------------------------------------------

    def _running_loads(self, excluding_pvc: str | None = None) -> int:
        assert self.jobs is not None
        seen = {j.name for j in self.jobs.values()}
        self._launched -= seen
        running = sum(
            1 for j in self.jobs.values() if not j.finished and j.pvc_key != excluding_pvc
        )
        self.metrics.loads_running.set(running + len(self._launched))
        return running + len(self._launched)

    async def reconcile_pvc(self, key: str) -> None:
        assert self.pvcs is not None and self.jobs is not None and self._queue is not None
        pvc = self.pvcs.get(key)
        if pvc is None:
            self._throttled.discard(key)
            return
        jobs = [j for j in self.jobs.values() if j.pvc_key == key]
        limits = self.config.dataset
        plan = decide(
            pvc,
            jobs,
            self._running_loads(excluding_pvc=key),
            limits.max_concurrent_loads,
            limits.capacity_requeue_seconds,
        )
        for name in plan.delete_jobs:
            await self._delete_job(pvc.namespace, name)
        if plan.create_job:
            plan = await self._launch(pvc, plan)
        if plan.requeue_after is not None:
            self._throttled.add(key)
            self._queue.add_after((PVC, key), plan.requeue_after)
        else:
            self._throttled.discard(key)
        if plan.phase is not None:
            await self._record(pvc, plan)
        if pvc.loaded or plan.phase in (PHASE_SUCCEEDED, PHASE_FAILED):
            self._enqueue_waiting_pods(pvc)

    async def _launch(self, pvc: PvcRecord, plan: Plan) -> Plan:
        limits = self.config.dataset
        async with self._launch_lock:  # count and create together: never over the limit
            running = self._running_loads(excluding_pvc=pvc.key)
            if running >= limits.max_concurrent_loads:
                return Plan(
                    phase=plan.phase,
                    reason=REASON_WAITING_FOR_CAPACITY,
                    message=f"waiting: {running} loads are running (at most "
                    f"{limits.max_concurrent_loads} at once)",
                    requeue_after=limits.capacity_requeue_seconds,
                )
            job = build_loader_job(
                job_name=pvc.current_job,
                pvc_namespace=pvc.namespace,
                pvc_name=pvc.name,
                pvc_uid=pvc.uid,
                source=parse_data_source(pvc.source),
                secret=pvc.credentials,
                sync=pvc.sync or limits.sync_delete,
                config=self.config,
            )
            try:
                await asyncio.to_thread(
                    write,
                    self._batch.create_namespaced_job,
                    pvc.namespace,
                    job,
                )
            except ApiException as exc:
                if exc.status != 409:  # 409: the Job exists already (we made it before): adopt
                    raise
                return plan
            self._launched.add(pvc.current_job)
        self.metrics.loads_started.inc()
        await self._event(
            self._pvc_ref(pvc),
            "Normal",
            "LoadStarted",
            f"loading {pvc.source} with Job {pvc.current_job}",
        )
        return plan

    async def _delete_job(self, namespace: str, name: str) -> None:
        body = {"propagationPolicy": "Foreground"}
        try:
            await asyncio.to_thread(self._batch.delete_namespaced_job, name, namespace, body=body)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def _record(self, pvc: PvcRecord, plan: Plan) -> None:
        """Write phase and condition when they change; events and metrics on a transition."""
        assert plan.phase is not None
        job_name = pvc.current_job
        if pvc.phase == plan.phase and pvc.job == job_name:
            return
        summary = await self._summary(plan.finished_job) if plan.finished_job else None
        message = plan.message
        if plan.phase == PHASE_SUCCEEDED:
            message = _success_message(pvc.source, summary)
        elif plan.phase == PHASE_FAILED and plan.finished_job is not None:
            message = f"loading {pvc.source} failed: {(summary or {}).get('cause', '')}"
        obj = await self._get_pvc(pvc)
        if obj is None:
            return
        wanted = loading_condition(plan.phase, plan.reason, message)
        ops = condition_patch(obj, wanted, now_rfc3339())
        if ops is not None:
            await asyncio.to_thread(
                write,
                self._core.patch_namespaced_persistent_volume_claim_status,
                pvc.name,
                pvc.namespace,
                ops,
            )
        if pvc.phase == plan.phase and pvc.job == job_name:
            return
        await asyncio.to_thread(
            write,
            self._core.patch_namespaced_persistent_volume_claim,
            pvc.name,
            pvc.namespace,
            annotation_patch(self.names, plan.phase, job_name, summary),
        )
        if plan.phase == PHASE_SUCCEEDED:
            self.metrics.loads_succeeded.inc()
            self._observe(summary)
            await self._event(self._pvc_ref(pvc), "Normal", "LoadSucceeded", message)
        elif plan.phase == PHASE_FAILED:
            self.metrics.loads_failed.inc()
            await self._event(self._pvc_ref(pvc), "Warning", "LoadFailed", message)

    def _observe(self, summary: Mapping[str, Any] | None) -> None:
        if not summary:
            return
        if isinstance(summary.get("durationSeconds"), int | float):
            self.metrics.load_duration.observe(summary["durationSeconds"])
        if isinstance(summary.get("bytes"), int):
            self.metrics.bytes_copied.inc(summary["bytes"])

    async def _get_pvc(self, pvc: PvcRecord) -> dict[str, Any] | None:
        try:
            response = await asyncio.to_thread(
                self._core.read_namespaced_persistent_volume_claim,
                pvc.name,
                pvc.namespace,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        obj = json.loads(response.data)
        if (obj.get("metadata") or {}).get("uid") != pvc.uid:
            return None  # re-created under the same name; its own events will come
        return obj

    async def _summary(self, job: JobRecord) -> dict[str, Any]:
        """The loader's summary from its pods' termination messages (the last attempt's)."""
        response = await asyncio.to_thread(
            self._core.list_namespaced_pod,
            job.namespace,
            label_selector=f"{JOB_NAME_LABEL}={job.name}",
            _preload_content=False,
        )
        pods = json.loads(response.data).get("items") or []
        return summary_from_pods(pods, job, self.config.dataset.active_deadline_seconds)

    # -- waiting pods -------------------------------------------------------------------------

    def _enqueue_waiting_pods(self, pvc: PvcRecord) -> None:
        assert self.pods is not None and self._queue is not None
        for pod in self.pods.values():
            if pod.namespace == pvc.namespace and pvc.name in pod.claims:
                self._queue.add((POD, pod.key))

    async def reconcile_pod(self, key: str) -> None:
        assert self.pods is not None and self.pvcs is not None
        pod = self.pods.get(key)
        if pod is None:
            return
        datasets = [
            record
            for claim in pod.claims
            if (record := self.pvcs.get(f"{pod.namespace}/{claim}")) is not None
        ]
        waiting = [d for d in datasets if not d.loaded]
        if waiting:
            for dataset in waiting:
                if dataset.phase == PHASE_FAILED and dataset.job == dataset.current_job:
                    await self._warn_pod(pod, dataset)
            return
        await self._release(pod)

    async def _warn_pod(self, pod: WaitingPod, dataset: PvcRecord) -> None:
        marker = (pod.uid, dataset.current_job)
        if marker in self._warned:
            return
        await self._event(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
            "Warning",
            "DatasetLoadFailed",
            f"dataset PVC {dataset.name!r} failed to load; this pod stays gated until a load "
            f"succeeds: fix the PVC's data source (see its events)",
        )
        self._warned.add(marker)

    async def _release(self, pod: WaitingPod) -> None:
        """Remove our gate (tested first, so a concurrent change cannot shift what we remove)
        and the waiting label in one patch."""
        gate = self.names.data_load_gate
        ops: list[dict[str, Any]] = []
        if gate in pod.gates:
            index = pod.gates.index(gate)
            path = f"/spec/schedulingGates/{index}"
            ops += [
                {"op": "test", "path": path, "value": {"name": gate}},
                {"op": "remove", "path": path},
            ]
        ops.append(
            {"op": "remove", "path": f"/metadata/labels/{escape(self.names.data_wait_label)}"}
        )
        try:
            await asyncio.to_thread(
                write,
                self._core.patch_namespaced_pod,
                pod.name,
                pod.namespace,
                ops,
            )
        except ApiException as exc:
            # 404: the pod is gone. 422: our view of its gates is stale (a test op failed);
            # the informer's next event for the pod queues it again.
            if exc.status not in (404, 422):
                raise

    # -- events -------------------------------------------------------------------------------

    def _pvc_ref(self, pvc: PvcRecord) -> dict[str, str]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": pvc.namespace,
            "name": pvc.name,
            "uid": pvc.uid,
        }

    async def _event(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        """A core/v1 Event; failing to record one never fails the reconcile."""
        now = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{ref['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": ref["namespace"],
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await asyncio.to_thread(
                write,
                self._core.create_namespaced_event,
                ref["namespace"],
                body,
            )
        except ApiException as exc:
            log.warning("cannot record event %s on %s: %s", reason, ref["name"], exc.reason)


def _success_message(source: str, summary: Mapping[str, Any] | None) -> str:
    summary = summary or {}
    files, size = summary.get("files"), summary.get("bytes")
    duration = summary.get("durationSeconds")
    if files is None:
        return f"loaded {source}"
    return f"loaded {source}: {files} files, {size} bytes in {duration} s"


def summary_from_pods(
    pods: list[Mapping[str, Any]], job: JobRecord, deadline_seconds: int
) -> dict[str, Any]:
    """The summary of the loader's last finished attempt, read from its termination message."""

    def finished_at(pod: Mapping[str, Any]) -> str:
        state = _terminated(pod) or {}
        return str(state.get("finishedAt") or "")

    attempts = sorted((p for p in pods if _terminated(p) is not None), key=finished_at)
    if job.complete:
        attempts = [p for p in attempts if (_terminated(p) or {}).get("exitCode") == 0] or attempts
    summary: dict[str, Any] = {}
    if attempts:
        message = ((_terminated(attempts[-1]) or {}).get("message") or "").strip()
        try:
            parsed = json.loads(message)
            summary = parsed if isinstance(parsed, dict) else {"cause": message}
        except ValueError:
            summary = {"cause": message[-1024:]} if message else {}
    if not job.complete and not summary.get("cause"):
        if job.failure_reason == "DeadlineExceeded":
            summary["cause"] = (
                f"the load ran longer than its deadline ({deadline_seconds} s); "
                "ask for a longer activeDeadlineSeconds or load less data"
            )
        else:
            summary["cause"] = job.failure_message or "the loader Job failed"
    return summary


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None
