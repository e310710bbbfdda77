"""Writing a load's state to its PVC: one status write per change, and on a finished load its
summary (from the loader pods informer), metrics and an Event."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from controllers.dataset.decide import REASON_SOURCE_CHANGED, Plan
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.records import JOB_NAME_LABEL, JobRecord, LoaderPod, PvcRecord, loader_pod
from controllers.dataset.snapshot_keeper import SnapshotKeeper
from controllers.dataset.status import status_patch
from controllers.dataset.summary import failure_message, success_message, summary_from_pods
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.events import now_rfc3339
from gpu_admission.cluster.informer import Informer
from gpu_admission.names import PHASE_FAILED, PHASE_SUCCEEDED, Names

# The finished loader pod's event races the Job's (two watches): wait this many passes, this
# far apart, before settling it with a LIST.
SUMMARY_WAITS, SUMMARY_WAIT_SECONDS = 10, 0.5
# A reconcile that runs before the PVC informer shows our last status write (the Job's own
# event often wins that race) would write the same thing again, and announce a finished load
# twice. The informer lags when it shows a version of the PVC that one of our own writes
# replaced: the one a write was based on, or the one an earlier write of ours made (a progress
# write whose echo arrives after the final write). Trusted for this many seconds after a write.
ECHO_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class _Written:
    replaced: frozenset[str]  # resourceVersions our writes replaced: a record with one lags
    made: str  # the resourceVersion our last write made
    wanted: tuple[str, ...]  # what it wrote
    at: float


def pvc_ref(pvc: PvcRecord) -> dict[str, str]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": pvc.namespace,
        "name": pvc.name,
        "uid": pvc.uid,
    }


class LoadRecorder:
    def __init__(
        self,
        api: ApiWriter,
        names: Names,
        metrics: DatasetMetrics,
        loader_pods: Informer[LoaderPod],
        deadline_seconds: int,
        retry_later: Callable[[PvcRecord, float], None],
        snapshots: SnapshotKeeper | None = None,
    ) -> None:
        self.api, self.names, self.metrics = api, names, metrics
        self.snapshots = snapshots
        self.loader_pods = loader_pods
        self._deadline = deadline_seconds
        self._retry_later = retry_later
        self._summary_waits: dict[str, int] = {}  # job key -> passes without its pod's outcome
        self._written: dict[str, _Written] = {}  # pvc key -> our writes the informer may lag

    async def record(self, pvc: PvcRecord, plan: Plan) -> None:
        """One status write (condition and annotations) when anything changes; on a finished
        load, metrics and an Event."""
        assert plan.phase is not None
        job_name = pvc.current_job
        wanted = (plan.phase, plan.reason, job_name, plan.message)
        if self._already_written(pvc, wanted):
            return
        finished = pvc.phase != plan.phase or pvc.job != job_name
        summary = None
        if plan.finished_job is not None and finished:
            summary = await self._summary(plan.finished_job)
            if summary is None:  # the loader pod's outcome has not reached the cache yet
                self._retry_later(pvc, SUMMARY_WAIT_SECONDS)
                return
        if plan.phase == PHASE_SUCCEEDED and summary is not None and summary.get("cause"):
            # Every shard succeeded, but they did not split the same listing.
            plan = replace(plan, phase=PHASE_FAILED, reason=REASON_SOURCE_CHANGED)
        message = plan.message
        extra: dict[str, str] = {}
        if plan.phase == PHASE_SUCCEEDED and summary is not None:
            message = success_message(pvc.source, summary, pvc.cloned_from, pvc.cloned_digest)
            commit, digest = summary.get("commit"), summary.get("digest")
            kept = (
                await self.snapshots.keep(
                    pvc,
                    commit if isinstance(commit, str) else None,
                    digest if isinstance(digest, str) else None,
                )
                if self.snapshots is not None
                else None
            )
            if kept is not None:
                extra[self.names.data_snapshot] = kept
                message += f"; kept as VolumeSnapshot {kept} for later PVCs of this source"
        elif plan.phase == PHASE_FAILED and plan.finished_job is not None and summary is not None:
            message = failure_message(
                pvc.source, pvc.name, plan.finished_job, summary, self.names.data_load_retry
            )
        elif plan.phase in (PHASE_SUCCEEDED, PHASE_FAILED) and pvc.condition is not None:
            message = pvc.condition.message  # already recorded; keep its words
        patch = status_patch(
            self.names,
            pvc,
            plan.phase,
            plan.reason,
            message,
            job_name,
            summary,
            now_rfc3339(),
            plan.progress,
            extra,
        )
        if patch is None:
            return
        made = await self.api.patch_pvc_status(pvc.namespace, pvc.name, patch)
        if made is None:
            return  # gone, or re-created: its own events will come
        self._remember(pvc, made, wanted)
        if not finished:
            return
        if plan.phase == PHASE_SUCCEEDED:
            self.metrics.loads_succeeded.inc()
            self._observe(summary)
            await self.api.event(pvc_ref(pvc), "Normal", "LoadSucceeded", message)
        elif plan.phase == PHASE_FAILED:
            self.metrics.loads_failed.inc()
            await self.api.event(pvc_ref(pvc), "Warning", "LoadFailed", message)

    def _already_written(self, pvc: PvcRecord, wanted: tuple[str, ...]) -> bool:
        """True when this exact change was written moments ago and the informer has not
        caught up with it yet."""
        written = self._written.get(pvc.key)
        if written is None:
            return False
        if (
            pvc.resource_version not in written.replaced
            or time.monotonic() - written.at > ECHO_SECONDS
        ):
            del self._written[pvc.key]  # caught up, changed by someone else, or too old
            return False
        return written.wanted == wanted

    def _remember(self, pvc: PvcRecord, made: str, wanted: tuple[str, ...]) -> None:
        if not made or not pvc.resource_version:
            self._written.pop(pvc.key, None)  # nothing to tell lag by
            return
        replaced = {pvc.resource_version}
        earlier = self._written.get(pvc.key)  # still here: this write was based on a lagging view
        if earlier is not None:
            replaced |= earlier.replaced | {earlier.made}
        self._written[pvc.key] = _Written(frozenset(replaced), made, wanted, time.monotonic())

    def forget(self, key: str) -> None:
        """The PVC is gone: drop what was remembered about its writes."""
        self._written.pop(key, None)

    def _observe(self, summary: Mapping[str, Any] | None) -> None:
        if not summary:
            return
        if isinstance(summary.get("durationSeconds"), int | float):
            self.metrics.load_duration.observe(summary["durationSeconds"])
        if isinstance(summary.get("bytes"), int):
            self.metrics.bytes_copied.inc(summary["bytes"])

    async def _summary(self, job: JobRecord) -> dict[str, Any] | None:
        """The loader's summary, from the loader pods informer. Without the finished pod's
        outcome there, None: the pod's own event (or a short timer) brings the PVC back; after
        SUMMARY_WAITS such passes, one LIST settles it."""
        key = f"{job.namespace}/{job.name}"
        pods = [
            p
            for p in self.loader_pods.values()
            if p.namespace == job.namespace and p.job == job.name
        ]
        if not any(p.exit_code is not None for p in pods):
            waits = self._summary_waits.get(key, 0)
            if waits < SUMMARY_WAITS:
                self._summary_waits[key] = waits + 1
                return None
            found = await self.api.list_job_pods(job.namespace, job.name, JOB_NAME_LABEL)
            pods = [p for obj in found if (p := loader_pod(obj)) is not None]
        self._summary_waits.pop(key, None)
        return summary_from_pods(pods, job, self._deadline)
