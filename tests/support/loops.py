"""Event loops on threads of their own, for servers the synchronous tests talk to."""

from __future__ import annotations

import asyncio


def run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """A thread's target: run `loop` until something stops it, then close it cleanly."""
    asyncio.set_event_loop(loop)
    loop.run_forever()
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
