"""A connection balancer that plays kube-proxy for a Service: each new connection goes to one of
the ready endpoints (round robin) and stays there; removing an endpoint changes where new
connections go and leaves established ones alone, as an iptables or IPVS rule update does.

It runs on its own thread and event loop, on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading


class Balancer:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._endpoints: list[int] = []
        self._turn = itertools.count()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.refused = 0  # connections that found no ready endpoint

    def start(self) -> None:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def add(self, port: int) -> None:
        self._loop.call_soon_threadsafe(self._endpoints.append, port)

    def remove(self, port: int) -> None:
        self._loop.call_soon_threadsafe(self._endpoints.remove, port)

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._endpoints:
            self.refused += 1
            writer.close()
            return
        port = self._endpoints[next(self._turn) % len(self._endpoints)]
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            self.refused += 1
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                with contextlib.suppress(ConnectionError, OSError):
                    end.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the end on (a half-close, as TCP does)."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
