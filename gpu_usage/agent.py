"""The node agent's sweep: NVML, then /proc, then the node's pods, then what follows from them
(the per-container view, the metrics, the over-share Events).

A sweep runs on a worker thread (NVML and /proc block); the loop runs one every `interval`
seconds. Without NVML the agent says why once (and again when the reason changes), answers
not ready with it, and tries again each interval: a node whose driver is being installed or
reloaded comes right without a restart, and the pod never crash-loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from gpu_usage.attribution import UsageRow, attribute
from gpu_usage.containers import ContainerUsage, Peaks, by_container
from gpu_usage.host_processes import ProcessTable
from gpu_usage.node_pods import NodePods
from gpu_usage.nvml_reader import Gpu, NvmlReader, NvmlUnavailable
from gpu_usage.over_share import OverShare, OverShareWatch
from gpu_usage.usage_metrics import AgentMetrics, LatestSweep

log = logging.getLogger("gpu_admission.gpu_usage")

OVER_SHARE_REASON = "GPUMemoryOverShare"


@dataclass
class SweepResult:
    gpus: list[Gpu]
    rows: list[UsageRow]
    containers: list[ContainerUsage]
    over_share: list[OverShare] = field(default_factory=list)  # new since the last sweep
    over_now: list[tuple[ContainerUsage, int]] = field(default_factory=list)  # and by how much
    seconds: dict[str, float] = field(default_factory=dict)  # nvml, proc, rest


class Agent:
    def __init__(
        self,
        reader: NvmlReader,
        processes: ProcessTable,
        pods: NodePods | None,
        metrics: AgentMetrics | None = None,
        instance: str = "",
    ) -> None:
        self.reader, self.processes, self.pods = reader, processes, pods
        self.metrics = metrics
        self.instance = instance
        self.peaks = Peaks()
        self.watch = OverShareWatch()
        self.unavailable = "not swept yet"

    def sweep(self) -> SweepResult:
        """One sweep (blocking); raises NvmlUnavailable when NVML cannot be read."""
        started = time.perf_counter()
        reading = self.reader.sweep()
        proc_started = time.perf_counter()
        hosts = {p.pid: self.processes.lookup(p.pid) for p in reading.processes}
        self.processes.keep_only(set(hosts))
        proc_seconds = time.perf_counter() - proc_started
        index = running = None
        if self.pods is not None:
            # A container the last listing does not name: started since, or its status lagged.
            unknown = any(
                h.container is not None
                and h.container.container_id not in self.pods.index.container_ids
                for h in hosts.values()
            )
            self.pods.refresh(unknown)
            index = self.pods.index
            if not self.pods.error:
                running = index.container_ids
        rows = attribute(reading, hosts, index)
        containers = self.peaks.update(by_container(rows), running)
        over = self.watch.update(containers)
        total = time.perf_counter() - started
        seconds = {
            "nvml": reading.nvml_seconds,
            "proc": proc_seconds,
            "rest": max(0.0, total - reading.nvml_seconds - proc_seconds),
        }
        return SweepResult(reading.gpus, rows, containers, over, self.watch.current, seconds)

    def record(self, result: SweepResult) -> None:
        """The sweep into the metrics, and its over-share findings into Events."""
        if self.metrics is not None:
            self.metrics.usage.latest = LatestSweep(
                result.containers,
                [r for r in result.rows if not r.in_pod],
                [(g.uuid, g.model, g.memory_total) for g in result.gpus],
                self.pods.index.holdings if self.pods is not None else [],
                result.over_now,
            )
            self.metrics.nvml_up.set(1)
            for part, value in result.seconds.items():
                self.metrics.sweep_seconds.labels(part).observe(value)
            in_pods = sum(1 for r in result.rows if r.in_pod)
            outside = sum(1 for r in result.rows if not r.in_pod and r.pid)
            self.metrics.processes.labels("pod").set(in_pods)
            self.metrics.processes.labels("host").set(outside)
        for finding in result.over_share:
            u = finding.usage
            log.warning("%s/%s: %s", u.namespace, u.pod, finding.message())
            written = self.pods is not None and self.pods.event(
                (u.namespace, u.pod), OVER_SHARE_REASON, finding.message(), self.instance
            )
            if self.metrics is not None:
                self.metrics.over_share_events.labels("written" if written else "failed").inc()

    def readiness(self) -> list[str]:
        return [f"nvml: {self.unavailable}"] if self.unavailable else []

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                result = await asyncio.to_thread(self.sweep)
            except NvmlUnavailable as error:
                if str(error) != self.unavailable:
                    log.error("%s", error)
                self.unavailable = str(error)
                if self.metrics is not None:
                    self.metrics.nvml_up.set(0)
            except Exception as error:  # a defect: said with its traceback, the loop goes on
                log.exception("sweep failed")
                self.unavailable = f"the last sweep failed: {error!r} (the log has the traceback)"
            else:
                if self.unavailable:
                    log.info("NVML answers: sweeping every %g s", interval)
                self.unavailable = ""
                await asyncio.to_thread(self.record, result)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
