"""Writes sent as JSON bytes through libcurl on the event loop (`controllers.curl_loop`), with the
`kubernetes` ApiClient's credentials and TLS settings, without its generated methods or its
urllib3 pool.

A generated method validates its arguments with pydantic, walks the body to sanitise it and
builds model objects; urllib3 and http.client then parse every answer's headers in Python.
Measured with `python -m bench.write_cost` (one Event POST to the real kube-apiserver, 8 at
once, the client's CPU per request): the generated method 840 us, aiohttp on the event loop
about 320 us, libcurl on the event loop about 175 us, a bare blocking TLS socket 140 us. The
controller's bodies are plain dicts it built itself, so here they are only encoded as JSON. The
ApiClient still makes the credentials (`param_serialize`, which calls the configuration's token
refresh hook), once a second at most, so a rotated ServiceAccount token is picked up as before.

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
from urllib.parse import urlsplit, urlunsplit

import msgspec
import pycurl
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import should_bypass_proxies
from urllib3 import HTTPHeaderDict

from controllers.curl_loop import CurlLoop, Option

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
REQUEST_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10.0
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


def curl_options(configuration: Configuration) -> list[Option]:
    """The ApiClient's TLS and proxy settings (kubernetes/client/rest.py) as libcurl options."""
    options: list[Option] = [
        (pycurl.TIMEOUT_MS, int(REQUEST_TIMEOUT_SECONDS * 1000)),
        (pycurl.CONNECTTIMEOUT_MS, int(CONNECT_TIMEOUT_SECONDS * 1000)),
    ]
    if not configuration.verify_ssl:
        options += [(pycurl.SSL_VERIFYPEER, 0), (pycurl.SSL_VERIFYHOST, 0)]
    else:
        options += _trust(configuration)
        if configuration.assert_hostname is False:
            options.append((pycurl.SSL_VERIFYHOST, 0))
    if configuration.cert_file:
        options.append((pycurl.SSLCERT, configuration.cert_file))
    if configuration.key_file:
        options.append((pycurl.SSLKEY, configuration.key_file))
    # "" turns off the proxies libcurl would otherwise take from the environment: the
    # ApiClient's pool never does.
    proxy = _proxy(configuration)
    options.append((pycurl.PROXY, proxy or ""))
    if proxy and configuration.proxy_headers:
        lines = [f"{k}: {v}" for k, v in configuration.proxy_headers.items()]
        options += [(pycurl.HEADEROPT, pycurl.HEADER_SEPARATE), (pycurl.PROXYHEADER, lines)]
    return options


def _trust(configuration: Configuration) -> list[Option]:
    """The CAs the server's certificate is checked against, as the ApiClient's pool has them:
    its file, its data, else the system's (what `ssl.create_default_context` loads)."""
    if configuration.ssl_ca_cert:
        return [(pycurl.CAINFO, configuration.ssl_ca_cert)]
    data = configuration.ca_cert_data
    if data:
        return [(pycurl.CAINFO_BLOB, data.encode() if isinstance(data, str) else data)]
    paths = ssl.get_default_verify_paths()
    options: list[Option] = []
    if paths.cafile:
        options.append((pycurl.CAINFO, paths.cafile))
    if paths.capath:
        options.append((pycurl.CAPATH, paths.capath))
    return options


def _sni_url(url: str, server_name: str | None) -> tuple[str, list[Option]]:
    """With a kubeconfig's tls-server-name: ask for that name (SNI and the certificate's
    check) while connecting to the server's own address."""
    if not server_name:
        return url, []
    parts = urlsplit(url)
    port = parts.port or 443
    netloc = f"{server_name}:{port}"
    route = f"{server_name}:{port}:{parts.hostname}:{port}"
    return urlunsplit(parts._replace(netloc=netloc)), [(pycurl.CONNECT_TO, [route])]


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
        self._proxy = _proxy(configuration)
        self._server_name = configuration.tls_server_name or None
        _, route = _sni_url(configuration.host, self._server_name)
        self._curl = CurlLoop(curl_options(configuration) + route, MAX_CONNECTIONS)
        self.max_retries = max_retries
        self._clock, self._sleep = clock, sleep
        self._not_before = 0.0  # no request before this (clock) time: a 429's Retry-After
        self._credentials: dict[str, tuple[float, str, list[str]]] = {}
        self.throttled = 0  # 429 answers seen (the tests read it)

    async def close(self) -> None:
        await self._curl.close()

    async def request(self, method: str, path: str, body: Any, content_type: str = JSON) -> bytes:
        """The answer's body; ApiException for an error status (after a 429's retries)."""
        data = _encode(body)
        attempt = 0
        while True:
            await self._wait_turn()
            base, headers = self._head(content_type)
            answer = await self._curl.request(method, base + path, headers, data)
            if answer.status < 400:
                return answer.body
            if answer.status == 429 and attempt < self.max_retries:
                attempt += 1
                self._back_off(retry_after_seconds(answer.header("Retry-After")))
                continue
            text = answer.body.decode("utf-8", "replace")
            error = ApiException(status=answer.status, reason=answer.reason, body=text)
            error.headers = HTTPHeaderDict(answer.headers)
            raise error

    def _head(self, content_type: str) -> tuple[str, list[str]]:
        """The server's URL and the request's headers, credentials included, as the ApiClient
        makes them (asked again once CREDENTIALS_SECONDS have passed)."""
        now = time.monotonic()
        made = self._credentials.get(content_type)
        if made is None or now - made[0] >= CREDENTIALS_SECONDS:
            _, url, headers, _, _ = self._client.param_serialize(
                method="POST",
                resource_path="",
                header_params={"Content-Type": content_type, "Accept": JSON},
                auth_settings=["BearerToken"],
            )
            base, _ = _sni_url(url, self._server_name)
            made = (now, base, [f"{k}: {v}" for k, v in headers.items()])
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
