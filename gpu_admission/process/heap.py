"""Keeping the cyclic garbage collector's full passes off the request path.

A full (generation 2) collection walks every object the collector tracks: after the imports
alone (the kubernetes client's models, pydantic, aiohttp) about 150,000 of them, some 50 ms on
one core, and far more on a busy one. It runs whenever enough objects have survived the younger
collections, as they do while informers fill their caches, and every admission request in
flight waits for it. `gc.freeze()` moves the objects that exist into a permanent generation that
collections skip (Python's `gc` documentation). Frozen objects are still freed by reference
counting; only cycles among them are never collected, so freezing is done where what exists will
live as long as the process: once start-up is done, and once the caches have their first list.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def freeze_long_lived(stage: str) -> None:
    """Collect the garbage made so far, then freeze what is left for the collector to skip."""
    began = time.perf_counter()
    gc.collect()  # garbage cycles from start-up must not be frozen in for good
    gc.freeze()
    log.debug(
        "froze the long-lived heap",
        extra={
            "stage": stage,
            "frozen_objects": gc.get_freeze_count(),
            "milliseconds": round(1000 * (time.perf_counter() - began), 1),
        },
    )
