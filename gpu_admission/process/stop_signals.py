"""Waiting for SIGTERM or SIGINT: how the long-running commands are asked to stop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals() -> Iterator[asyncio.Future[str]]:
    """A future that gets the first stop signal's name while the block runs; a second signal
    while stopping changes nothing. Must be entered with the event loop running."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[str] = loop.create_future()

    def on_signal(sig: signal.Signals) -> None:
        if not received.done():
            received.set_result(sig.name)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield received
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
