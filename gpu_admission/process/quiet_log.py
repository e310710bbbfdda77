"""Say a repeating condition once, then quietly: for failures that retry every few seconds.

A reconcile or a lease renewal that keeps failing for the same reason would otherwise log the same
line (or the client's multi-line error dump) every retry. `QuietLog.failed(key, message)` logs at
WARNING when the message for `key` is new or changed and at DEBUG while it repeats;
`recovered(key, message)` logs once at INFO when a reported condition clears, with how long it
lasted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable


class QuietLog:
    MAX_KEYS = 10_000  # a bound, so keys that never recover cannot grow it for ever

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._clock = clock
        self._last: dict[Hashable, str] = {}
        self._since: dict[Hashable, float] = {}  # when each reported condition began

    def failed(self, key: Hashable, message: str) -> bool:
        """Log `message`; returns True when it was said out loud (new or changed)."""
        if self._last.get(key) == message:
            self._log.debug("%s (still)", message)
            return False
        if len(self._last) >= self.MAX_KEYS:
            self._last.clear()
            self._since.clear()
        self._last[key] = message
        self._since.setdefault(key, self._clock())
        self._log.warning("%s", message)
        return True

    def recovered(self, key: Hashable, message: str) -> None:
        if self._last.pop(key, None) is not None:
            began = self._since.pop(key, None)
            lasted = "" if began is None else f" after {self._clock() - began:.1f} s"
            self._log.info("%s%s", message, lasted)

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)
        self._since.pop(key, None)

    def current(self) -> dict[Hashable, str]:
        """The conditions reported and not yet recovered."""
        return dict(self._last)
