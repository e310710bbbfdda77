"""The node agent's sweep: NVML, then /proc, then the node's pods, then what follows from them
(the per-container view, the metrics, the over-share Events).

A sweep runs on a worker thread (NVML and /proc block); the loop runs one every `interval`
seconds. What the metrics show is always the last sweep's, never older: a sweep that fails, or
that has not returned when the next is due (an NVML call that hangs: a GPU fallen off the bus),
takes the per-container series away at once and says why in readiness; one that has not
returned within `hang_seconds` fails liveness too, so the kubelet restarts the agent (a hung
call is not undone in-process). Without NVML the agent says why once (and again when the reason
changes) and tries again each interval (a driver whose kernel module and library disagree from
the start: on a slow back-off): a node whose driver is being installed comes right without a
restart. A driver other than the one whose library this process loaded (an upgrade) ends the
process (`DriverChanged`): only a new one reads it.

The API server's troubles are not the sweep's: the node's pods are listed and Events written on
tasks of their own, beside the sweeps, which read the last listing; NodePods says a failed
listing or Event, and a stalled one holds nothing but itself.

NVML is held between sweeps, and let go while the GPU Operator's driver manager takes the
driver off the node (gpu_usage/driver_pause.py, watched on its own thread): no sweep starts
then, NVML is shut down, and readiness says why until the manager is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from gpu_usage.attribution import UsageRow, attribute
from gpu_usage.busy_time import BusyTime
from gpu_usage.containers import ContainerUsage, Peaks, by_container
from gpu_usage.driver_pause import DriverPause
from gpu_usage.host_processes import ProcessTable
from gpu_usage.node_pods import NodePods
from gpu_usage.nvml_faults import ALL, DriverChanged, Fault, NvmlUnavailable
from gpu_usage.nvml_reader import Gpu, NvmlReader
from gpu_usage.over_share import OverShare, OverShareWatch
from gpu_usage.usage_metrics import AgentMetrics, LatestSweep

log = logging.getLogger("gpu_admission.gpu_usage")

OVER_SHARE_REASON = "GPUMemoryOverShare"
MIN_HANG_SECONDS = 30.0  # the slowest sweep seen is far under a second; a hang is not that
MIN_STALE_SECONDS = 1.0


@dataclass
class SweepResult:
    gpus: list[Gpu]
    rows: list[UsageRow]
    containers: list[ContainerUsage]
    over_share: list[OverShare] = field(default_factory=list)  # new since the last sweep
    over_now: list[tuple[ContainerUsage, int]] = field(default_factory=list)  # and by how much
    seconds: dict[str, float] = field(default_factory=dict)  # nvml, proc, rest
    faults: dict[str, Fault] = field(default_factory=dict)  # GPUs not read this sweep, and why
    gpu_busy: dict[str, float] = field(default_factory=dict)  # GPU UUID -> its own percent busy
    garbage_samples: int = 0  # utilization samples NVML gave that were no percentage


class Agent:
    def __init__(
        self,
        reader: NvmlReader,
        processes: ProcessTable,
        pods: NodePods | None,
        metrics: AgentMetrics | None = None,
        instance: str = "",
        watch: OverShareWatch | None = None,
        pause: DriverPause | None = None,
    ) -> None:
        self.reader, self.processes, self.pods = reader, processes, pods
        self.pause = pause
        self.metrics = metrics
        self.instance = instance
        self.peaks = Peaks()
        self.busy_time = BusyTime()
        self.watch = watch or OverShareWatch()
        self.unavailable = "not swept yet"
        self.min_hang_seconds = MIN_HANG_SECONDS
        self.hang_seconds = MIN_HANG_SECONDS
        self._sweep_started: float | None = None  # the running sweep's start, if one runs
        self._faults: dict[str, Fault] = {}
        self.unknown_containers = False  # the last sweep met a container the listing lacks

    def sweep(self, list_pods: bool = True) -> SweepResult:
        """One sweep (blocking); raises NvmlUnavailable when NVML cannot be read. `list_pods`:
        list the node's pods here when due (`--once`); the loop lists them on a task of its own,
        and the sweep reads the last listing."""
        started = time.perf_counter()
        reading = self.reader.sweep()
        proc_started = time.perf_counter()
        hosts = {p.pid: self.processes.lookup(p.pid) for p in reading.processes}
        self.processes.keep_only(set(hosts))
        proc_seconds = time.perf_counter() - proc_started
        index = running = None
        if self.pods is not None:
            # A container the last listing does not name: started since, or its status lagged.
            known = self.pods.index.container_ids
            self.unknown_containers = any(
                h.container is not None and h.container.container_id not in known
                for h in hosts.values()
            )
            self.pods.know_gpus(g.model for g in reading.gpus)
            if list_pods:
                self.pods.refresh(self.unknown_containers)
            index = self.pods.index
            if not self.pods.error:
                running = index.container_ids
        rows = attribute(reading, hosts, index)
        # While the listing works, a container it does not name yet (started since) waits
        # for the next one (at most REFRESH_SECONDS) rather than appear under its IDs first.
        shown = [r for r in rows if r.named or running is None]
        containers = self.peaks.update(by_container(shown, reading.gpu_busy), running)
        containers = self.busy_time.update(containers, started, running)
        over = self.watch.update(containers, running)
        total = time.perf_counter() - started
        seconds = {
            "nvml": reading.nvml_seconds,
            "proc": proc_seconds,
            "rest": max(0.0, total - reading.nvml_seconds - proc_seconds),
        }
        return SweepResult(
            reading.gpus,
            rows,
            containers,
            over,
            self.watch.current,
            seconds,
            dict(reading.faults),
            dict(reading.gpu_busy),
            reading.garbage_samples,
        )

    def record(self, result: SweepResult, write_events: bool = True) -> None:
        """The sweep into the metrics, and its over-share findings into Events (the loop writes
        them on a task of its own: `write_events` False)."""
        self._say_faults(result.faults)
        if self.metrics is not None:
            self.metrics.usage.latest = LatestSweep(
                result.containers,
                [r for r in result.rows if not r.in_pod],
                [(g.uuid, g.model, g.memory_total) for g in result.gpus],
                self.pods.index.holdings if self.pods is not None else [],
                result.over_now,
                result.faults,
                result.gpu_busy,
            )
            self.metrics.nvml_up.set(1)
            if result.garbage_samples:
                self.metrics.garbage_samples.inc(result.garbage_samples)
            for part, value in result.seconds.items():
                self.metrics.sweep_seconds.labels(part).observe(value)
            in_pods = unnamed = outside = 0
            for r in result.rows:
                if r.named:
                    in_pods += 1
                elif r.in_pod:
                    unnamed += 1
                elif r.pid:
                    outside += 1
            self.metrics.processes.labels("pod").set(in_pods)
            self.metrics.processes.labels("unnamed").set(unnamed)
            self.metrics.processes.labels("host").set(outside)
        for finding in result.over_share:
            u = finding.usage
            log.warning("%s/%s: %s", u.namespace, u.pod, finding.message())
            if write_events:
                self.write_event(finding)

    def write_event(self, finding: OverShare) -> None:
        """The finding's Warning Event on its pod (blocking: the API server's time)."""
        u = finding.usage
        written = self.pods is not None and self.pods.event(
            (u.namespace, u.pod),
            OVER_SHARE_REASON,
            finding.message(),
            self.instance,
            name=finding.event_name(),
        )
        if self.metrics is not None:
            self.metrics.over_share_events.labels("written" if written else "failed").inc()

    def _say_faults(self, faults: dict[str, Fault]) -> None:
        for gpu, fault in faults.items():
            if self._faults.get(gpu) != fault:
                what = "not read" if fault.figure == ALL else f"{fault.figure} not read"
                log.error("%s: %s this sweep: %s", gpu, what, fault.message)
        for gpu in self._faults.keys() - faults.keys():
            log.info("%s: read again", gpu)
        self._faults = dict(faults)

    def forget(self, why: str) -> None:
        """Nothing of an older sweep is shown: the per-container series go at once."""
        if why != self.unavailable:
            log.error("%s", why)
        self.unavailable = why
        if self.metrics is not None:
            self.metrics.usage.latest = LatestSweep()
            self.metrics.nvml_up.set(0)

    def _paused(self) -> str | None:
        return self.pause.paused if self.pause is not None else None

    def readiness(self) -> list[str]:
        return [f"nvml: {self.unavailable}"] if self.unavailable else []

    def liveness(self) -> list[str]:
        """Failing once no sweep has returned for `hang_seconds`: a hung NVML call is not
        undone in-process, the kubelet's restart does."""
        started = self._sweep_started
        running = 0.0 if started is None else time.monotonic() - started
        if running > self.hang_seconds:
            return [f"a sweep has run for {running:.0f} s without returning (an NVML call hangs)"]
        return []

    async def run(self, interval: float, stop: asyncio.Event) -> None:
        """Sweep until `stop`; raises DriverChanged when the process must end. The node's pods
        are listed, and Events written, on tasks of their own: an API server that stalls or
        drops connections holds neither the sweeps nor their series."""
        listing_due = asyncio.Event()
        events: asyncio.Queue[OverShare] = asyncio.Queue()
        helpers = [
            asyncio.create_task(self._list_pods(listing_due), name="gpu-usage-pods"),
            asyncio.create_task(self._write_events(events), name="gpu-usage-events"),
        ]
        try:
            await self._sweeps(interval, stop, listing_due, events)
        finally:
            for helper in helpers:
                helper.cancel()  # a call in flight finishes on its thread, unawaited
            await asyncio.gather(*helpers, return_exceptions=True)

    async def _list_pods(self, due: asyncio.Event) -> None:
        if self.pods is None:
            return
        while True:
            await due.wait()
            due.clear()
            try:
                # NodePods says its own failures; REFRESH/MAX_AGE decide whether it lists now.
                await asyncio.to_thread(self.pods.refresh, self.unknown_containers)
            except Exception:  # a defect: said, and the next sweep asks again
                log.exception("listing the node's pods failed")

    async def _write_events(self, events: asyncio.Queue[OverShare]) -> None:
        while True:
            finding = await events.get()
            try:
                await asyncio.to_thread(self.write_event, finding)
            except Exception:  # a defect: said, and the next finding is written
                log.exception("writing an Event failed")

    async def _sweeps(
        self,
        interval: float,
        stop: asyncio.Event,
        listing_due: asyncio.Event,
        events: asyncio.Queue[OverShare],
    ) -> None:
        self.hang_seconds = max(self.min_hang_seconds, 6 * interval)
        # A sweep takes milliseconds: one not back when the next is due serves nothing stale.
        stale_after = max(MIN_STALE_SECONDS, interval)
        pending: asyncio.Future[SweepResult] | None = None
        while not stop.is_set():
            if pending is None and (paused := self._paused()):
                await asyncio.to_thread(self.reader.stop)  # the driver's module may now unload
                self.forget(
                    f"NVML released: the GPU Operator's driver manager is taking the driver off "
                    f"this node ({paused}); sweeping again once it is done"
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
                continue
            if pending is None:  # a hung sweep's thread is not started over
                pending = asyncio.ensure_future(asyncio.to_thread(self.sweep, False))
                self._sweep_started = time.monotonic()
            try:
                result = await asyncio.wait_for(asyncio.shield(pending), stale_after)
            except TimeoutError:
                self.forget(
                    f"a sweep has not returned in {stale_after:g} s: an NVML call hangs (a GPU "
                    "fallen off the bus?); `nvidia-smi` on the node says more"
                )
                continue  # the same sweep, waited for again; liveness fails after hang_seconds
            except DriverChanged:
                self.forget("the NVIDIA driver changed")
                raise
            except NvmlUnavailable as error:
                self.forget(str(error))
            except Exception as error:  # a defect: said with its traceback, the loop goes on
                log.exception("sweep failed")
                self.forget(f"the last sweep failed: {error!r} (the log has the traceback)")
            else:
                if self.unavailable:
                    log.info("NVML answers: sweeping every %g s", interval)
                self.unavailable = ""
                listing_due.set()
                try:
                    self.record(result, write_events=False)
                except Exception:  # a defect, as in a sweep: said, and the loop goes on
                    log.exception("recording the sweep failed")
                for finding in result.over_share:
                    events.put_nowait(finding)
            finally:
                if pending is not None and pending.done():
                    pending, self._sweep_started = None, None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
