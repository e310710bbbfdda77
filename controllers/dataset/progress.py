"""A running load's progress, read from its loader pods and summed over shards.

Each loader pod prints a progress line per stats tick (gpu_admission.datasets.progress); the reader
takes the tail of each running pod's log through `pods/log` (tailLines, limitBytes: a bounded
read) and, for shards already done, their termination summaries from the loader pods informer
(no call). Reads are spaced: at most one per load per `interval`, whatever wakes the reconcile,
so a running load costs (running loader pods + 1 status write) per interval; with the default
20 s and 4 shards, at most 15 calls a minute.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from controllers.dataset.jobspec import CONTAINER_NAME
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.records import JobRecord, LoaderPod, PvcRecord
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.datasets.progress import LoadProgress, Progress, combine, last_progress

TAIL_LINES = 20  # a progress line follows each of rclone's stats lines
LIMIT_BYTES = 64 * 1024


def finished_progress(pod: LoaderPod) -> Progress | None:
    """A succeeded shard's part, complete, from its summary."""
    summary = pod.summary()
    if summary is None:
        return None
    size = int(summary.get("plannedBytes") or summary.get("bytes") or 0)
    files = int(summary.get("plannedFiles") or 0) or int(summary.get("files") or 0) + int(
        summary.get("checks") or 0
    )
    return Progress(
        bytesDone=size,
        bytesTotal=size,
        filesDone=files,
        filesTotal=files,
        shard=pod.shard,
        shards=int(summary.get("shards") or 1),
        listedBytes=int(summary.get("listedBytes") or 0),
        listedFiles=int(summary.get("listedFiles") or 0),
    )


class ProgressReader:
    def __init__(
        self,
        api: ApiWriter,
        loader_pods: Informer[LoaderPod],
        metrics: DatasetMetrics,
        interval: float,
    ) -> None:
        self.api, self.loader_pods, self.metrics = api, loader_pods, metrics
        self.interval = interval
        self._last: dict[str, tuple[float, LoadProgress | None]] = {}  # pvc key -> read
        self._counted: dict[tuple[str, str], int] = {}  # (job key, pod) -> bytes counted
        self._speeds: dict[str, float] = {}  # pvc key -> bytes/s
        self._ended: dict[str, str] = {}  # pvc key -> its last load counted as ended

    def _pods(self, job: JobRecord) -> list[LoaderPod]:
        return [
            p
            for p in self.loader_pods.values()
            if p.namespace == job.namespace and p.job == job.name
        ]

    async def read(self, pvc: PvcRecord, job: JobRecord) -> LoadProgress | None:
        """The load's progress now, or as read less than `interval` ago."""
        last = self._last.get(pvc.key)
        if last is not None and time.monotonic() - last[0] < self.interval:
            return last[1]
        pods = self._pods(job)
        shards: dict[int, Progress] = {}
        for pod in pods:
            if pod.exit_code == 0 and (done := finished_progress(pod)) is not None:
                shards[pod.shard] = done
        for pod in pods:
            if not pod.running or pod.shard in shards:
                continue
            text = await self.api.pod_log_tail(
                pod.namespace, pod.name, CONTAINER_NAME, TAIL_LINES, LIMIT_BYTES
            )
            found = last_progress((text or "").splitlines())
            if found is not None:
                shards[pod.shard] = found
                self._count(job, pod, found.bytesDone)
        progress = combine(shards.values(), job.completions, job.completed_indexes)
        result = progress if shards else None
        self._last[pvc.key] = (time.monotonic(), result)
        self._speeds[pvc.key] = progress.speed
        self.metrics.throughput.set(sum(self._speeds.values()))
        self._running_gauge()
        return result

    def finished(self, pvc: PvcRecord, job: JobRecord) -> None:
        """The load ended: count the shards' last bytes (once) and forget it."""
        key = f"{job.namespace}/{job.name}"
        if self._ended.get(pvc.key) == key:
            return  # a finished load is reconciled again and again; it ended once
        self._ended[pvc.key] = key
        for pod in self._pods(job):
            summary = pod.summary() if pod.exit_code is not None else None
            if summary is not None:
                self._count(job, pod, int(summary.get("bytes") or 0))
        self._counted = {k: v for k, v in self._counted.items() if k[0] != key}
        self._forget_reads(pvc.key)

    def forget(self, pvc_key: str) -> None:
        """The PVC is gone."""
        self._ended.pop(pvc_key, None)
        self._forget_reads(pvc_key)

    def _forget_reads(self, pvc_key: str) -> None:
        self._last.pop(pvc_key, None)
        self._speeds.pop(pvc_key, None)
        self.metrics.throughput.set(sum(self._speeds.values()))
        self._running_gauge()

    def _count(self, job: JobRecord, pod: LoaderPod, copied: int) -> None:
        key = (f"{job.namespace}/{job.name}", pod.name)
        before = self._counted.get(key, 0)
        if copied > before:
            self.metrics.shard_bytes.labels(str(pod.shard)).inc(copied - before)
            self._counted[key] = copied

    def _running_gauge(self) -> None:
        running: Iterable[LoaderPod] = (p for p in self.loader_pods.values() if p.running)
        self.metrics.shards_running.set(sum(1 for _ in running))
