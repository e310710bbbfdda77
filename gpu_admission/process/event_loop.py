"""The event loop the dataset controller runs on: uvloop's (libuv, with its transports and TLS
in Cython) in place of asyncio's own, whose selector loop, socket transports and TLS layer are
Python.

The controller spends most of its CPU on its event loop's thread: three API writes per dataset
PVC, their tasks, and the reconciles between them. `python -m bench.controller burst --pvcs
500`, the same code on each loop, one round each in turn, eight pairs (2-core machine): 1.88 ms
of CPU per PVC on uvloop (1.72 - 2.50) against 2.28 ms on asyncio's loop (1.98 - 2.40), lower
in 7 of the 8 pairs. A single write alone (`python -m bench.write_cost`) shows no difference
the noise lets through: the saving is in the loop's own work over many tasks and sockets at
once, which a burst has and one request at a time does not.

uvloop implements asyncio's event loop interface, so the code above it does not change: threads
hand work in with `call_soon_threadsafe`, blocking calls go out with `run_in_executor`, signals
arrive through `add_signal_handler`. It costs the process about 2 MiB of resident memory.
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
