"""The event loop the dataset controller runs on: uvloop's (libuv, with its transports and TLS
in Cython) in place of asyncio's own, whose selector loop, socket transports and TLS layer are
Python.

The controller's CPU goes mostly to its API writes (three per dataset PVC). In a profile of a
burst (py-spy, 500 PVCs) the loop's socket transport and TLS layer took over two fifths of the
writes' share, the HTTP client the rest. `python -m bench.write_cost` (the controller's writer
posting 1,000 Events to a real kube-apiserver, 8 at once, 5 rounds): 307 us of CPU per request
on asyncio's loop, 250 us on uvloop's, 158 us for bare HTTP/1.1 over a blocking TLS socket.

uvloop implements asyncio's event loop interface, so the code above it does not change: threads
hand work in with `call_soon_threadsafe`, blocking calls go out with `run_in_executor`, signals
arrive through `add_signal_handler`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on a uvloop event loop: the same start, cancellation of what is
    left, and shutdown of async generators and the default executor."""
    return uvloop.run(main)
