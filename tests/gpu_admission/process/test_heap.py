"""Freezing the long-lived heap: start-up's garbage is collected first, the rest is frozen."""

from __future__ import annotations

import gc
import weakref

from gpu_admission.process.heap import freeze_long_lived


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_garbage_is_collected_and_what_lives_is_frozen() -> None:
    gc.unfreeze()
    try:
        cycle_a, cycle_b = Node(), Node()
        cycle_a.other, cycle_b.other = cycle_b, cycle_a
        gone = weakref.ref(cycle_a)
        del cycle_a, cycle_b  # garbage only the cyclic collector can free
        kept = [Node() for _ in range(1000)]
        freeze_long_lived("test")
        assert gone() is None, "a garbage cycle was frozen in"
        assert gc.get_freeze_count() >= len(kept)
        assert all(not gc.is_finalized(k) for k in kept)
    finally:
        gc.unfreeze()
