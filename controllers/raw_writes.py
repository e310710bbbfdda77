"""Writes sent as JSON bytes through the `kubernetes` ApiClient's own connection pool, TLS and
credentials, without its generated methods.

A generated method validates its arguments with pydantic, walks the body to sanitise it and
builds model objects: measured with `python -m bench.controller burst --profile`, that was most
of the controller's CPU per dataset PVC. The controller's bodies are plain dicts it built itself,
so here they are only `json.dumps`-ed. The ApiClient still adds the credentials
(`param_serialize`, which calls the configuration's token refresh hook) and owns the pool.

Priority and fairness: a 429 (the API server's answer when this client's flow is over its
share) is retried after its Retry-After, and every writer of this object waits that long before
its next request, so the controller slows down as a whole instead of each thread hammering on.
After `max_retries` the ApiException is raised: the reconcile fails and its work queue retries
it later, so no write is lost.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
REQUEST_TIMEOUT_SECONDS = 30.0
DEFAULT_RETRY_AFTER_SECONDS = 1.0
MAX_RETRY_AFTER_SECONDS = 30.0

log = logging.getLogger(__name__)


def retry_after_seconds(value: str | None) -> float:
    """Retry-After as seconds (kube-apiserver sends whole seconds), bounded; a missing or odd
    value waits the default."""
    try:
        seconds = float(value) if value is not None else DEFAULT_RETRY_AFTER_SECONDS
    except ValueError:
        seconds = DEFAULT_RETRY_AFTER_SECONDS
    if seconds != seconds:  # NaN
        seconds = DEFAULT_RETRY_AFTER_SECONDS
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


class RawWriter:
    """Thread-safe; call from worker threads (it blocks)."""

    def __init__(
        self,
        api_client: ApiClient,
        max_retries: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = api_client
        self.max_retries = max_retries
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._not_before = 0.0  # no request before this (clock) time: a 429's Retry-After
        self.throttled = 0  # 429 answers seen (the tests read it)

    def request(self, method: str, path: str, body: Any, content_type: str = JSON) -> bytes:
        """The answer's body; ApiException for an error status (after a 429's retries)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        attempt = 0
        while True:
            self._wait_turn()
            status, reason, headers, answer = self._send(method, path, data, content_type)
            if status < 400:
                return answer
            if status == 429 and attempt < self.max_retries:
                attempt += 1
                self._back_off(retry_after_seconds(headers.get("Retry-After")))
                continue
            text = answer.decode("utf-8", "replace")
            error = ApiException(status=status, reason=reason, body=text)
            error.headers = headers
            raise error

    def _send(
        self, method: str, path: str, data: bytes, content_type: str
    ) -> tuple[int, str, Any, bytes]:
        _, url, headers, _, _ = self._client.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Content-Type": content_type, "Accept": JSON},
            auth_settings=["BearerToken"],
        )
        response = self._client.rest_client.pool_manager.request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=REQUEST_TIMEOUT_SECONDS,
            preload_content=False,
        )
        # Read to the end: an unread response keeps its connection out of the pool.
        answer: bytes = response.data
        return response.status, response.reason or "", response.headers, answer

    def _wait_turn(self) -> None:
        with self._lock:
            wait = self._not_before - self._clock()
        if wait > 0:
            self._sleep(wait)

    def _back_off(self, seconds: float) -> None:
        with self._lock:
            self.throttled += 1
            now = self._clock()
            quiet = self._not_before <= now  # the first 429 of a new throttled spell
            self._not_before = max(self._not_before, now + seconds)
        if quiet:
            log.warning(
                "the API server throttles this controller (HTTP 429): writes wait %.0f s; "
                "if this persists, raise its priority-and-fairness share",
                seconds,
            )
