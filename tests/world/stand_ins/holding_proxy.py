"""A TCP proxy in front of an object store that holds chosen requests open until a test
releases them: a load really runs (its pod is up, its request in flight) while the test acts."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable
from typing import Any

START_SECONDS = 10.0


def bucket_and_key(request_line: bytes) -> tuple[str, str]:
    """`GET /bucket/key?x-id=GetObject HTTP/1.1` -> ("bucket", "key") (rclone uses path-style
    URLs)."""
    parts = request_line.split(b" ")
    if len(parts) < 3:
        return "", ""
    path = urllib.parse.unquote(urllib.parse.urlsplit(parts[1].decode("latin-1")).path)
    bucket, _, key = path.lstrip("/").partition("/")
    return bucket, key


class HoldingProxy:
    """A TCP proxy to the object store that holds each connection whose first request is for a
    held bucket (or for keys under a held prefix of it) until that hold is released. Each loader
    is its own rclone process, so a connection never serves two buckets and the first request
    line tells which load it belongs to; with keep-alives off (rclone's
    --disable-http-keep-alives) every request is its own connection, so single objects can be
    held."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        assert parsed.hostname and parsed.port
        self._upstream = (parsed.hostname, parsed.port)
        self._holds: dict[tuple[str, str], asyncio.Event] = {}  # (bucket, key prefix) -> release
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # bucket -> connections held, and those the client dropped while held (a killed loader).
        # Written on the loop, read by tests from other threads.
        self.held: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.endpoint = ""

    def hold(self, bucket: str, prefix: str = "") -> None:
        """Hold requests for `bucket` (only keys under `prefix`, when given). Call on the
        proxy's loop, or before the loads start."""
        self._holds.setdefault((bucket, prefix), asyncio.Event())

    def release(self, bucket: str | None = None, prefix: str | None = None) -> None:
        """Let held and future requests through: all of them, or one hold's."""
        for (held_bucket, held_prefix), released in self._holds.items():
            if bucket in (None, held_bucket) and prefix in (None, held_prefix):
                released.set()

    def _hold_for(self, bucket: str, key: str) -> asyncio.Event | None:
        for (held_bucket, prefix), released in self._holds.items():
            if held_bucket == bucket and key.startswith(prefix) and not released.is_set():
                return released
        return None

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Listen on `host` (the pod network's address when pods on a real node load through
        it)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        port = self._server.sockets[0].getsockname()[1]
        self.endpoint = f"http://{host}:{port}"

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in list(self._connections):
            connection.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            request_line = await reader.readline()
            head = request_line + await reader.readuntil(b"\r\n\r\n")
            bucket, key = bucket_and_key(request_line)
            hold = self._hold_for(bucket, key)
            if hold is not None:
                self.held[bucket] = self.held.get(bucket, 0) + 1
                early = await self._released_or_dropped(reader, hold)
                if early is None:
                    self.dropped[bucket] = self.dropped.get(bucket, 0) + 1
                    return
                head += early
            upstream_reader, upstream = await asyncio.open_connection(*self._upstream)
            upstream.write(head)
            pipes = {
                asyncio.create_task(pipe(reader, upstream)),
                asyncio.create_task(pipe(upstream_reader, writer)),
            }
            try:
                # Either side closing ends the exchange (HTTP never half-closes here).
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for remaining in pipes:
                    remaining.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # a killed loader drops its connection
        finally:
            for end in (writer, upstream):
                if end is not None:
                    end.close()
            self._connections.discard(task)

    async def _released_or_dropped(
        self, reader: asyncio.StreamReader, hold: asyncio.Event
    ) -> bytes | None:
        """Wait for the release (-> bytes the client sent meanwhile) or the client hanging up
        (-> None). A held GET sends nothing after its headers, so a read wakes only on EOF."""
        released = asyncio.create_task(hold.wait())
        sent = b""
        try:
            while not released.done():
                more = asyncio.create_task(reader.read(65536))
                await asyncio.wait({released, more}, return_when=asyncio.FIRST_COMPLETED)
                if not more.done():
                    more.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await more
                    break
                if not more.result():
                    return None
                sent += more.result()
            return sent
        finally:
            released.cancel()


async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()


@contextlib.asynccontextmanager
async def holding_proxy(upstream: str) -> AsyncIterator[HoldingProxy]:
    proxy = HoldingProxy(upstream)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


class ThreadedHoldingProxy:
    """The proxy on an event loop of its own, for tests that are not async (the install tier):
    holds and releases are handed to that loop."""

    def __init__(self, upstream: str, host: str = "127.0.0.1") -> None:
        self._proxy = HoldingProxy(upstream)
        self._host = host
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="holding-proxy", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return self._proxy.endpoint

    @property
    def held(self) -> dict[str, int]:
        return self._proxy.held

    @property
    def dropped(self) -> dict[str, int]:
        return self._proxy.dropped

    def start(self, port: int = 0) -> ThreadedHoldingProxy:
        """Listen on `port` (0: any free one)."""
        self._thread.start()
        self._on_loop(self._proxy.start, port, self._host)
        return self

    def hold(self, bucket: str, prefix: str = "") -> None:
        self._on_loop(_as_coroutine(self._proxy.hold), bucket, prefix)

    def release(self, bucket: str | None = None, prefix: str | None = None) -> None:
        self._on_loop(_as_coroutine(self._proxy.release), bucket, prefix)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._on_loop(self._proxy.stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(START_SECONDS)
        self._loop.close()

    def _on_loop(self, call: Callable[..., Any], *args: Any) -> None:
        asyncio.run_coroutine_threadsafe(call(*args), self._loop).result(START_SECONDS)


def _as_coroutine(call: Callable[..., None]) -> Callable[..., Any]:
    async def on_loop(*args: Any) -> None:
        call(*args)

    return on_loop
