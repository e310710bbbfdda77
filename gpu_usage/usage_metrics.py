"""The agent's metrics: per container under the names the kubelet used before KEP 1867 removed
them (so dashboards built on them work again, now also right on shared GPUs; the duty cycle under
its old name only where the old meaning holds), each container's own duty cycle, the share and the
peak beside them, each GPU's own duty cycle, the memory no container owns, and the agent's own
health.

Each scrape shows the latest sweep: a collector over it, not gauges set and left behind, so a
container that has gone is gone from the next scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpu_admission.process.metrics import Metrics
from gpu_usage.attribution import UsageRow
from gpu_usage.containers import ContainerUsage
from gpu_usage.nvml_faults import Fault
from gpu_usage.pod_index import Holding

CONTAINER_LABELS = ("namespace", "pod", "container", "gpu_uuid", "gpu_model")
# The kubelet's own labels on its container_accelerator_* series (cAdvisor's accelerator
# collector: make "nvidia", model the device's name, acc_id its UUID), so a dashboard written
# for the kubelet's series reads these unchanged.
KUBELET_LABELS = ("make", "model", "acc_id")
ACCELERATOR_LABELS = (*CONTAINER_LABELS, *KUBELET_LABELS)
# Added to the kubelet's labels (a dashboard that sums by the old ones is unaffected): the
# pod's workload, for the rules that size a workload's share and bill its namespace.
WORKLOAD_LABELS = ("workload_kind", "workload")
# The kubelet's duty cycle was the whole GPU's (cAdvisor: nvmlDeviceGetSamples over 10 s, for each
# container holding the GPU): under its name only for a container alone on a whole GPU, where the
# two meanings agree. Each container's own share is the project's series.
KUBELET_DUTY_CYCLE = "container_accelerator_duty_cycle"


@dataclass
class LatestSweep:
    """What the last sweep found; replaced whole by each sweep."""

    containers: list[ContainerUsage] = field(default_factory=list)
    outside: list[UsageRow] = field(default_factory=list)  # host processes, unlisted memory
    gpus: list[tuple[str, str, int]] = field(default_factory=list)  # uuid, model, total bytes
    holdings: list[Holding] = field(default_factory=list)  # running containers' GPUs
    over_share: list[tuple[ContainerUsage, int]] = field(default_factory=list)  # bytes over
    faults: dict[str, Fault] = field(default_factory=dict)  # GPUs not read, and why
    gpu_busy: dict[str, float] = field(default_factory=dict)  # GPU UUID -> its percent busy


@dataclass(frozen=True)
class Family:
    """One metric family the collector shows: its name, help and label names, said once."""

    name: str
    help: str
    labels: tuple[str, ...]
    counter: bool = False  # a counter family (its samples get _total), else a gauge

    def empty(self) -> GaugeMetricFamily | CounterMetricFamily:
        kind = CounterMetricFamily if self.counter else GaugeMetricFamily
        return kind(self.name, self.help, labels=list(self.labels))


POOL = ("preallocated",)
MEMORY_USED = Family(
    "container_accelerator_memory_used_bytes",
    "GPU memory a container's processes use, by NVML's per-process count (a JAX container's "
    'whole preallocated pool: preallocated="true"; absent where NVML cannot tell).',
    (*ACCELERATOR_LABELS, *POOL, *WORKLOAD_LABELS),
)
MEMORY_TOTAL = Family(
    "container_accelerator_memory_total_bytes",
    "Memory of the GPU (or MIG instance) the container uses.",
    ACCELERATOR_LABELS,
)
DUTY = Family(
    "gpu_admission_container_gpu_duty_cycle",
    "Percent of the last sweep's window the GPU's SMs ran the container's kernels: its "
    "processes' per-process figures from NVML summed, at most the GPU's own "
    "(gpu_admission_gpu_duty_cycle). Absent where NVML cannot tell one process's share: MIG "
    "instances, MPS clients, older GPUs, and the agent's first sweep.",
    (*ACCELERATOR_LABELS, *WORKLOAD_LABELS),
)
BUSY = Family(
    "gpu_admission_container_gpu_busy_seconds",  # exposed with _total
    "Seconds the GPU's SMs ran the container's kernels since it started: each sweep's duty "
    "times its window, summed (gpu_usage/busy_time.py), so rate() sees a burst shorter than "
    "the scrape interval. Absent where the duty cycle is.",
    (*ACCELERATOR_LABELS, *WORKLOAD_LABELS),
    counter=True,
)
KUBELET_DUTY = Family(
    KUBELET_DUTY_CYCLE,
    "The kubelet's meaning: percent of the window the whole GPU was busy, for a container that "
    "is the only one on a whole GPU (not a MIG instance; no other container or host process).",
    (*ACCELERATOR_LABELS, *WORKLOAD_LABELS),
)
GPU_DUTY = Family(
    "gpu_admission_gpu_duty_cycle",
    "Percent of the last sweep's window the GPU was busy (one or more kernels running), idle "
    "periods included: NVML's own samples of the GPU.",
    ("gpu_uuid", "gpu_model"),
)
SHARE = Family(
    "gpu_admission_container_gpu_memory_share_bytes",
    "The memory share the container was given on a shared GPU (GPU_MEMORY_LIMIT_MIB).",
    (*CONTAINER_LABELS, *WORKLOAD_LABELS),
)
PEAK = Family(
    "gpu_admission_container_gpu_memory_peak_bytes",
    "The most GPU memory the container has used since it started, as the agent saw it.",
    (*CONTAINER_LABELS, *POOL, *WORKLOAD_LABELS),
)
HELD = Family(
    "gpu_admission_container_gpus_held",
    "GPUs a running container holds, as GPU-hours count them: a whole GPU 1, a time-sliced "
    "replica 1/replicas, a MIG slice of g compute slices g/7.",
    ("namespace", "pod", "container", *WORKLOAD_LABELS),
)
OVER_SHARE = Family(
    "gpu_admission_container_gpu_memory_over_share_bytes",
    "How far a container is past its share and one CUDA context per process (only containers "
    "past it have a series): the agent's GPUMemoryOverShare judgement.",
    (*CONTAINER_LABELS, *WORKLOAD_LABELS),
)
OUTSIDE_PODS = Family(
    "gpu_admission_gpu_memory_outside_pods_bytes",
    "GPU memory no container owns: host processes by command, and what NVML counts for no "
    "listed process (the driver's reserve).",
    ("gpu_uuid", "gpu_model", "command"),
)
GPU_TOTAL = Family(
    "gpu_admission_gpu_memory_total_bytes",
    "Memory of each GPU (each MIG instance) on the node, whether used or not.",
    ("gpu_uuid", "gpu_model"),
)
GPU_FAULT = Family(
    "gpu_admission_gpu_usage_gpu_fault",
    "1 for each GPU (or MIG instance) NVML could not read at the last sweep, with why and what: "
    'figure="all", its containers have no series meanwhile; figure="utilization", only their '
    "duty cycle is missing.",
    ("gpu", "reason", "figure"),
)
FAMILIES = (
    MEMORY_USED, MEMORY_TOTAL, DUTY, BUSY, KUBELET_DUTY, SHARE, PEAK, HELD, OVER_SHARE,
    OUTSIDE_PODS, GPU_TOTAL, GPU_DUTY, GPU_FAULT,
)  # fmt: skip


def _container(u: ContainerUsage) -> list[str]:
    return [u.namespace, u.pod, u.container, u.gpu.uuid, u.gpu.model]


def _accelerator(u: ContainerUsage) -> list[str]:
    return [*_container(u), "nvidia", u.gpu.model, u.gpu.uuid]


def _workload(u: ContainerUsage | Holding) -> list[str]:
    return [u.workload_kind, u.workload]


def _alone_on_whole_gpus(latest: LatestSweep) -> set[str]:
    """GPUs (not MIG instances) that one container uses and no host process does."""
    users: dict[str, int] = {}
    for u in latest.containers:
        if not u.gpu.parent_uuid:
            users[u.gpu.uuid] = users.get(u.gpu.uuid, 0) + 1
    shared = {row.gpu.uuid for row in latest.outside if row.pid}
    return {uuid for uuid, count in users.items() if count == 1 and uuid not in shared}


class UsageCollector:
    def __init__(self) -> None:
        self.latest = LatestSweep()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the sweep; described at collection

    def collect(self) -> Iterator[Metric]:
        latest = self.latest  # one sweep's, though the next may replace it meanwhile
        out = {family: family.empty() for family in FAMILIES}
        alone = _alone_on_whole_gpus(latest)
        for u in latest.containers:
            labels, accelerator, workload = _container(u), _accelerator(u), _workload(u)
            pool = "true" if u.preallocated else "false"
            if u.used_bytes is not None:
                out[MEMORY_USED].add_metric([*accelerator, pool, *workload], u.used_bytes)
            out[MEMORY_TOTAL].add_metric(accelerator, u.gpu.memory_total)
            if u.peak_bytes is not None:
                out[PEAK].add_metric([*labels, pool, *workload], u.peak_bytes)
            if u.sm_percent is not None:
                out[DUTY].add_metric([*accelerator, *workload], u.sm_percent)
            if u.busy_seconds is not None:
                out[BUSY].add_metric([*accelerator, *workload], u.busy_seconds)
            if u.gpu_busy is not None and u.gpu.uuid in alone:
                out[KUBELET_DUTY].add_metric([*accelerator, *workload], u.gpu_busy)
            if u.share_bytes is not None:
                out[SHARE].add_metric([*labels, *workload], u.share_bytes)
        for h in latest.holdings:
            out[HELD].add_metric([h.namespace, h.pod, h.container, *_workload(h)], h.gpus)
        for u, excess in latest.over_share:
            out[OVER_SHARE].add_metric([*_container(u), *_workload(u)], excess)
        sums: dict[tuple[str, str, str], int] = {}
        for row in latest.outside:
            key = (row.gpu.uuid, row.gpu.model, row.command)
            sums[key] = sums.get(key, 0) + (row.used_bytes or 0)
        for key, value in sums.items():
            out[OUTSIDE_PODS].add_metric(list(key), value)
        for uuid, model, total_bytes in latest.gpus:
            out[GPU_TOTAL].add_metric([uuid, model], total_bytes)
            if (busy := latest.gpu_busy.get(uuid)) is not None:
                out[GPU_DUTY].add_metric([uuid, model], busy)
        for gpu, fault in latest.faults.items():
            out[GPU_FAULT].add_metric([gpu, fault.reason, fault.figure], 1)
        yield from out.values()


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
            "GPU processes on this node at the last sweep, by place: pod, host, or unnamed (in "
            "a container the agent's last pod listing does not name yet; its series wait for "
            "the next listing).",
            ["place"],
        )
        self.garbage_samples = metrics.counter(
            "gpu_usage_nvml_garbage_samples_total",
            "Utilization samples NVML gave that were no percentage (above 100: 2147483632 has "
            "been seen), dropped rather than clamped.",
        )
        self.over_share_events = metrics.counter(
            "gpu_usage_over_share_events_total",
            "GPUMemoryOverShare Events the agent wrote (or failed to, by result).",
            ["result"],
        )
