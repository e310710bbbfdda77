"""Swapping the serving certificate under load: no failed request, new connections see it at once.

A real aiohttp HTTPS server uses CertReloader's context. Keep-alive clients and clients opening a
fresh connection per request hammer it while the certificate is renewed and reloaded several
times, and one request is held open across a swap.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509

from certs.issue import CertBundle, KeyType, ServingSpec, issue_bundle, renew_bundle
from certs.pem import CertificateError
from certs.reloader import CertReloader

SPEC = ServingSpec(service="gpu-admission", namespace="gpu-system", ips=("127.0.0.1",))
SWAPS = 3
TIMEOUT = 30.0
# aiohttp hands a connection back to its pool as soon as the whole body has arrived, and then
# `response.connection` is gone. A body far above the client's read buffer is still in flight when
# the headers are returned, so the connection, and the certificate it presented, can be read.
BODY = b"x" * (1 << 20)


@dataclass
class Outcome:
    generation_at_start: int  # how many swaps had completed when the request started
    serial: int
    transport: int  # id of the connection's transport: tells reused connections apart
    fresh_connection: bool


@dataclass
class Recorder:
    outcomes: list[Outcome] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def add(self, outcome: Outcome | None = None, failure: BaseException | None = None):
        async with self.changed:
            if outcome is not None:
                self.outcomes.append(outcome)
            if failure is not None:
                self.failures.append(failure)
            self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), TIMEOUT)
            except TimeoutError:
                pytest.fail(f"timed out waiting for {what}; failures: {self.failures[:3]}")


def peer_serial(response: aiohttp.ClientResponse) -> tuple[int, int]:
    assert response.connection is not None and response.connection.transport is not None
    transport = response.connection.transport
    der = transport.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number, id(transport)


def client_context(bundle: CertBundle) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=bundle.ca_bundle_pem.decode())


@dataclass
class Server:
    url: str
    reloader: CertReloader
    slow_entered: asyncio.Event
    release_slow: asyncio.Event


@pytest.fixture
def first_bundle() -> CertBundle:
    return issue_bundle(SPEC)


@pytest.fixture
async def server(first_bundle: CertBundle) -> AsyncIterator[Server]:
    reloader = CertReloader()
    reloader.reload(first_bundle)
    slow_entered, release_slow = asyncio.Event(), asyncio.Event()

    async def ping(request: web.Request) -> web.Response:
        return web.Response(body=BODY)

    async def slow(request: web.Request) -> web.Response:
        slow_entered.set()
        await release_slow.wait()
        return web.Response(body=b"slow-done" + BODY)

    app = web.Application()
    app.router.add_get("/ping", ping)
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=reloader.context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Server(f"https://127.0.0.1:{port}", reloader, slow_entered, release_slow)
    finally:
        release_slow.set()
        await runner.cleanup()


async def handshake_serial(url: str, bundle: CertBundle) -> int:
    connector = aiohttp.TCPConnector(ssl=client_context(bundle), force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(f"{url}/ping") as response,
    ):
        serial, _ = peer_serial(response)
        assert await response.read() == BODY
        return serial


async def test_certificate_swaps_under_load_without_a_failed_request(
    server: Server, first_bundle: CertBundle
) -> None:
    recorder = Recorder()
    generation = 0
    serials = [first_bundle.serial]
    stop = asyncio.Event()
    ctx = client_context(first_bundle)

    async def hammer(session: aiohttp.ClientSession, fresh: bool) -> None:
        while not stop.is_set():
            started_at = generation
            try:
                async with session.get(f"{server.url}/ping") as response:
                    serial, transport = peer_serial(response)
                    assert response.status == 200 and await response.read() == BODY
                await recorder.add(Outcome(started_at, serial, transport, fresh))
            except Exception as exc:
                await recorder.add(failure=exc)

    keep_alive = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=3))
    fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True))
    slow_session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
    workers = [asyncio.create_task(hammer(keep_alive, fresh=False)) for _ in range(6)]
    workers += [asyncio.create_task(hammer(fresh, fresh=True)) for _ in range(2)]

    async def slow_request() -> tuple[int, str]:
        async with slow_session.get(f"{server.url}/slow") as response:
            serial, _ = peer_serial(response)
            return serial, (await response.read())[:9].decode()

    slow_task = asyncio.create_task(slow_request())
    try:
        await asyncio.wait_for(server.slow_entered.wait(), TIMEOUT)
        await recorder.wait_for(
            lambda: sum(not o.fresh_connection for o in recorder.outcomes) >= 20,
            "keep-alive traffic on the first certificate",
        )
        pre_swap_transports = {o.transport for o in recorder.outcomes if not o.fresh_connection}

        current = first_bundle
        for swap in range(1, SWAPS + 1):
            current = renew_bundle(current, SPEC, now=datetime.now(UTC) + timedelta(seconds=swap))
            assert server.reloader.reload(current)
            serials.append(current.serial)
            generation = swap
            await recorder.wait_for(
                lambda g=swap: (
                    sum(
                        o.fresh_connection and o.generation_at_start == g for o in recorder.outcomes
                    )
                    >= 5
                ),
                f"fresh connections after swap {swap}",
            )
            if swap == 1:
                # The request held open across the swap finishes on its original connection.
                server.release_slow.set()
                slow_serial, slow_body = await asyncio.wait_for(slow_task, TIMEOUT)
                assert slow_body == "slow-done"
                assert slow_serial == first_bundle.serial

        # Keep-alive connections opened before any swap carry on serving requests.
        await recorder.wait_for(
            lambda: any(
                o.generation_at_start == SWAPS and o.transport in pre_swap_transports
                for o in recorder.outcomes
            ),
            "a keep-alive connection from before the swaps to serve a request after them",
        )
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        slow_task.cancel()
        for session in (keep_alive, fresh, slow_session):
            await session.close()

    assert recorder.failures == []
    assert len(set(serials)) == SWAPS + 1
    for outcome in recorder.outcomes:
        assert outcome.serial in serials
        if outcome.fresh_connection:
            # A connection opened after a swap completed never sees an older certificate.
            assert serials.index(outcome.serial) >= outcome.generation_at_start
    for transport in pre_swap_transports:
        # A connection keeps the certificate it was opened with.
        assert {o.serial for o in recorder.outcomes if o.transport == transport} == {serials[0]}
    assert await handshake_serial(server.url, first_bundle) == serials[-1]


async def test_reloading_the_same_pair_is_a_no_op(server: Server, first_bundle: CertBundle):
    assert server.reloader.loaded
    assert not server.reloader.reload(first_bundle)
    assert await handshake_serial(server.url, first_bundle) == first_bundle.serial


async def test_a_mismatched_pair_is_refused_and_the_old_certificate_keeps_serving(
    server: Server, first_bundle: CertBundle
) -> None:
    renewed = renew_bundle(first_bundle, SPEC)
    broken = CertBundle(renewed.ca_cert_pem, b"", renewed.cert_pem, first_bundle.key_pem)
    with pytest.raises(CertificateError, match="does not belong"):
        server.reloader.reload(broken)
    assert server.reloader.serial == first_bundle.serial
    assert await handshake_serial(server.url, first_bundle) == first_bundle.serial


async def test_switching_key_type_is_refused_while_serving(
    server: Server, first_bundle: CertBundle
) -> None:
    rsa_spec = ServingSpec(
        service=SPEC.service, namespace=SPEC.namespace, ips=SPEC.ips, key_type=KeyType.RSA_2048
    )
    rsa_bundle = renew_bundle(first_bundle, rsa_spec)
    with pytest.raises(CertificateError, match="cannot switch key types"):
        server.reloader.reload(rsa_bundle)
    assert await handshake_serial(server.url, first_bundle) == first_bundle.serial


def test_context_refuses_tls_below_1_2() -> None:
    context = CertReloader().context
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not CertReloader().loaded
    names = {cipher["name"] for cipher in context.get_ciphers() if cipher["protocol"] == "TLSv1.2"}
    assert names and all(name.startswith("ECDHE-") for name in names)
