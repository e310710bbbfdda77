"""The whole service in-process: start-up with self-issued certificates, readiness, and a graceful
shutdown that answers the request in flight and refuses new connections."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from commands.serve import SHUTTING_DOWN, AdmissionServer
from gpu_admission.cluster.view import ClusterView, ObjectRef, StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.support.ports import free_port
from tests.webhooks.server_helpers import fixture_bytes
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest
from webhooks.policies.interface import MutatingPolicy, PolicySet, Scope

WAIT = 10.0  # bound on every wait for a condition


class HeldResolver:
    """Holds the request in the service (as a slow cache-miss lookup would) until released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def resolve(self, refs: Iterable[ObjectRef]) -> None:
        self.entered.set()
        await self.release.wait()


class RecordingService:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name = name
        self.events = events

    async def start(self) -> None:
        self.events.append(f"start {self.name}")

    async def stop(self) -> None:
        self.events.append(f"stop {self.name}")


def mark() -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        patch.set_annotation("test.example/seen", "yes")

    return MutatingPolicy(
        "mark",
        Scope("Pod"),
        mutate,
        references=lambda request, _view: [
            ObjectRef("ServiceAccount", request.namespace, "default")
        ],
    )


def make_config(cert_dir: Path, drain_seconds: float = 0.0) -> Config:
    return Config.model_validate(
        {
            "server": {
                "host": "127.0.0.1",
                "port": free_port(),
                "metrics_port": free_port(),
                "drain_seconds": drain_seconds,
                "shutdown_grace_seconds": WAIT,
            },
            "certs": {"cert_dir": str(cert_dir), "extra_ips": ["127.0.0.1"]},
        }
    )


def client_context(cert_dir: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))


async def test_empty_cert_dir_gets_a_ca_and_the_service_becomes_ready(tmp_path):
    config = make_config(tmp_path / "certs")
    server = AdmissionServer(config, None, PolicySet(), metrics=Metrics(), extra_services=[])
    await server.start()
    try:
        assert {p.name for p in (tmp_path / "certs").iterdir()} == {
            "ca.crt",
            "ca.key",
            "tls.crt",
            "tls.key",
        }
        assert server.certificates.reloader.context.minimum_version == ssl.TLSVersion.TLSv1_2
        connector = aiohttp.TCPConnector(ssl=client_context(tmp_path / "certs"))
        async with aiohttp.ClientSession(connector=connector) as session:
            url = f"https://127.0.0.1:{config.server.port}"
            async with session.get(f"{url}/readyz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{config.server.metrics_port}/metrics") as r:
                assert "process_cpu_seconds_total" in await r.text()
    finally:
        await server.stop()


async def test_readiness_names_what_is_missing(tmp_path):
    server = AdmissionServer(make_config(tmp_path), None, PolicySet(), extra_services=[])
    assert server.readiness() == ["certificates"]
    server.draining = True
    assert server.readiness() == [SHUTTING_DOWN, "certificates"]


async def test_shutdown_answers_in_flight_requests_and_refuses_new_connections(tmp_path):
    cert_dir = tmp_path / "certs"
    config = make_config(cert_dir)
    resolver = HeldResolver()
    events: list[str] = []
    server = AdmissionServer(
        config,
        None,
        PolicySet(mutating=(mark(),)),
        metrics=Metrics(process_metrics=False),
        extra_services=[RecordingService("controller", events)],
        cluster=(StaticClusterView(), resolver),
    )
    await server.start()
    url = f"https://127.0.0.1:{config.server.port}"
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")
    connector = aiohttp.TCPConnector(ssl=client_context(cert_dir))
    async with aiohttp.ClientSession(connector=connector) as session:

        async def in_flight() -> tuple[int, dict[str, Any]]:
            async with session.post(
                f"{url}/mutate/pods", data=body, headers={"Content-Type": "application/json"}
            ) as response:
                return response.status, await response.json()

        request = asyncio.create_task(in_flight())
        await asyncio.wait_for(resolver.entered.wait(), WAIT)
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)  # let stop() begin: it marks the service unready first
        assert SHUTTING_DOWN in server.readiness()
        await asyncio.wait_for(_until_refused(config.server.port), WAIT)
        assert not request.done() and not stopping.done()
        assert events == ["start controller"]  # background services outlive in-flight requests

        resolver.release.set()
        status, answer = await asyncio.wait_for(request, WAIT)
        await asyncio.wait_for(stopping, WAIT)
    assert status == 200
    assert answer["response"]["uid"] == json.loads(body)["request"]["uid"]
    assert answer["response"]["allowed"] is True
    assert events == ["start controller", "stop controller"]


async def test_while_draining_kept_alive_connections_are_answered_and_closed(tmp_path):
    """SIGTERM with a kept-alive connection open (as kube-apiserver keeps them): the next request
    on it is read and answered in full, with `Connection: close`, and new connections are still
    accepted until the drain ends; then the listener closes."""
    cert_dir = tmp_path / "certs"
    config = make_config(cert_dir, drain_seconds=WAIT * 6)  # ended by the test, not the clock
    server = AdmissionServer(
        config,
        None,
        PolicySet(mutating=(mark(),)),
        metrics=Metrics(process_metrics=False),
        extra_services=[],
        cluster=(StaticClusterView(), None),
    )
    await server.start()
    url = f"https://127.0.0.1:{config.server.port}/mutate/pods"
    body = fixture_bytes("pod-cpu-cuda-image.mutating.json")
    connector = aiohttp.TCPConnector(ssl=client_context(cert_dir), limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def review() -> aiohttp.ClientResponse:
            async with session.post(
                url, data=body, headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
                return response

        before = await review()
        assert before.status == 200 and before.headers.get("Connection") != "close"
        stopping = asyncio.create_task(server.stop())
        while SHUTTING_DOWN not in server.readiness():
            await asyncio.sleep(0)
        on_kept_alive = await asyncio.wait_for(review(), WAIT)  # the same pooled connection
        assert on_kept_alive.status == 200
        assert on_kept_alive.headers["Connection"] == "close"
        on_new = await asyncio.wait_for(review(), WAIT)  # a new connection is still accepted
        assert on_new.status == 200 and on_new.headers["Connection"] == "close"
        assert not stopping.done()
        assert server._drain is not None
        server._drain.end()
        await asyncio.wait_for(stopping, WAIT)
        await asyncio.wait_for(_until_refused(config.server.port), WAIT)


async def _until_refused(port: int) -> None:
    """Return once a new TCP connection to `port` is refused (the listener is closed)."""
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.01)


async def test_start_failure_stops_what_started(tmp_path):
    config = make_config(tmp_path / "certs")
    events: list[str] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", config.server.port))
        taken.listen()
        server = AdmissionServer(
            config, None, PolicySet(), extra_services=[RecordingService("controller", events)]
        )
        with pytest.raises(OSError):
            await server.start()
    assert events == []
    assert server.readiness() == [SHUTTING_DOWN]
