"""Fault injection and request accounting for reliability tests, applied by the fault proxy in
front of the real API server (`fault_proxy.py`). Thread-safe: tests call it from their own thread
while the proxy serves on its loop."""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Rule:
    method: str | None
    path: re.Pattern[str]
    remaining: int | None  # None: forever

    def take(self, method: str, path: str) -> bool:
        if self.remaining == 0:
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if not self.path.search(path):
            return False
        if self.remaining is not None:
            self.remaining -= 1
        return True


@dataclass
class _ErrorRule(_Rule):
    code: int = 500
    retry_after: int = 1


@dataclass
class _DelayRule(_Rule):
    seconds: float = 0.0


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._errors: list[_ErrorRule] = []
        self._delays: list[_DelayRule] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        # Set by the proxy (ending its streams) and the control plane (compacting etcd).
        self._drop_watches: Callable[[], None] = lambda: None
        self._compact: Callable[[], None] = lambda: None

    # ----------------------------------------------------------- configuration (tests)
    def fail(
        self,
        method: str | None,
        path_regex: str,
        *,
        code: int = 500,
        times: int | None = 1,
        retry_after: int = 1,
    ) -> None:
        """Answer ``code`` (500 or 429 with Retry-After) to the next ``times`` matching requests."""
        with self._lock:
            self._errors.append(
                _ErrorRule(method, re.compile(path_regex), times, code, retry_after)
            )

    def delay(
        self, method: str | None, path_regex: str, seconds: float, *, times: int | None = None
    ) -> None:
        """Add ``seconds`` of latency to matching requests (``times`` of them, or all)."""
        with self._lock:
            self._delays.append(_DelayRule(method, re.compile(path_regex), times, seconds))

    def clear(self) -> None:
        with self._lock:
            self._errors.clear()
            self._delays.clear()

    def drop_watches(self) -> None:
        """End every open watch stream now (clients see the connection end, as on a restart)."""
        self._drop_watches()

    def compact(self) -> None:
        """Compact the real etcd: a watch from an older resourceVersion now gets 410 Gone."""
        self._compact()

    # ----------------------------------------------------------- accounting
    def request_count(self, method: str | None = None, path_regex: str | None = None) -> int:
        pattern = re.compile(path_regex) if path_regex else None
        with self._lock:
            return sum(
                n
                for (m, p), n in self._counts.items()
                if (method is None or m == method.upper())
                and (pattern is None or pattern.search(p))
            )

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    # ----------------------------------------------------------- used by the proxy
    def record(self, method: str, path: str) -> tuple[_ErrorRule | None, float]:
        with self._lock:
            self._counts[(method.upper(), path)] += 1
            error = next((r for r in self._errors if r.take(method, path)), None)
            delay = sum(r.seconds for r in self._delays if r.take(method, path))
            return error, delay
