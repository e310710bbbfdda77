"""How late the event loop runs what is due: a timer set every INTERVAL_SECONDS, and how late it
fires. A review that arrives while the loop is held (a garbage-collection pass, a burst of other
reviews, a slow policy) waits that long before its handler starts, and the API server counts the
wait in its webhook latency; this is the one place the service sees it.

`gpu_admission_event_loop_lag_seconds` (histogram): each timer's lateness. Ten wake-ups a second
cost the loop a few microseconds each.
"""

from __future__ import annotations

import asyncio
import contextlib

from gpu_admission.process.metrics import Metrics

INTERVAL_SECONDS = 0.1
LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class LoopLag:
    """`start()` on the loop to watch; `stop()` when it ends."""

    def __init__(self, metrics: Metrics, interval: float = INTERVAL_SECONDS) -> None:
        self.lag = metrics.histogram(
            "event_loop_lag_seconds",
            "How late the event loop ran a timer due every 0.1 s: what a request arriving then "
            "waited before its handler could start",
            buckets=LAG_BUCKETS,
        )
        self.interval = interval
        self.observed = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-loop-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self.lag.observe(max(0.0, loop.time() - due))
            self.observed += 1
