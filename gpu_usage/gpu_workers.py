"""One worker thread per GPU, so an NVML call that hangs on one GPU (fallen off the bus, in a
reset) holds that GPU alone: the sweep waits for each GPU up to a deadline, reads the others,
and names the hung one until its call returns. A worker whose call hangs is not given another:
a hung call is not undone in-process, and piling calls on it would only add threads.

NVML may be called from several threads at once: nvml.h's "Thread Safety" ("NVML is thread-safe
so it is safe to make simultaneous NVML calls from multiple threads"); nvidia-ml-py guards its
own function-pointer cache with a lock.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _Worker:
    """A daemon thread running one call at a time: a hung call never keeps the process from
    exiting (concurrent.futures' own workers are joined at exit)."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def submit(self, call: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._calls.put((call, future))
        return future

    def _serve(self) -> None:
        while True:
            call, future = self._calls.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as error:  # handed to the waiting sweep
                future.set_exception(error)


class GpuWorkers(Generic[T]):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._workers: dict[int, _Worker] = {}
        self._hung_since: dict[int, float] = {}  # GPU index -> when its pending call began
        self._lock = threading.Lock()

    def hung(self) -> dict[int, float]:
        """GPU index -> seconds its pending call has run, for every GPU still hung."""
        now = self._clock()
        with self._lock:
            return {index: now - since for index, since in self._hung_since.items()}

    def run(
        self, indices: Iterable[int], read: Callable[[int], T], timeout: float
    ) -> tuple[dict[int, T], dict[int, float]]:
        """`read(index)` for each GPU on its own worker, each waited for until `timeout`
        seconds after the first started. Returns what came back, and each hung GPU with how
        long its call has run (those still hung from an earlier sweep are not asked again).
        An exception `read` raises is raised here, after every GPU was waited for."""
        started = self._clock()
        pending: dict[int, Future[T]] = {}
        for index in indices:
            with self._lock:
                if index in self._hung_since:
                    continue
            pending[index] = self._worker(index).submit(lambda i=index: read(i))
        results: dict[int, T] = {}
        failure: BaseException | None = None
        for index, future in pending.items():
            left = max(0.0, timeout - (self._clock() - started))
            try:
                results[index] = future.result(timeout=left)
            except FutureTimeout:
                with self._lock:
                    self._hung_since[index] = started
                future.add_done_callback(lambda _, i=index: self._returned(i))
            except BaseException as error:  # the reader's to judge, once all were waited for
                failure = failure or error
        if failure is not None:
            raise failure
        return results, self.hung()

    def _returned(self, index: int) -> None:
        with self._lock:
            self._hung_since.pop(index, None)

    def _worker(self, index: int) -> _Worker:
        worker = self._workers.get(index)
        if worker is None:
            worker = self._workers[index] = _Worker(f"nvml-gpu-{index}")
        return worker
