"""The dataset controller's metrics, registered in the process's metrics registry."""

from __future__ import annotations

from gpu_admission.process.metrics import Metrics

# Loads take seconds to hours.
LOAD_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)


class DatasetMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.loads_started = metrics.counter("dataset_loads_started", "Loader Jobs created")
        self.loads_succeeded = metrics.counter("dataset_loads_succeeded", "Loads that succeeded")
        self.loads_failed = metrics.counter("dataset_loads_failed", "Loads that failed for good")
        self.load_duration = metrics.histogram(
            "dataset_load_duration_seconds",
            "Copy time of finished loads, as the loader measured it",
            buckets=LOAD_DURATION_BUCKETS,
        )
        self.bytes_copied = metrics.counter("dataset_bytes_copied", "Bytes copied by loads")
        self.loads_running = metrics.gauge("dataset_loads_running", "Loader Jobs not finished")
        self.queue_depth = metrics.gauge("dataset_queue_depth", "Keys waiting to be reconciled")
        # Shard labels are bounded by dataset.max_parallelism.
        self.shard_bytes = metrics.counter(
            "dataset_shard_bytes_copied", "Bytes copied by loader shards, as they go", ["shard"]
        )
        self.shards_running = metrics.gauge(
            "dataset_shards_running", "Loader pods running (one per shard of each running load)"
        )
        self.throughput = metrics.gauge(
            "dataset_load_throughput_bytes_per_second",
            "Copy speed of all running loads together, as their loaders last reported it",
        )
        self.reconcile_errors = metrics.counter(
            "dataset_reconcile_errors", "Reconciles that failed and were retried", ["kind"]
        )
