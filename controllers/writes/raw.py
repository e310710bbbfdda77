"""Writes sent as JSON bytes on the event loop, with the `kubernetes` ApiClient's credentials
and TLS settings, without its generated methods or its urllib3 pool.

A generated method validates its arguments with pydantic, walks the body to sanitise it and
builds model objects; urllib3 and http.client then parse every answer's headers in Python.
Measured with `python -m bench.controller burst --profile`, those were most of the controller's
CPU per dataset PVC: the same POST costs the client 500-800 us through the ApiClient's pool from
worker threads. Here each request is its bytes, written on a kept-alive connection and answered
through httptools (`gpu_admission.cluster.api_connections`): 106 us (`python -m
bench.write_cost`), where an aiohttp client session, this writer's transport before, takes 183.
The controller's bodies are plain dicts it built itself, so here they are only encoded as JSON
(in C, by msgspec). The ApiClient still makes the credentials (`param_serialize`, which calls the
configuration's token refresh hook), once a second at most, so a rotated ServiceAccount token is
picked up as before.

libcurl (pycurl's multi interface on the event loop) was tried in aiohttp's place: about 60 us
less per request, no difference `bench.controller` could see through its spread, and 6.5 MiB
more resident memory (its own OpenSSL and libcurl).

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
from base64 import b64encode
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import should_bypass_proxies

from gpu_admission.cluster.api_connections import ApiConnections, Proxy, endpoint

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


def tls_context(configuration: Configuration) -> ssl.SSLContext:
    """The TLS settings the ApiClient's pool uses (kubernetes/client/rest.py)."""
    if not configuration.verify_ssl:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(
            cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data
        )
    if configuration.assert_hostname is False:
        context.check_hostname = False
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


def proxy_of(configuration: Configuration) -> Proxy | None:
    """The HTTP proxy the ApiClient would go through (its `proxy`, unless `no_proxy` names the
    server: kubernetes/client/rest.py), with its `proxy_headers`."""
    proxy = str(configuration.proxy or "")
    if not proxy or should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
        return None
    url = urlsplit(proxy)
    # Without "://" urlsplit reads "user:pw@host" as a scheme: never named back, not a URL.
    scheme = url.scheme if "://" in proxy else ""
    if scheme != "http" or not url.hostname:
        raise ValueError(
            f"the controller writes through http:// proxies only (it asks them to CONNECT); "
            f"the configured proxy is {scheme or 'not a URL'}{'://' if scheme else ''}: set it "
            "as http://host:port, or name the API server in NO_PROXY"
        )
    headers = {str(k): str(v) for k, v in (configuration.proxy_headers or {}).items()}
    if url.username and "Proxy-Authorization" not in headers:
        credentials = f"{unquote(url.username)}:{unquote(url.password or '')}"
        headers["Proxy-Authorization"] = "Basic " + b64encode(credentials.encode()).decode()
    return Proxy(url.hostname, url.port or 80, headers)


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
        self.max_retries = max_retries
        self._clock, self._sleep = clock, sleep
        self._connections: ApiConnections | None = None
        # The header lines of each content type, credentials included, and when they were made.
        self._heads: dict[str, tuple[float, bytes]] = {}
        self._not_before = 0.0  # no request before this (clock) time: a 429's Retry-After
        self.throttled = 0  # 429 answers seen (the tests read it)

    @property
    def connections(self) -> ApiConnections:
        """Made at the first write, on the loop that uses them, from the configuration the
        ApiClient has then (a ValueError says what in it cannot be used)."""
        if self._connections is None:
            configuration = self._client.configuration
            where = endpoint(
                configuration.host,
                tls_context(configuration),
                configuration.tls_server_name or None,
                proxy_of(configuration),
            )
            self._connections = ApiConnections(where, MAX_CONNECTIONS, REQUEST_TIMEOUT_SECONDS)
        return self._connections

    async def close(self) -> None:
        if self._connections is not None:
            await self._connections.close()
            self._connections = None

    async def request(self, method: str, path: str, body: Any, content_type: str = JSON) -> bytes:
        """The answer's body; ApiException for an error status (after a 429's retries)."""
        if not path.startswith("/") or not path.isprintable() or " " in path:
            raise ValueError(f"not a request path: {path!r}")
        connections = self.connections
        data = _encode(body)
        target = f"{method} {connections.endpoint.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
        attempt = 0
        while True:
            await self._wait_turn()
            request = b"%b%bContent-Length: %d\r\n\r\n%b" % (
                target,
                self._head(content_type),
                len(data),
                data,
            )
            answer = await connections.request(request)
            if answer.status < 400:
                return answer.body
            headers = answer.header_map()
            if answer.status == 429 and attempt < self.max_retries:
                attempt += 1
                self._back_off(retry_after_seconds(headers.get("Retry-After")))
                continue
            text = answer.body.decode("utf-8", "replace")
            error = ApiException(status=answer.status, reason=answer.reason, body=text)
            error.headers = headers
            raise error

    def _head(self, content_type: str) -> bytes:
        """The request's header lines, credentials included, as the ApiClient makes them (asked
        again once CREDENTIALS_SECONDS have passed)."""
        now = self._clock()
        made = self._heads.get(content_type)
        if made is None or now - made[0] >= CREDENTIALS_SECONDS:
            _, _, headers, _, _ = self._client.param_serialize(
                method="POST",
                resource_path="",
                header_params={"Content-Type": content_type, "Accept": JSON},
                auth_settings=["BearerToken"],
            )
            lines = [f"Host: {self.connections.endpoint.authority}"]
            for name, value in headers.items():
                if "\r" in str(value) or "\n" in str(value):  # http.client refuses these too
                    raise ValueError(
                        f"the API client's {name} header has a line break in its value (a "
                        "token file ending in a newline?)"
                    )
                if name.lower() != "content-length":
                    lines.append(f"{name}: {value}")
            made = (now, ("\r\n".join(lines) + "\r\n").encode("latin-1"))
            self._heads[content_type] = made
        return made[1]

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


# -- the rarer calls, through the official client's generated methods -------------------------


def write(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Make a write through a generated method and read its answer to the end. The answer is
    not used, but an unread response keeps its connection out of urllib3's pool, so every next
    call would open a new TLS connection (measured: 199 connections for 200 creates)."""
    call(*args, _preload_content=False, **kwargs).data  # noqa: B018 - read to release
