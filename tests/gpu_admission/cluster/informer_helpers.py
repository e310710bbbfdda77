"""Test helpers for informers: an event recorder that waits on a condition (never sleeps)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpu_admission.cluster.informer import Backoff, EventType

# Quick retries so reconnect tests stay fast; the behaviour is the same as the default backoff.
FAST_BACKOFF = Backoff(initial=0.02, maximum=0.2, jitter=0.1)
WAIT = 10.0  # generous upper bound for every wait; tests finish far sooner


class EventRecorder:
    """An informer handler that records (type, old, new) and lets tests wait for events."""

    def __init__(self) -> None:
        self.events: list[tuple[EventType, Any, Any]] = []
        self._cond = threading.Condition()

    def __call__(self, kind: EventType, old: Any, new: Any) -> None:
        with self._cond:
            self.events.append((kind, old, new))
            self._cond.notify_all()

    def wait_for(
        self, predicate: Callable[[list[tuple[EventType, Any, Any]]], bool], timeout: float = WAIT
    ) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.events), timeout), self.events

    def wait_event(self, kind: EventType, match: Callable[[Any], bool]) -> None:
        def seen(events: list[tuple[EventType, Any, Any]]) -> bool:
            return any(
                k == kind and match(new if new is not None else old) for k, old, new in events
            )

        self.wait_for(seen)


def eventually(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Wait for state that raises no event (e.g. a bookmark's resourceVersion), bounded."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)
