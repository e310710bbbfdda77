"""The agent's metrics: per container under the names the kubelet used before KEP 1867 removed
them (so dashboards built on them work again, now also right on shared GPUs), the share and the
peak beside them, the memory no container owns, and the agent's own health.

Each scrape shows the latest sweep: a collector over it, not gauges set and left behind, so a
container that has gone is gone from the next scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

from gpu_admission.metrics import Metrics
from gpu_usage.attribution import UsageRow
from gpu_usage.containers import ContainerUsage
from gpu_usage.pod_index import Holding

CONTAINER_LABELS = ("namespace", "pod", "container", "gpu_uuid", "gpu_model")
# Added to the kubelet's labels (a dashboard that sums by the old ones is unaffected): the
# pod's workload, for the rules that size a workload's share and bill its namespace.
WORKLOAD_LABELS = ("workload_kind", "workload")
# The SM duty cycle, as the kubelet's was: percent of the interval the GPU computed for it.
DUTY_CYCLE = "container_accelerator_duty_cycle"


@dataclass
class LatestSweep:
    """What the last sweep found; replaced whole by each sweep."""

    containers: list[ContainerUsage] = field(default_factory=list)
    outside: list[UsageRow] = field(default_factory=list)  # host processes, unlisted memory
    gpus: list[tuple[str, str, int]] = field(default_factory=list)  # uuid, model, total bytes
    holdings: list[Holding] = field(default_factory=list)  # running containers' GPUs
    over_share: list[tuple[ContainerUsage, int]] = field(default_factory=list)  # bytes over


class UsageCollector:
    def __init__(self) -> None:
        self.latest = LatestSweep()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the sweep; described at collection

    def collect(self) -> Iterator[Metric]:
        latest = self.latest  # one sweep's, though the next may replace it meanwhile
        used = GaugeMetricFamily(
            "container_accelerator_memory_used_bytes",
            "GPU memory a container's processes use, by NVML's per-process count (a JAX "
            'container\'s whole preallocated pool: preallocated="true").',
            labels=[*CONTAINER_LABELS, "preallocated", *WORKLOAD_LABELS],
        )
        total = GaugeMetricFamily(
            "container_accelerator_memory_total_bytes",
            "Memory of the GPU (or MIG instance) the container uses.",
            labels=list(CONTAINER_LABELS),
        )
        duty = GaugeMetricFamily(
            DUTY_CYCLE,
            "Percent of the last interval the GPU's SMs ran the container's kernels (absent "
            "where the GPU gives no per-process utilization: MIG, older GPUs).",
            labels=list(CONTAINER_LABELS),
        )
        share = GaugeMetricFamily(
            "gpu_admission_container_gpu_memory_share_bytes",
            "The memory share the container was given on a shared GPU (GPU_MEMORY_LIMIT_MIB).",
            labels=[*CONTAINER_LABELS, *WORKLOAD_LABELS],
        )
        peak = GaugeMetricFamily(
            "gpu_admission_container_gpu_memory_peak_bytes",
            "The most GPU memory the container has used since it started, as the agent saw it.",
            labels=[*CONTAINER_LABELS, "preallocated", *WORKLOAD_LABELS],
        )
        for u in latest.containers:
            labels = [u.namespace, u.pod, u.container, u.gpu.uuid, u.gpu.model]
            workload = [u.workload_kind, u.workload]
            pool = "true" if u.preallocated else "false"
            used.add_metric([*labels, pool, *workload], u.used_bytes)
            total.add_metric(labels, u.gpu.memory_total)
            peak.add_metric([*labels, pool, *workload], u.peak_bytes)
            if u.sm_percent is not None:
                duty.add_metric(labels, u.sm_percent)
            if u.share_bytes is not None:
                share.add_metric([*labels, *workload], u.share_bytes)
        held = GaugeMetricFamily(
            "gpu_admission_container_gpus_held",
            "GPUs a running container holds, as GPU-hours count them: a whole GPU 1, a "
            "time-sliced replica 1/replicas, a MIG slice of g compute slices g/7.",
            labels=["namespace", "pod", "container", *WORKLOAD_LABELS],
        )
        for h in latest.holdings:
            held.add_metric([h.namespace, h.pod, h.container, h.workload_kind, h.workload], h.gpus)
        outside = GaugeMetricFamily(
            "gpu_admission_gpu_memory_outside_pods_bytes",
            "GPU memory no container owns: host processes by command, and what NVML counts "
            "for no listed process (the driver's reserve).",
            labels=["gpu_uuid", "gpu_model", "command"],
        )
        sums: dict[tuple[str, str, str], int] = {}
        for row in latest.outside:
            key = (row.gpu.uuid, row.gpu.model, row.command)
            sums[key] = sums.get(key, 0) + (row.used_bytes or 0)
        for key, value in sums.items():
            outside.add_metric(list(key), value)
        over = GaugeMetricFamily(
            "gpu_admission_container_gpu_memory_over_share_bytes",
            "How far a container is past its share and one CUDA context per process (only "
            "containers past it have a series): the agent's GPUMemoryOverShare judgement.",
            labels=[*CONTAINER_LABELS, *WORKLOAD_LABELS],
        )
        for u, excess in latest.over_share:
            over.add_metric(
                [
                    u.namespace,
                    u.pod,
                    u.container,
                    u.gpu.uuid,
                    u.gpu.model,
                    u.workload_kind,
                    u.workload,
                ],
                excess,
            )
        gpus = GaugeMetricFamily(
            "gpu_admission_gpu_memory_total_bytes",
            "Memory of each GPU (each MIG instance) on the node, whether used or not.",
            labels=["gpu_uuid", "gpu_model"],
        )
        for uuid, model, total_bytes in latest.gpus:
            gpus.add_metric([uuid, model], total_bytes)
        yield from (used, total, duty, share, peak, held, over, outside, gpus)


class AgentMetrics:
    """The collector, and the agent's own health in the project's registry."""

    def __init__(self, metrics: Metrics) -> None:
        self.usage = UsageCollector()
        metrics.registry.register(self.usage)
        self.nvml_up = metrics.gauge(
            "gpu_usage_nvml_up", "1 while NVML answers on this node, 0 while it does not."
        )
        self.sweep_seconds = metrics.histogram(
            "gpu_usage_sweep_seconds",
            "Time of one sweep, by part: nvml (the library), proc (/proc reads), rest.",
            ["part"],
        )
        self.processes = metrics.gauge(
            "gpu_usage_processes",
            "GPU processes on this node at the last sweep, by place.",
            ["place"],
        )
        self.over_share_events = metrics.counter(
            "gpu_usage_over_share_events_total",
            "GPUMemoryOverShare Events the agent wrote (or failed to, by result).",
            ["result"],
        )
