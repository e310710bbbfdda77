"""The work queue: de-duplication, re-processing after done(), per-key backoff, shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest

from controllers.workqueue import RateLimitedQueue, ShutDown

TIMEOUT = 2.0


async def take(queue: RateLimitedQueue) -> object:
    return await asyncio.wait_for(queue.get(), TIMEOUT)


async def test_duplicates_are_processed_once() -> None:
    queue = RateLimitedQueue()
    for key in ["a", "b", "a", "a"]:
        queue.add(key)
    assert len(queue) == 2
    assert await take(queue) == "a"
    assert await take(queue) == "b"
    assert len(queue) == 0


async def test_key_added_while_processing_is_processed_again_after_done() -> None:
    queue = RateLimitedQueue()
    queue.add("a")
    key = await take(queue)
    queue.add("a")  # the object changed while a worker reconciled it
    assert len(queue) == 0, "never handed to a second worker at the same time"
    queue.done(key)
    assert len(queue) == 1
    assert await take(queue) == "a"


async def test_done_without_new_add_does_not_requeue() -> None:
    queue = RateLimitedQueue()
    queue.add("a")
    queue.done(await take(queue))
    assert len(queue) == 0


async def test_rate_limited_backoff_grows_per_key_and_forget_resets() -> None:
    queue = RateLimitedQueue(base_delay=0.01, max_delay=0.04)
    assert [queue.when("a") for _ in range(1)] == [0.01]
    delays = []
    for _ in range(4):
        delays.append(queue.when("a"))
        queue.add_rate_limited("a")
        queue.done(await take(queue))
    assert delays == [0.01, 0.02, 0.04, 0.04]
    assert queue.when("b") == 0.01, "backoff is per key"
    queue.forget("a")
    assert queue.failures("a") == 0 and queue.when("a") == 0.01


async def test_add_after_waits_on_a_timer_and_keeps_the_earliest() -> None:
    queue = RateLimitedQueue()
    queue.add_after("a", 60)
    queue.add_after("a", 0.01)
    assert len(queue) == 0 and queue.waiting_on_timers == 1
    assert await take(queue) == "a"
    assert queue.waiting_on_timers == 0


async def test_add_threadsafe_from_another_thread() -> None:
    queue = RateLimitedQueue()
    await asyncio.to_thread(queue.add_threadsafe, "from-thread")
    assert await take(queue) == "from-thread"


async def test_keys_from_another_thread_arrive_in_order_with_one_wake_up_per_batch() -> None:
    queue = RateLimitedQueue()
    loop = asyncio.get_running_loop()
    wake_ups: list[object] = []
    handed = loop.call_soon_threadsafe

    def counting(callback, *args):  # type: ignore[no-untyped-def]
        wake_ups.append(callback)
        return handed(callback, *args)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        # The loop thread waits here, blocked, until the producer has added every key: it can
        # take the batch only after, so there is exactly one wake-up to count.
        producer = threading.Thread(target=lambda: [queue.add_threadsafe(k) for k in "abcab"])
        producer.start()
        producer.join(TIMEOUT)
    finally:
        del loop.call_soon_threadsafe
    queue_wake_ups = [w for w in wake_ups if getattr(w, "__self__", None) is queue]
    assert len(queue_wake_ups) == 1
    assert [await take(queue) for _ in range(3)] == ["a", "b", "c"]
    assert len(queue) == 0


async def test_a_worker_cancelled_as_it_is_woken_passes_the_key_on() -> None:
    queue = RateLimitedQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # both wait in get()
    queue.add("k")  # wakes the first
    first.cancel()
    assert await asyncio.wait_for(second, TIMEOUT) == "k"


async def test_shutdown_wakes_waiting_workers() -> None:
    queue = RateLimitedQueue()
    worker = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # let the worker block in get()
    queue.add_after("later", 60)
    await queue.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(worker, TIMEOUT)
    queue.add("ignored")
    assert len(queue) == 0 and queue.waiting_on_timers == 0


async def test_many_workers_never_share_a_key() -> None:
    queue = RateLimitedQueue()
    active: set[object] = set()
    seen: list[object] = []

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            assert key not in active
            active.add(key)
            await asyncio.sleep(0)
            seen.append(key)
            active.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for i in range(200):
        queue.add(i % 10)
        await asyncio.sleep(0)
    while len(queue) or any(k in active for k in range(10)):
        await asyncio.sleep(0)
    await queue.shutdown()
    await asyncio.wait_for(asyncio.gather(*workers), TIMEOUT)
    assert set(seen) == set(range(10))


async def test_shards_take_turns_so_a_crowded_namespace_cannot_starve_another() -> None:
    queue = RateLimitedQueue(shard=lambda key: key[0])
    for i in range(100):
        queue.add(("crowded", i))
    queue.add(("quiet", 0))
    first, second = await queue.get(), await queue.get()
    assert first == ("crowded", 0) and second == ("quiet", 0)
    assert len(queue) == 99
    queue.done(first)
    queue.done(second)
    queue.add(("quiet", 1))  # arrives late, still served before most of the crowd
    order = [await queue.get() for _ in range(3)]
    assert ("quiet", 1) in order
