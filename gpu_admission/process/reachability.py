"""Whether a dependency answers, said in two log lines however many callers retry meanwhile.

When the API server goes away, every informer of a process fails and retries on its own back-off;
logging each failure would bury the one fact that matters. `Reachability.lost` says the first
failure at WARNING (what cannot be reached, why, and who noticed) and every later one at DEBUG;
`answered` says once at INFO that it is back, and for how long it was not, when the last caller
that had failed gets an answer again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)


def unreachable_reason(error: BaseException) -> str | None:
    """A short, stable reason when `error` means the server did not answer (or answered that it
    cannot serve now); None for an answer about the request itself (403, 404, ...)."""
    if isinstance(error, ApiException):
        if error.status in (429, 500, 502, 503, 504):
            return f"HTTP {error.status} {error.reason or ''}".rstrip()
        return None
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        return "connection refused" if "refused" in str(error).lower() else "cannot connect"
    if isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
        return "timed out"
    if isinstance(error, urllib3.exceptions.ProtocolError | ConnectionError):
        return "connection lost"
    if isinstance(error, urllib3.exceptions.HTTPError | OSError):
        return type(error).__name__
    return None


class Reachability:
    def __init__(
        self,
        what: str,
        logger: logging.Logger = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self._log = logger
        self._clock = clock
        self._lock = threading.Lock()
        self._failing: set[Hashable] = set()
        self._since: float | None = None
        self._attempts = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def lost(self, caller: Hashable, reason: str, who: str) -> None:
        """`caller` (any key unique to it) got no answer; `who` names it in the first line."""
        with self._lock:
            self._failing.add(caller)
            self._attempts += 1
            if self._since is not None:
                self._log.debug("%s still cannot be reached (%s; %s)", self.what, reason, who)
                return
            self._since = self._clock()
            self._attempts = 1
        self._log.warning(
            "%s cannot be reached (%s; first noticed by %s); retrying quietly until it answers",
            self.what,
            reason,
            who,
        )

    def answered(self, caller: Hashable) -> None:
        """`caller` got an answer; the last failing caller to get one ends the outage."""
        with self._lock:
            if self._since is None:
                return
            self._failing.discard(caller)
            if self._failing:
                return
            seconds, attempts = self._clock() - self._since, self._attempts
            self._since = None
        self._log.info(
            "%s reachable again after %.1f s (%d failed attempts meanwhile)",
            self.what,
            seconds,
            attempts,
        )

    def forget(self, caller: Hashable) -> None:
        """`caller` stopped and will not retry: the outage no longer waits for it. With no
        failing caller left nobody knows whether the server is back, so nothing is said."""
        with self._lock:
            self._failing.discard(caller)
            if not self._failing:
                self._since = None


# One API server per process: every informer reports to this one unless given another.
API_SERVER = Reachability("the Kubernetes API server")
