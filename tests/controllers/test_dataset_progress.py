"""The controller's progress reader: bounded reads, finished shards from their summaries, and
shard bytes counted once."""

from __future__ import annotations

import json
from typing import Any

from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.progress import ProgressReader
from controllers.dataset.records import LoaderPod
from gpu_admission.datasets.progress import Progress
from gpu_admission.process.metrics import Metrics
from tests.controllers.test_dataset_units import PVC, job


class FakeApi:
    def __init__(self, logs: dict[str, str]) -> None:
        self.logs = logs
        self.reads: list[tuple[str, int, int]] = []

    async def pod_log_tail(
        self, namespace: str, name: str, container: str, lines: int, limit_bytes: int
    ) -> str | None:
        self.reads.append((name, lines, limit_bytes))
        return self.logs.get(name)


class Pods:
    def __init__(self, pods: list[LoaderPod]) -> None:
        self.pods = pods

    def values(self) -> list[LoaderPod]:
        return list(self.pods)


def running(index: int) -> LoaderPod:
    return LoaderPod("ml", f"p{index}", PVC.current_job, None, "", "", index=index, running=True)


def succeeded(index: int, size: int) -> LoaderPod:
    summary = {"bytes": size, "files": 3, "plannedBytes": size, "plannedFiles": 3, "shards": 3}
    return LoaderPod("ml", f"p{index}", PVC.current_job, 0, "T", json.dumps(summary), index=index)


def line(index: int, done: int, total: int, speed: float = 10.0) -> str:
    record = Progress(
        bytesDone=done, bytesTotal=total, filesDone=1, filesTotal=3, speed=speed, shard=index,
        shards=3, listedBytes=900, listedFiles=9,
    )  # fmt: skip
    return "rclone noise\n" + record.line() + "\n"


def sample(metrics: Metrics, name: str, labels: dict[str, Any] | None = None) -> float | None:
    return metrics.registry.get_sample_value(f"gpu_admission_{name}", labels or {})


async def test_reads_each_running_shard_once_per_interval_and_sums_with_done_ones() -> None:
    metrics = Metrics(process_metrics=False)
    api = FakeApi({"p1": line(1, 100, 300), "p2": line(2, 50, 300, speed=5.0)})
    pods = Pods([succeeded(0, 300), running(1), running(2)])
    reader = ProgressReader(api, pods, DatasetMetrics(metrics), interval=3600)  # type: ignore[arg-type]
    load = job(started=True, completions=3, completed_indexes=1)
    progress = await reader.read(PVC, load)
    assert progress is not None
    assert (progress.bytes_done, progress.bytes_total) == (450, 900)
    assert (progress.files_done, progress.files_total, progress.shards_done) == (5, 9, 1)
    assert progress.speed == 15.0 and progress.eta_seconds == 30
    # Only the running shards' logs were read, their tails bounded.
    assert sorted(name for name, _, _ in api.reads) == ["p1", "p2"]
    assert all(lines == 20 and limit == 64 * 1024 for _, lines, limit in api.reads)
    assert await reader.read(PVC, load) == progress
    assert len(api.reads) == 2  # within the interval: no second read
    assert sample(metrics, "dataset_shards_running") == 2
    assert sample(metrics, "dataset_load_throughput_bytes_per_second") == 15.0
    assert sample(metrics, "dataset_shard_bytes_copied_total", {"shard": "1"}) == 100


async def test_shard_bytes_are_counted_once_however_often_the_end_is_seen() -> None:
    metrics = Metrics(process_metrics=False)
    api = FakeApi({"p1": line(1, 100, 300)})
    pods = Pods([running(1)])
    reader = ProgressReader(api, pods, DatasetMetrics(metrics), interval=0)  # type: ignore[arg-type]
    load = job(started=True, completions=3)
    await reader.read(PVC, load)
    pods.pods = [succeeded(1, 300)]
    done = job(complete=True, completions=3, completed_indexes=3)
    for _ in range(3):
        reader.finished(PVC, done)
    assert sample(metrics, "dataset_shard_bytes_copied_total", {"shard": "1"}) == 300
    assert sample(metrics, "dataset_load_throughput_bytes_per_second") == 0


async def test_no_progress_line_yet_means_no_progress() -> None:
    api = FakeApi({"p1": "starting\n"})
    reader = ProgressReader(
        api, Pods([running(1)]), DatasetMetrics(Metrics(process_metrics=False)), interval=0
    )  # type: ignore[arg-type]
    assert await reader.read(PVC, job(started=True, completions=3)) is None
