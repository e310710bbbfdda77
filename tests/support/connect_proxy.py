"""An HTTP proxy that only tunnels (CONNECT, RFC 9110 section 9.3.6), as squid or a corporate
egress proxy does for https:// targets: it reads the CONNECT head, opens a TCP connection to the
named host and port, answers 200, then copies bytes both ways. TLS runs end to end through it.
It runs on the caller's event loop and keeps every CONNECT head it received."""

from __future__ import annotations

import asyncio
import contextlib


class ConnectProxy:
    def __init__(self, refuse: tuple[int, str] | None = None) -> None:
        """`refuse`: answer every CONNECT with this status and reason instead of tunnelling."""
        self.refuse = refuse
        self.heads: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.heads.append(head)
            if self.refuse is not None:
                code, reason = self.refuse
                writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Length: 0\r\n\r\n".encode())
                await writer.drain()
                return
            method, authority, _ = head.split("\r\n", 1)[0].split(" ", 2)
            assert method == "CONNECT", method
            host, port = authority.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()
