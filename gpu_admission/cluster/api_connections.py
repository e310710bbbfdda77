"""HTTP/1.1 requests to the API server over kept-alive connections on the event loop.

Each request is one write of its bytes (head and body, made by the caller) and one answer, parsed
by httptools (llhttp, the parser Node.js uses, in C). `python -m bench.write_cost`: an Event POST
costs the client 106 us of CPU this way (5 rounds: 95 - 122), against 183 us (176 - 217)
through an aiohttp client session on the same loop, whose per-request Python (request and
response objects, header multidicts, timers, tracing) is the difference; the TLS and the socket
are the same (the loop's).

Connections: up to `limit` requests at once, each on a connection of its own; an idle one is
reused (the most recent first) and one the server has closed is dropped. A request that finds
its reused connection closed before any answer came is sent once more on a new one: the server
closed it idle (Go's HTTP server only closes a connection between requests), so it never read
the request. Any other failure is raised, and the connection is not reused.

Proxies: an `http://` proxy is asked to CONNECT to the API server (RFC 9110, section 9.3.6) with
the configured proxy headers, and TLS runs through that tunnel, as urllib3 and aiohttp do.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict

CONNECT_HEAD_LIMIT = 64 * 1024  # a proxy's answer to CONNECT longer than this is not one


class Answer(NamedTuple):
    status: int
    reason: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header_map(self) -> CIMultiDict[str]:
        """The headers by name, any case (made on demand: most answers never need them)."""
        return CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in self.headers)


class ApiConnectionError(ConnectionError):
    """The API server (or the proxy in between) gave no usable answer."""


class ClosedBeforeAnswer(ApiConnectionError):
    """The connection closed before an answer came."""


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go: `prefix` is the server URL's path (a cluster behind a path-routing
    proxy), put before each request's path; `tls` None means plain HTTP."""

    host: str
    port: int
    prefix: str
    tls: ssl.SSLContext | None
    server_hostname: str | None = None
    proxy: Proxy | None = None

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def endpoint(
    url: str,
    tls: ssl.SSLContext | None,
    server_hostname: str | None = None,
    proxy: Proxy | None = None,
) -> Endpoint:
    """The Endpoint of a server URL (`https://host:port/prefix`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the API server's URL must be http(s)://host[:port], not {url!r}")
    https = parts.scheme == "https"
    if https and tls is None:
        tls = ssl.create_default_context()
    return Endpoint(
        host=parts.hostname,
        port=parts.port or (443 if https else 80),
        prefix=parts.path.rstrip("/"),
        tls=tls if https else None,
        server_hostname=(server_hostname or parts.hostname) if https else None,
        proxy=proxy,
    )


class _Connection(asyncio.Protocol):
    """One connection: at most one request in flight, its answer handed to `waiter`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.answering = False  # bytes of the current request's answer have arrived
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._tunnel: bytearray | None = None  # the proxy's answer to CONNECT, while awaited

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.answering = True
        if self._tunnel is not None:
            self._tunnel_data(data)
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ApiConnectionError(f"the API server's answer is not HTTP/1.1: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ClosedBeforeAnswer("the API server closed the connection before answering"))

    # httptools callbacks

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(
            self._parser.get_status_code(),
            self._reason.decode("latin-1"),
            self._headers,
            b"".join(self._body),
        )
        self._reason, self._headers, self._body = b"", [], []
        if not self._parser.should_keep_alive():
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # use

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.answering = False
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def time_out(self, message: str) -> None:
        """The answer is late: fail the request (its caller aborts the connection)."""
        self._fail(ApiConnectionError(message))

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    # CONNECT through a proxy

    async def tunnel(self, endpoint: Endpoint, proxy: Proxy) -> None:
        """Ask the proxy to CONNECT to the endpoint; raise unless it answers 2xx."""
        self._tunnel = bytearray()
        head = f"CONNECT {endpoint.authority} HTTP/1.1\r\nHost: {endpoint.authority}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in proxy.headers.items())
        try:
            answer = await self.send((head + "\r\n").encode("latin-1"))
        except ClosedBeforeAnswer:
            raise ApiConnectionError(
                f"the proxy {proxy.host}:{proxy.port} closed the connection instead of answering "
                f"CONNECT to {endpoint.authority}"
            ) from None
        if not 200 <= answer.status < 300:
            self.close()
            raise ApiConnectionError(
                f"the proxy {proxy.host}:{proxy.port} refused to CONNECT to "
                f"{endpoint.authority}: HTTP {answer.status} {answer.reason}".rstrip()
            )

    def _tunnel_data(self, data: bytes) -> None:
        # A 2xx to CONNECT has no body and the parser cannot know it answers a CONNECT, so the
        # head is read here: status line and headers, up to the blank line.
        assert self._tunnel is not None
        self._tunnel += data
        end = self._tunnel.find(b"\r\n\r\n")
        if end < 0:
            if len(self._tunnel) > CONNECT_HEAD_LIMIT:
                self._fail(ApiConnectionError("the proxy's answer to CONNECT has no end"))
                self.close()
            return
        status_line = bytes(self._tunnel[: self._tunnel.find(b"\r\n")]).split(b" ", 2)
        self._tunnel = None
        try:
            status = int(status_line[1])
        except (IndexError, ValueError):
            self._fail(ApiConnectionError("the proxy's answer to CONNECT is not HTTP"))
            self.close()
            return
        reason = status_line[2].decode("latin-1") if len(status_line) > 2 else ""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(status, reason, [], b""))


class ApiConnections:
    """Use from one event loop; `close()` when done."""

    def __init__(self, endpoint: Endpoint, limit: int, timeout: float) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.opened = 0  # connections made (the tests read it)
        self._slots = asyncio.Semaphore(limit)
        self._idle: collections.deque[_Connection] = collections.deque()
        self._busy: set[_Connection] = set()
        self._late = f"no answer from the API server at {endpoint.authority} in {timeout:g} s"
        self._closed = False

    async def request(self, data: bytes) -> Answer:
        """Send one whole request (head and body, as bytes) and read its answer."""
        async with self._slots:
            connection, reused = await self._take()
            try:
                answer = await self._exchange(connection, data)
            except ClosedBeforeAnswer:
                if not reused or connection.answering:
                    raise
                connection = await self._open()  # closed while idle: it never read this
                answer = await self._exchange(connection, data)
            if not connection.closed:
                self._idle.append(connection)
            return answer

    async def close(self) -> None:
        """Abort every connection; a request still waiting fails, and none opens a new one."""
        self._closed = True
        for connection in (*self._idle, *self._busy):
            connection.abort()
        self._idle.clear()
        self._busy.clear()

    async def _take(self) -> tuple[_Connection, bool]:
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
        return await self._open(), False

    async def _exchange(self, connection: _Connection, data: bytes) -> Answer:
        self._busy.add(connection)
        # One timer per request (asyncio.timeout's context manager cost three times as much).
        timer = asyncio.get_running_loop().call_later(self.timeout, connection.time_out, self._late)
        try:
            return await connection.send(data)
        except BaseException:
            # Timed out, cancelled, or failed mid-answer: what is left on the wire is unknown.
            connection.abort()
            raise
        finally:
            timer.cancel()
            self._busy.discard(connection)

    async def _open(self) -> _Connection:
        if self._closed:
            raise ApiConnectionError("the connections to the API server are closed")
        where = self.endpoint.authority
        if self.endpoint.proxy is not None:
            where += f" through the proxy {self.endpoint.proxy.host}:{self.endpoint.proxy.port}"
        try:
            async with asyncio.timeout(self.timeout):
                connection = await self._connect()
        except TimeoutError:
            raise ApiConnectionError(
                f"cannot connect to the API server at {where} in {self.timeout:g} s"
            ) from None
        except ApiConnectionError:
            raise
        except OSError as exc:  # refused, unreachable, TLS verification (ssl.SSLError)
            raise ApiConnectionError(f"cannot connect to the API server at {where}: {exc}") from exc
        self.opened += 1
        return connection

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        endpoint, proxy = self.endpoint, self.endpoint.proxy
        if proxy is None:
            _, connection = await loop.create_connection(
                _Connection,
                endpoint.host,
                endpoint.port,
                ssl=endpoint.tls,
                server_hostname=endpoint.server_hostname,
            )
            return connection
        _, connection = await loop.create_connection(_Connection, proxy.host, proxy.port)
        try:
            await connection.tunnel(endpoint, proxy)
            if endpoint.tls is not None:
                assert connection.transport is not None
                secured = await loop.start_tls(
                    connection.transport,
                    connection,
                    endpoint.tls,
                    server_hostname=endpoint.server_hostname,
                )
                assert secured is not None
                connection.transport = secured  # type: ignore[assignment]
        except BaseException:
            connection.abort()
            raise
        return connection
