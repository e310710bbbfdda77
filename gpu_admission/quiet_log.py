"""Say a repeating condition once, then quietly: for failures that retry every few seconds.

A reconcile or a lease renewal that keeps failing for the same reason would otherwise log the same
line (or the client's multi-line error dump) every retry. `QuietLog.failed(key, message)` logs at
WARNING when the message for `key` is new or changed and at DEBUG while it repeats;
`recovered(key, message)` logs once at INFO when a reported condition clears.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable


class QuietLog:
    MAX_KEYS = 10_000  # a bound, so keys that never recover cannot grow it for ever

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self._last: dict[Hashable, str] = {}

    def failed(self, key: Hashable, message: str) -> bool:
        """Log `message`; returns True when it was said out loud (new or changed)."""
        if self._last.get(key) == message:
            self._log.debug("%s (still)", message)
            return False
        if len(self._last) >= self.MAX_KEYS:
            self._last.clear()
        self._last[key] = message
        self._log.warning("%s", message)
        return True

    def recovered(self, key: Hashable, message: str) -> None:
        if self._last.pop(key, None) is not None:
            self._log.info("%s", message)

    def forget(self, key: Hashable) -> None:
        self._last.pop(key, None)

    def current(self) -> dict[Hashable, str]:
        """The conditions reported and not yet recovered."""
        return dict(self._last)
