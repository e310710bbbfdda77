"""The stall watchdog: a load whose source stops sending is ended after
`dataset.stall_timeout_seconds` (default 10 minutes), not at the Job's deadline hours later.

Progress is read from rclone's stats (one per tick, `--stats`): any change in bytes copied, files
checked or transferred, or directory entries listed counts. So a long listing of a big bucket,
or a slow but moving transfer, never trips it; only silence does. rclone's own `--timeout` (an
idle connection, 5 minutes) makes it retry the transfer, which a stalled source answers with
more silence: the watchdog counts across those retries.

A stall is transient: the Job retries (within its backoffLimit), and what was copied stays on
the volume, so the retry fetches only what is missing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpu_admission.datasets.progress import human_bytes, human_duration

PROGRESS_KEYS = ("bytes", "checks", "transfers", "listed", "deletes", "renames")


def progress_marker(stats: Mapping[str, Any]) -> tuple[int, ...]:
    """What changes while rclone makes progress of any kind."""
    marker = []
    for key in PROGRESS_KEYS:
        value = stats.get(key)
        marker.append(int(value) if isinstance(value, int | float) else 0)
    return tuple(marker)


def stall_message(seconds: float, stats: Mapping[str, Any]) -> str:
    done = int(stats.get("bytes") or 0)
    total = int(stats.get("totalBytes") or 0)
    copied = human_bytes(done) + (f" of {human_bytes(total)}" if total > done else "")
    return (
        f"the source stopped sending: no data for {human_duration(int(seconds))}; {copied} "
        "copied (kept on the volume: the retry fetches only what is missing)"
    )


class StallWatchdog:
    """Calls `stop` once the stats `read_stats` returns show no progress for `seconds`."""

    def __init__(
        self,
        seconds: float,
        read_stats: Callable[[], Mapping[str, Any]],
        stop: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self._read = read_stats
        self._stop_load = stop
        self._clock = clock
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
        self.stalled: str | None = None  # the message, once it fired

    def __enter__(self) -> StallWatchdog:
        if self.seconds > 0:
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def check(self, marker: tuple[int, ...], since: float) -> tuple[tuple[int, ...], float]:
        """One look: (the marker, when it last changed); fires when it has not for too long."""
        stats = self._read()
        now, current = self._clock(), progress_marker(stats)
        if current != marker:
            return current, now
        if now - since >= self.seconds and self.stalled is None:
            self.stalled = stall_message(now - since, stats)
            self._stop_load()
        return marker, since

    def _watch(self) -> None:
        marker, since = progress_marker(self._read()), self._clock()
        interval = min(1.0, self.seconds / 10)
        while not self._done.wait(interval) and self.stalled is None:
            marker, since = self.check(marker, since)
