"""The graceful end of the HTTPS service: a replica replaced under load drops no request.

kube-apiserver reaches the service through its Service: kube-proxy sends each new connection to
a ready endpoint, and keeps established connections where they are. On SIGTERM the endpoint is
removed, but only once the removal reaches every proxy, and the API server's kept-alive
connections to this replica stay open whatever the proxies do. So the service:

1. keeps its listener open for `server.drain_seconds` and answers everything, but each answer
   closes its connection (`Connection: close`): the API server's next request opens a new
   connection, which the proxies send to a ready replica;
2. then closes the listener, and closes the connections that carry no request (a request that
   has arrived, in whole or in part, is read and answered);
3. waits, up to `server.shutdown_grace_seconds`, for the last answers, whose connections close
   behind them.

aiohttp's own runner shutdown is left for the end, with no connection open: it stops reading
from every connection at once (`RequestHandler.close` makes `data_received` drop what arrives),
so a request that arrives on a kept-alive connection then is never read and its client times
out (aiohttp 3.14's `web_protocol.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

POLL_SECONDS = 0.02  # how often the last connections are looked at while they finish
DRAIN = web.AppKey("drain", "Drain")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Drain:
    """Whether the service is draining; its middleware closes each connection after its answer."""

    def __init__(self) -> None:
        self.active = False
        self._ended = asyncio.Event()

    def end(self) -> None:
        """End the drain period now (an embedding process that knows no proxy routes here)."""
        self._ended.set()

    async def wait(self, seconds: float) -> None:
        """The drain period: `seconds`, or less if ended first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), seconds)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if self.active:
            response.force_close()
        return response


def _idle(connection: RequestHandler) -> bool:
    # No request being handled, and none received but not yet started (aiohttp queues parsed
    # messages in `_messages`): closing it loses nothing.
    return not connection._request_in_progress and not connection._messages


async def close_gracefully(
    runner: web.AppRunner, drain: Drain, drain_seconds: float, grace_seconds: float
) -> None:
    """Drain, close the listener and the idle connections, let the rest finish, clean up."""
    drain.active = True
    if drain_seconds > 0:
        log.info(
            "draining for %.1fs: answering, closing each connection after its answer", drain_seconds
        )
        await drain.wait(drain_seconds)  # while endpoint removal reaches the proxies
    for site in list(runner.sites):
        await site.stop()  # the listener only: open connections stay
    server = runner.server
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_seconds
    while server is not None and server.connections and loop.time() < deadline:
        for connection in server.connections:
            if _idle(connection):
                connection.force_close()
        await asyncio.sleep(POLL_SECONDS)
    if server is not None and server.connections:
        log.warning(
            "%d connection(s) still busy after %.1fs; closing them",
            len(server.connections),
            grace_seconds,
        )
    await runner.cleanup()
