"""CurlLoop, libcurl on the event loop, against local HTTP servers: answers whatever their
status, no answer as TransportError, and a caller that goes away or a close leaves nothing
behind."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pycurl
import pytest
from aiohttp import web

from controllers.curl_loop import CurlLoop, TransportError

TIMEOUT = 10.0


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An HTTP server: /echo answers the body back with a header of its own, /busy answers 429,
    /hold never answers (and sets the event when a request has arrived)."""
    arrived = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(body=body, headers={"X-Method": request.method}, status=201)

    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=429, reason="Too Many Requests", headers={"Retry-After": "3"})

    async def hold(request: web.Request) -> web.Response:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_route("*", "/busy", busy)
    app.router.add_route("*", "/hold", hold)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", arrived
    finally:
        await runner.cleanup()


async def test_an_answer_carries_its_status_headers_and_body(server) -> None:
    base, _ = server
    curl = CurlLoop([], max_connections=4)
    try:
        answers = await asyncio.gather(
            *(curl.request("PATCH", f"{base}/echo", [], f"body {i}".encode()) for i in range(20))
        )
        assert [a.body for a in answers] == [f"body {i}".encode() for i in range(20)]
        assert {a.status for a in answers} == {201}
        assert answers[0].header("x-method") == "PATCH" and answers[0].reason == "Created"
        busy = await curl.request("POST", f"{base}/busy", [], b"{}")
        assert busy.status == 429 and busy.header("Retry-After") == "3"
        assert busy.reason == "Too Many Requests"
    finally:
        await curl.close()


async def test_no_answer_is_a_transport_error_in_libcurls_words() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    curl = CurlLoop([], max_connections=4)
    try:
        with pytest.raises(TransportError, match=rf"127\.0\.0\.1.*{port}"):
            await curl.request("POST", f"http://127.0.0.1:{port}/", [], b"{}")
    finally:
        await curl.close()


async def test_a_caller_that_goes_away_leaves_nothing_in_flight(server) -> None:
    base, arrived = server
    curl = CurlLoop([], max_connections=4)
    try:
        held = asyncio.create_task(curl.request("POST", f"{base}/hold", [], b"{}"))
        await asyncio.wait_for(arrived.wait(), TIMEOUT)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert not curl._busy
        answer = await asyncio.wait_for(curl.request("POST", f"{base}/echo", [], b"after"), TIMEOUT)
        assert answer.body == b"after"
    finally:
        await curl.close()


async def test_close_fails_what_is_in_flight(server) -> None:
    base, arrived = server
    curl = CurlLoop([], max_connections=4)
    held = asyncio.create_task(curl.request("POST", f"{base}/hold", [], b"{}"))
    await asyncio.wait_for(arrived.wait(), TIMEOUT)
    await curl.close()
    with pytest.raises(TransportError, match="closed"):
        await asyncio.wait_for(held, TIMEOUT)


async def test_a_time_out_is_a_transport_error(server) -> None:
    base, _ = server
    curl = CurlLoop([(pycurl.TIMEOUT_MS, 200)], max_connections=4)
    try:
        with pytest.raises(TransportError, match=r"(?i)timed? ?out"):
            await asyncio.wait_for(curl.request("POST", f"{base}/hold", [], b"{}"), TIMEOUT)
    finally:
        await curl.close()
