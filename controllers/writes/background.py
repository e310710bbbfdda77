"""Writes sent beside the work that made them: each in a task of its own, at most `limit` in
flight at once (so a burst of them never crowds out the writes that are waited for), kept until
it ends, so that a stop can wait for them a bounded while, or cancel them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class BackgroundWrites:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._turns: asyncio.Semaphore | None = None  # made on the loop that sends
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self, write: Callable[[], Awaitable[None]], name: str | None = None
    ) -> asyncio.Task[None]:
        """`write()` in a task, once a turn is free; it handles its own failures."""
        task = asyncio.create_task(self._take_turn(write), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _take_turn(self, write: Callable[[], Awaitable[None]]) -> None:
        if self._turns is None:
            self._turns = asyncio.Semaphore(self._limit)
        async with self._turns:
            await write()

    async def drain(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, for the writes still going."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    def cancel(self) -> None:
        for task in set(self._tasks):
            task.cancel()
