"""The controller's event loop: uvloop's, with what the controller asks of a loop."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import uvloop

from gpu_admission.process import event_loop
from gpu_admission.process.stop_signals import stop_signals


def test_the_loop_is_uvloops_and_takes_work_from_threads_executors_and_signals() -> None:
    async def main() -> tuple[str, str, str]:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        loop = asyncio.get_running_loop()
        handed: asyncio.Future[str] = loop.create_future()  # as the informer threads hand keys
        threading.Thread(target=loop.call_soon_threadsafe, args=(handed.set_result, "t")).start()
        from_thread = await asyncio.wait_for(handed, 30)
        from_executor = await asyncio.to_thread(lambda: "x")  # as the rarer API calls run
        with stop_signals() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            name = await asyncio.wait_for(received, 30)
        return from_thread, from_executor, name

    assert event_loop.run(main()) == ("t", "x", "SIGTERM")


def test_what_is_left_running_is_cancelled_as_asyncio_run_does() -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)

    event_loop.run(main())
    assert cancelled.is_set()
