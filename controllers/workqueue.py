"""A de-duplicating, rate-limited work queue for asyncio, with client-go's workqueue semantics.

- A key added several times before a worker takes it is processed once (dirty set).
- A key being processed is never handed to a second worker; if it is added meanwhile, it is
  queued again when the worker calls `done()`, so the latest state is always reconciled.
- `add_rate_limited` re-adds after a per-key exponential backoff (base * 2^failures, capped);
  `forget` resets the key's failure count after a success.
- `add_after` re-adds after a delay (e.g. "check again when capacity frees up").
- With a `shard` function (a key's namespace, say), keys are handed out round-robin across
  shards: a shard with hundreds of keys (retrying, or a burst) delays another shard's key by at
  most one of its own, never by all of them.

Producers on other threads (informer handlers) use `add_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Hashable


class ShutDown(Exception):
    """The queue was shut down; workers should exit."""


def _one_shard(key: Hashable) -> Hashable:
    return None


class RateLimitedQueue:
    def __init__(
        self,
        base_delay: float = 0.005,
        max_delay: float = 300.0,
        shard: Callable[[Hashable], Hashable] = _one_shard,
    ) -> None:
        self._base = base_delay
        self._max = max_delay
        self._shard = shard
        self._shards: dict[Hashable, deque[Hashable]] = {}  # shard -> its waiting keys
        self._turns: deque[Hashable] = deque()  # shards with waiting keys, in serving order
        self._size = 0
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._getters: deque[asyncio.Future[None]] = deque()  # workers waiting for a key
        self._loop = asyncio.get_running_loop()
        self._shutting_down = False
        # Keys from other threads, handed to the loop in batches: one wake-up of the loop for
        # all the keys that came while it was busy, not one per key.
        self._inbox: list[Hashable] = []
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False

    # -- adding ---------------------------------------------------------------------------

    def add(self, key: Hashable) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # re-queued by done()
        self._enqueue(key)

    def _enqueue(self, key: Hashable) -> None:
        shard = self._shard(key)
        waiting = self._shards.get(shard)
        if waiting is None:
            waiting = self._shards[shard] = deque()
            self._turns.append(shard)
        waiting.append(key)
        self._size += 1
        self._wake_one()

    def _dequeue(self) -> Hashable:
        shard = self._turns.popleft()
        waiting = self._shards[shard]
        key = waiting.popleft()
        if waiting:
            self._turns.append(shard)  # its next key waits for the other shards' turns
        else:
            del self._shards[shard]
        self._size -= 1
        return key

    def add_threadsafe(self, key: Hashable) -> None:
        with self._inbox_lock:
            self._inbox.append(key)
            if self._inbox_scheduled:
                return
            self._inbox_scheduled = True
        self._loop.call_soon_threadsafe(self._take_inbox)

    def _take_inbox(self) -> None:
        with self._inbox_lock:
            keys, self._inbox = self._inbox, []
            self._inbox_scheduled = False
        for key in keys:
            self.add(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        existing = self._timers.get(key)
        due = self._loop.time() + delay
        if existing is not None:
            if existing.when() <= due:
                return  # an earlier retry is already scheduled
            existing.cancel()
        self._timers[key] = self._loop.call_at(due, self._fire, key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def when(self, key: Hashable) -> float:
        """The backoff the next `add_rate_limited(key)` will use (and count)."""
        failures = self._failures.get(key, 0)
        return min(self._max, self._base * (2**failures))

    def add_rate_limited(self, key: Hashable) -> None:
        delay = self.when(key)
        self._failures[key] = self._failures.get(key, 0) + 1
        self.add_after(key, delay)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    # -- taking -----------------------------------------------------------------------------

    def _wake_one(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    async def get(self) -> Hashable:
        """Wait for the next key; raise ShutDown once the queue is shut down and drained."""
        while not self._size:
            if self._shutting_down:
                raise ShutDown
            getter = self._loop.create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                # Woken and cancelled at once: the key it was woken for goes to another worker.
                if getter.done() and not getter.cancelled() and self._size:
                    self._wake_one()
                raise
        key = self._dequeue()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._enqueue(key)

    # -- state ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys waiting to be processed (not those being processed or waiting on a timer)."""
        return self._size

    @property
    def waiting_on_timers(self) -> int:
        return len(self._timers)

    def pending(self, key: Hashable) -> bool:
        """Whether `key` is waiting, being processed, or due again on a timer (a retry): False
        once it has been handled for good."""
        return key in self._dirty or key in self._processing or key in self._timers

    async def shutdown(self) -> None:
        """Stop accepting keys; workers blocked in `get()` see ShutDown once it is empty."""
        self._shutting_down = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._shards.clear()
        self._turns.clear()
        self._size = 0
        self._dirty.clear()
        while self._getters:  # every waiting worker: each sees ShutDown
            self._wake_one()
