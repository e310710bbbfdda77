"""Writes sent as JSON bytes over an aiohttp session, with the `kubernetes` ApiClient's
credentials and TLS settings, without its generated methods or its urllib3 pool.

A generated method validates its arguments with pydantic, walks the body to sanitise it and
builds model objects; urllib3 and http.client then parse every answer's headers in Python.
Measured with `python -m bench.controller burst --profile`, those were most of the controller's
CPU per dataset PVC: the same POST costs the client 500-800 us through the ApiClient's pool from
worker threads, about 280 us through aiohttp on the event loop (its parser is C). The
controller's bodies are plain dicts it built itself, so here they are only encoded as JSON (in C,
by msgspec). The ApiClient still makes the credentials (`param_serialize`, which calls the
configuration's token refresh hook), once a second at most, so a rotated ServiceAccount token is
picked up as before.

libcurl (pycurl's multi interface on the event loop) was tried in this writer's place: about 60 us
less per request than aiohttp in `python -m bench.write_cost`, no difference `bench.controller`
could see through its spread, and 6.5 MiB more resident memory (its own OpenSSL and libcurl).

Priority and fairness: a 429 (the API server's answer when this client's flow is over its
share) is retried after its Retry-After, and every writer of this object waits that long before
its next request, so the controller slows down as a whole instead of each task hammering on.
After `max_retries` the ApiException is raised: the reconcile fails and its work queue retries
it later, so no write is lost.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import should_bypass_proxies

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
REQUEST_TIMEOUT_SECONDS = 30.0
DEFAULT_RETRY_AFTER_SECONDS = 1.0
MAX_RETRY_AFTER_SECONDS = 30.0
MAX_CONNECTIONS = 32
# How long the credentials the ApiClient made are used before it is asked again (its token
# refresh hook is throttled to this anyway: gpu_admission.cluster.kube).
CREDENTIALS_SECONDS = 1.0

# Compact JSON, encoded in C (a loader Job's body is about 4 KB: json.dumps took a tenth of the
# controller's CPU per PVC).
_encode = msgspec.json.Encoder().encode

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


def tls_context(configuration: Configuration) -> ssl.SSLContext | bool:
    """The TLS settings the ApiClient's pool uses (kubernetes/client/rest.py), for aiohttp."""
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data
    )
    if configuration.assert_hostname is False:
        context.check_hostname = False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def _proxy(configuration: Configuration) -> str | None:
    proxy = configuration.proxy
    if not proxy or should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
        return None
    if not proxy.startswith(("http://", "https://")):
        raise ValueError(
            f"the controller writes through HTTP proxies only; {proxy.split('://')[0]}:// is not "
            "supported (configuration.proxy)"
        )
    return str(proxy)


class RawWriter:
    """Use from one event loop; `close()` when done."""

    def __init__(
        self,
        api_client: ApiClient,
        max_retries: int = 8,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._client = api_client
        configuration = api_client.configuration
        self._tls = tls_context(configuration)
        self._proxy = _proxy(configuration)
        self._proxy_headers = configuration.proxy_headers
        self._server_name = configuration.tls_server_name or None
        self.max_retries = max_retries
        self._clock, self._sleep = clock, sleep
        self._session: aiohttp.ClientSession | None = None
        self._credentials: dict[str, tuple[float, str, dict[str, str]]] = {}
        self._not_before = 0.0  # no request before this (clock) time: a 429's Retry-After
        self.throttled = 0  # 429 answers seen (the tests read it)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._tls, limit=MAX_CONNECTIONS)
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
            # No cookies, no JSON decoding: bytes in, bytes out.
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, body: Any, content_type: str = JSON) -> bytes:
        """The answer's body; ApiException for an error status (after a 429's retries)."""
        data = _encode(body)
        attempt = 0
        while True:
            await self._wait_turn()
            status, reason, headers, answer = await self._send(method, path, data, content_type)
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

    async def _send(
        self, method: str, path: str, data: bytes, content_type: str
    ) -> tuple[int, str, Any, bytes]:
        base, headers = self._head(content_type)
        async with self._open().request(
            method,
            base + path,
            data=data,
            headers=headers,
            proxy=self._proxy,
            proxy_headers=self._proxy_headers,
            server_hostname=self._server_name,
        ) as response:
            answer = await response.read()
            return response.status, response.reason or "", response.headers, answer

    def _head(self, content_type: str) -> tuple[str, dict[str, str]]:
        """The server's URL and the request's headers, credentials included, as the ApiClient
        makes them (asked again once CREDENTIALS_SECONDS have passed)."""
        now = self._clock()
        made = self._credentials.get(content_type)
        if made is None or now - made[0] >= CREDENTIALS_SECONDS:
            _, url, headers, _, _ = self._client.param_serialize(
                method="POST",
                resource_path="",
                header_params={"Content-Type": content_type, "Accept": JSON},
                auth_settings=["BearerToken"],
            )
            made = (now, url, dict(headers))
            self._credentials[content_type] = made
        return made[1], made[2]

    async def _wait_turn(self) -> None:
        wait = self._not_before - self._clock()
        if wait > 0:
            await self._sleep(wait)

    def _back_off(self, seconds: float) -> None:
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
