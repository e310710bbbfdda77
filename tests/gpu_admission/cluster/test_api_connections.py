"""The controller's HTTP/1.1 connections, on its own loop (uvloop): kept alive and reused, each
failure raised with what happened, the one safe resend, and the CONNECT tunnel through a proxy.

A scripted server plays each answer a real server may give (a close between requests, no answer,
a late one, bytes that are not HTTP); the real kube-apiserver behind a real CONNECT tunnel is in
`test_a_write_goes_through_an_http_proxy_to_the_real_server`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from controllers.writes.raw import RawWriter
from gpu_admission.cluster.api_connections import (
    ApiConnectionError,
    ApiConnections,
    ClosedBeforeAnswer,
    Proxy,
    endpoint,
)
from gpu_admission.process import event_loop
from tests.support.connect_proxy import ConnectProxy
from tests.support.ports import free_port
from tests.world.namespaces import namespace_ready

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
GET = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

# What the scripted server does with the n-th request (from 0) it reads on a connection.
Script = Callable[[int, asyncio.StreamWriter], Awaitable[bool]]  # False: stop serving it


class ScriptedServer:
    """Plain HTTP on 127.0.0.1: reads each request head (these requests have no body) and lets
    the script answer it; counts connections and requests."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for n in range(1000):
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                if not await self.script(n, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def answer(n: int, writer: asyncio.StreamWriter) -> bool:
    writer.write(OK)
    return True


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return event_loop.run(main())  # the controller's loop: uvloop


def test_requests_reuse_kept_alive_connections() -> None:
    async def main() -> tuple[int, int, int]:
        server = ScriptedServer(answer)
        async with server as url:
            pool = ApiConnections(endpoint(url, None), limit=4, timeout=30)
            for _ in range(5):
                assert (await pool.request(GET)).status == 200
            answers = await asyncio.gather(*(pool.request(GET) for _ in range(12)))
            await pool.close()
        assert {(a.status, a.reason, a.body) for a in answers} == {(200, "OK", b"{}")}
        return server.connections, server.requests, pool.opened

    connections, requests, opened = run(main)
    assert requests == 17
    assert connections == opened and 1 <= opened <= 4  # one after another, then at most `limit`


def test_chunked_answers_and_their_headers_are_read_whole() -> None:
    async def chunked(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n"
            b'\r\n5\r\n{"a":\r\n3\r\n 1}\r\n0\r\n\r\n'
        )
        return True

    async def main() -> Any:
        async with ScriptedServer(chunked) as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            got = await pool.request(GET)
            await pool.close()
            return got

    got = run(main)
    assert (got.status, json.loads(got.body)) == (429, {"a": 1})
    assert got.header_map()["retry-after"] == "3"


def test_an_answer_that_closes_the_connection_is_not_reused() -> None:
    async def closing(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        return False

    async def main() -> tuple[int, int]:
        server = ScriptedServer(closing)
        async with server as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            for _ in range(3):
                assert (await pool.request(GET)).status == 200
            await pool.close()
        return server.connections, pool.opened

    assert run(main) == (3, 3)


def test_a_kept_connection_the_server_closed_is_sent_on_anew_once() -> None:
    """The server answers the first request on a connection and closes on the second without
    answering, as Go's server closes an idle connection: the request goes once more, on a new
    connection. A new connection that closes unanswered is an error, not resent."""

    async def first_only(n: int, writer: asyncio.StreamWriter) -> bool:
        if n == 0:
            writer.write(OK)
            return True
        return False

    async def main() -> tuple[int, int, str]:
        server = ScriptedServer(first_only)
        async with server as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            assert (await pool.request(GET)).status == 200
            assert (await pool.request(GET)).status == 200  # reused, closed, sent anew
            counts = (server.connections, server.requests)
            await pool.close()
        async with ScriptedServer(lambda n, w: _false()) as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            with pytest.raises(ClosedBeforeAnswer) as raised:
                await pool.request(GET)
            await pool.close()
        return (*counts, str(raised.value))

    connections, requests, error = run(main)
    assert (connections, requests) == (2, 3)
    assert error == "the API server closed the connection before answering"


async def _false() -> bool:
    return False


def test_a_late_answer_fails_the_request_and_its_connection() -> None:
    seen: list[int] = []

    async def silent(n: int, writer: asyncio.StreamWriter) -> bool:
        seen.append(n)
        if len(seen) == 1:
            await asyncio.Event().wait()  # never answers the first request
        writer.write(OK)
        return True

    async def main() -> tuple[str, int, int]:
        server = ScriptedServer(silent)
        async with server as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=0.2)
            with pytest.raises(ApiConnectionError) as raised:
                await pool.request(GET)
            assert (await pool.request(GET)).status == 200  # on a new connection
            await pool.close()
        return str(raised.value), pool.opened, server.requests

    error, opened, requests = run(main)
    assert error.startswith("no answer from the API server at 127.0.0.1:") and "in 0.2 s" in error
    assert (opened, requests) == (2, 2)  # the late one was not sent again


def test_bytes_that_are_not_http_are_an_error() -> None:
    async def garbage(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        return True

    async def main() -> str:
        async with ScriptedServer(garbage) as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            with pytest.raises(ApiConnectionError) as raised:
                await pool.request(GET)
            await pool.close()
        return str(raised.value)

    assert run(main).startswith("the API server's answer is not HTTP/1.1")


def test_nothing_listening_is_named() -> None:
    port = free_port()

    async def main() -> str:
        pool = ApiConnections(endpoint(f"https://127.0.0.1:{port}", None), limit=1, timeout=30)
        with pytest.raises(ApiConnectionError) as raised:
            await pool.request(GET)
        return str(raised.value)

    assert run(main).startswith(f"cannot connect to the API server at 127.0.0.1:{port}: ")


@pytest.mark.parametrize(
    ("url", "host", "port", "prefix", "authority", "tls"),
    [
        ("https://10.96.0.1:443", "10.96.0.1", 443, "", "10.96.0.1:443", True),
        ("https://rancher.example/k8s/clusters/c-1/", "rancher.example", 443, "/k8s/clusters/c-1",
         "rancher.example:443", True),
        ("http://[::1]:8001", "::1", 8001, "", "[::1]:8001", False),
    ],
)  # fmt: skip
def test_an_endpoint_is_read_from_the_servers_url(
    url: str, host: str, port: int, prefix: str, authority: str, tls: bool
) -> None:
    made = endpoint(url, None)
    assert (made.host, made.port, made.prefix, made.authority) == (host, port, prefix, authority)
    assert (made.tls is not None) == tls and (made.server_hostname == host) == tls
    with pytest.raises(ValueError, match="must be http"):
        endpoint("unix:///var/run/k8s.sock", None)


CONFIGMAPS = "/api/v1/namespaces/through-proxy/configmaps"


def test_a_write_goes_through_an_http_proxy_to_the_real_server(kube_api, kube_client) -> None:
    """TLS to the real kube-apiserver, verified against its CA, inside the proxy's tunnel."""
    namespace_ready(kube_client, "through-proxy")
    proxy = ConnectProxy()

    async def main() -> tuple[dict[str, Any], int]:
        port = await proxy.start()
        kube_client.configuration.proxy = f"http://ops:pw@127.0.0.1:{port}"
        writer = RawWriter(kube_client)
        body = {"metadata": {"name": "tunnelled"}, "data": {"a": "1"}}
        made = json.loads(await writer.request("POST", CONFIGMAPS, body))
        await writer.request("POST", CONFIGMAPS, {"metadata": {"name": "tunnelled-2"}})
        opened = writer.connections.opened
        await writer.close()
        await proxy.close()
        return made, opened

    made, opened = run(main)
    assert made["metadata"]["name"] == "tunnelled" and made["metadata"]["resourceVersion"]
    assert opened == 1  # the tunnel is kept alive like any connection
    server = kube_api.url.split("://", 1)[1].rstrip("/")
    assert proxy.heads == [
        f"CONNECT {server} HTTP/1.1\r\nHost: {server}\r\n"
        "Proxy-Authorization: Basic b3BzOnB3\r\n\r\n"
    ]


async def _error_through(proxy: Proxy) -> str:
    """What a request to an API server through `proxy` fails with."""
    pool = ApiConnections(endpoint("https://10.0.0.1:6443", None, proxy=proxy), 1, 30)
    with pytest.raises(ApiConnectionError) as raised:
        await pool.request(GET)
    return str(raised.value)


def test_a_proxy_that_refuses_is_named_with_its_answer() -> None:
    proxy = ConnectProxy(refuse=(407, "Proxy Authentication Required"))

    async def main() -> tuple[int, str]:
        port = await proxy.start()
        credentials = {"Proxy-Authorization": "Basic c2VjcmV0"}
        error = await _error_through(Proxy("127.0.0.1", port, credentials))
        await proxy.close()
        return port, error

    port, error = run(main)
    assert error == (
        f"the proxy 127.0.0.1:{port} refused to CONNECT to 10.0.0.1:6443: HTTP 407 Proxy "
        "Authentication Required"
    )


def test_a_proxy_that_hangs_up_is_named() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def main() -> tuple[int, str]:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        error = await _error_through(Proxy("127.0.0.1", port))
        server.close()
        return port, error

    port, error = run(main)
    assert error == (
        f"the proxy 127.0.0.1:{port} closed the connection instead of answering CONNECT to "
        "10.0.0.1:6443"
    )


def test_closing_fails_what_waits_and_opens_nothing_more() -> None:
    """A request held by the server when the pool closes (the controller stopping) fails; it is
    not sent again on a new connection, and nothing later is."""
    holding = asyncio.Event()

    async def hold(n: int, writer: asyncio.StreamWriter) -> bool:
        if n == 0:
            writer.write(OK)
            return True
        holding.set()
        await asyncio.Event().wait()
        return False

    async def main() -> tuple[str, str, int]:
        server = ScriptedServer(hold)
        async with server as url:
            pool = ApiConnections(endpoint(url, None), limit=1, timeout=30)
            assert (await pool.request(GET)).status == 200
            waiting = asyncio.ensure_future(pool.request(GET))  # reuses the connection
            await holding.wait()  # the server has read it
            await pool.close()
            with pytest.raises(ApiConnectionError) as failed:
                await waiting
            with pytest.raises(ApiConnectionError) as later:
                await pool.request(GET)
        return str(failed.value), str(later.value), server.connections

    failed, later, connections = run(main)
    assert failed == "the connections to the API server are closed"
    assert later == "the connections to the API server are closed" and connections == 1
