"""HTTP requests through libcurl's multi interface (pycurl), driven by the asyncio event loop.

Why libcurl: the controller's writes are small JSON bodies, and what each one costs the client
is almost all HTTP and TLS machinery. Measured with `python -m bench.write_cost` against the real
kube-apiserver (one Event POST, 8 at once, CPU per request in the client): aiohttp on the event
loop about 320 us, this path about 175 us, a bare blocking TLS socket about 140 us. aiohttp
parses in C but runs asyncio's TLS layer and its request and response objects in Python; libcurl
does the TLS, the request and the answer's parsing in C and calls back into Python only for the
sockets to watch, its timer and the finished transfer.

How: libcurl says which sockets to watch (`M_SOCKETFUNCTION`) and when to call it back
(`M_TIMERFUNCTION`); the loop watches them (`add_reader`/`add_writer`) and hands each readiness
to `socket_action`; a finished transfer resolves its future. Everything runs on the loop's
thread, so there is no hand-off between threads and nothing to lock. This is libcurl's
documented event-loop integration (curl_multi_socket_action(3), the hiperfifo example).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pycurl

# Bits of what the loop watches for an fd.
_IN, _OUT = 1, 2
_WATCH = {pycurl.POLL_IN: _IN, pycurl.POLL_OUT: _OUT, pycurl.POLL_INOUT: _IN | _OUT}

Option = tuple[int, Any]


class TransportError(ConnectionError):
    """The request got no HTTP answer (connection refused or reset, TLS failure, time-out):
    libcurl's own words, which never carry a header's value."""


@dataclass
class Answer:
    status: int
    reason: str
    header_lines: list[bytes]  # as received: the status line, then "Name: value" lines
    body: bytes
    _headers: dict[str, str] | None = field(default=None, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """The last response's headers (after any interim 1xx ones), by their received name."""
        if self._headers is None:
            headers: dict[str, str] = {}
            for raw in self.header_lines:
                line = raw.decode("latin-1").rstrip("\r\n")
                if line.startswith("HTTP/"):
                    headers = {}
                elif ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip()] = value.strip()
            self._headers = headers
        return self._headers

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)


def _reason(lines: list[bytes]) -> str:
    """The reason phrase of the last status line ("" on HTTP/2, which has none)."""
    for raw in reversed(lines):
        if raw.startswith(b"HTTP/"):
            parts = raw.decode("latin-1").rstrip("\r\n").split(" ", 2)
            return parts[2] if len(parts) == 3 else ""
    return ""


class _Transfer:
    """One easy handle's request in flight: where its answer goes."""

    __slots__ = ("body", "future", "lines")

    def __init__(self, future: asyncio.Future[Answer]) -> None:
        self.future = future
        self.lines: list[bytes] = []
        self.body: list[bytes] = []


class CurlLoop:
    """Use from one event loop; `close()` when done. `options` are set on every handle (TLS,
    proxy, time-outs); `max_connections` bounds the connections kept to each host."""

    def __init__(self, options: Sequence[Option], max_connections: int) -> None:
        self._options = list(options)
        self._multi: pycurl.CurlMulti | None = None
        self._max_connections = max_connections
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watched: dict[int, int] = {}  # fd -> _IN | _OUT bits the loop watches
        self._timer: asyncio.TimerHandle | None = None
        self._free: list[pycurl.Curl] = []
        self._busy: dict[pycurl.Curl, _Transfer] = {}

    def _open(self) -> pycurl.CurlMulti:
        if self._multi is None:
            self._loop = asyncio.get_running_loop()
            multi = pycurl.CurlMulti()
            multi.setopt(pycurl.M_SOCKETFUNCTION, self._on_socket)
            multi.setopt(pycurl.M_TIMERFUNCTION, self._on_timer)
            multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, self._max_connections)
            self._multi = multi
        return self._multi

    def _handle(self) -> pycurl.Curl:
        if self._free:
            return self._free.pop()
        handle = pycurl.Curl()
        handle.setopt(pycurl.NOSIGNAL, 1)  # no SIGALRM for DNS time-outs: not in a thread-safe way
        handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        for option, value in self._options:
            handle.setopt(option, value)
        return handle

    async def request(self, method: str, url: str, headers: list[str], body: bytes) -> Answer:
        """Send `body` with `method`; the answer, whatever its status. TransportError when
        there is no answer."""
        multi = self._open()
        assert self._loop is not None
        handle = self._handle()
        transfer = _Transfer(self._loop.create_future())
        handle.setopt(pycurl.URL, url)
        handle.setopt(pycurl.POSTFIELDS, body)
        handle.setopt(pycurl.POSTFIELDSIZE, len(body))
        handle.setopt(pycurl.CUSTOMREQUEST, method)
        # "Expect:" keeps libcurl from asking for 100-continue before a larger body.
        handle.setopt(pycurl.HTTPHEADER, [*headers, "Expect:"])
        handle.setopt(pycurl.WRITEFUNCTION, transfer.body.append)
        handle.setopt(pycurl.HEADERFUNCTION, transfer.lines.append)
        self._busy[handle] = transfer
        multi.add_handle(handle)
        try:
            return await transfer.future
        finally:
            if not transfer.future.done() or transfer.future.cancelled():
                self._abandon(handle)

    def _abandon(self, handle: pycurl.Curl) -> None:
        """A request whose caller went away (cancelled): stop it and drop its handle."""
        if self._busy.pop(handle, None) is not None and self._multi is not None:
            with contextlib.suppress(pycurl.error):
                self._multi.remove_handle(handle)
            handle.close()

    # -- libcurl's callbacks, and the loop's ---------------------------------------------------

    def _on_socket(self, event: int, fd: int, multi: object, data: object) -> None:
        loop = self._loop
        assert loop is not None
        now = self._watched.get(fd, 0)
        wanted = 0 if event == pycurl.POLL_REMOVE else _WATCH.get(event, 0)
        if now & _IN and not wanted & _IN:
            loop.remove_reader(fd)
        if now & _OUT and not wanted & _OUT:
            loop.remove_writer(fd)
        if wanted & _IN and not now & _IN:
            loop.add_reader(fd, self._act, fd, pycurl.CSELECT_IN)
        if wanted & _OUT and not now & _OUT:
            loop.add_writer(fd, self._act, fd, pycurl.CSELECT_OUT)
        if wanted:
            self._watched[fd] = wanted
        else:
            self._watched.pop(fd, None)

    def _on_timer(self, milliseconds: int) -> None:
        # Never act from inside this callback (libcurl forbids it): the loop calls back. A
        # timer that fires early only has libcurl look and set the next one, so one already
        # due sooner is kept: libcurl moves its timer at every step of every transfer.
        loop = self._loop
        if milliseconds < 0 or loop is None:
            return
        due = loop.time() + milliseconds / 1000
        timer = self._timer
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        self._timer = loop.call_at(due, self._on_timeout)

    def _on_timeout(self) -> None:
        self._timer = None
        self._act(pycurl.SOCKET_TIMEOUT, 0)

    def _act(self, fd: int, what: int) -> None:
        multi = self._multi
        if multi is None:
            return
        while multi.socket_action(fd, what)[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        self._finish(multi)

    def _finish(self, multi: pycurl.CurlMulti) -> None:
        while True:
            queued, done, failed = multi.info_read()
            for handle in done:
                self._settle(multi, handle, None)
            for handle, _, message in failed:
                self._settle(multi, handle, message)
            if not queued:
                return

    def _settle(self, multi: pycurl.CurlMulti, handle: pycurl.Curl, error: str | None) -> None:
        multi.remove_handle(handle)
        transfer = self._busy.pop(handle, None)
        self._free.append(handle)
        if transfer is None or transfer.future.done():
            return
        if error is not None:
            transfer.future.set_exception(TransportError(error))
            return
        lines = transfer.lines
        status = handle.getinfo(pycurl.RESPONSE_CODE)
        transfer.future.set_result(Answer(status, _reason(lines), lines, b"".join(transfer.body)))

    async def close(self) -> None:
        """Fail what is in flight, stop watching, free libcurl's handles."""
        loop, multi = self._loop, self._multi
        self._multi = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for handle, transfer in list(self._busy.items()):
            if not transfer.future.done():
                transfer.future.set_exception(TransportError("the client was closed"))
            if multi is not None:
                with contextlib.suppress(pycurl.error):
                    multi.remove_handle(handle)
            handle.close()
        self._busy.clear()
        if loop is not None and not loop.is_closed():
            for fd, bits in self._watched.items():
                if bits & _IN:
                    loop.remove_reader(fd)
                if bits & _OUT:
                    loop.remove_writer(fd)
        self._watched.clear()
        for handle in self._free:
            handle.close()
        self._free.clear()
        if multi is not None:
            multi.close()
