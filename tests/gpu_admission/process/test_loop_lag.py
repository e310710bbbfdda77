"""The event loop's lag: a loop held for 80 ms shows as a timer that fired at least 70 ms late."""

from __future__ import annotations

import asyncio
import time

from gpu_admission.process.loop_lag import LoopLag
from gpu_admission.process.metrics import Metrics

NAME = "gpu_admission_event_loop_lag_seconds"


async def _observed(monitor: LoopLag, count: int) -> None:
    async def reached() -> None:
        while monitor.observed < count:
            await asyncio.sleep(monitor.interval)  # the monitor's own tick: the condition

    await asyncio.wait_for(reached(), 10)


async def test_a_held_loop_is_seen_as_lag() -> None:
    metrics = Metrics(process_metrics=False)
    monitor = LoopLag(metrics, interval=0.01)
    await monitor.start()
    try:
        await _observed(monitor, 3)
        time.sleep(0.08)  # the loop held, as a long GC pass or a slow handler holds it
        seen = monitor.observed
        await _observed(monitor, seen + 2)
        late = metrics.registry.get_sample_value(f"{NAME}_count") or 0.0
        within = metrics.registry.get_sample_value(f"{NAME}_bucket", {"le": "0.05"}) or 0.0
        assert late - within >= 1, (late, within)
        assert (metrics.registry.get_sample_value(f"{NAME}_sum") or 0.0) >= 0.07
    finally:
        await monitor.stop()
