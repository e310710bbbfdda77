"""The client's CPU per API write: the same Event POSTed to a real kube-apiserver through the
controller's writer (`controllers.writes.raw`: kept-alive connections answered through httptools,
`gpu_admission.cluster.api_connections`, on the controller's event loop, uvloop, and again on
asyncio's own loop), through an aiohttp client session on uvloop (the writer's transport
before), through the `kubernetes` client's generated method from threads (urllib3), and as bare
HTTP/1.1 over a blocking TLS socket per thread (the baseline: no client library at all, only TLS
and the request's bytes). Each round runs them in turn on the same server; the figures are CPU
microseconds per request in this process (user + system), their median and range over rounds,
and each path's ratio to the bare socket.

The dataset controller makes three writes per PVC (Job, status, Event), so this is the floor
its CPU per PVC cannot go below with a given HTTP path.

    python -m bench.write_cost [--requests 1000] [--concurrency 8] [--rounds 3] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import ssl
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NS = "default"
PATH = f"/api/v1/namespaces/{NS}/events"


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def event(i: int) -> dict[str, Any]:
    """What the controller posts when a load starts."""
    now = "2026-01-01T00:00:00Z"
    return {
        "metadata": {"name": f"bench-{uuid.uuid4().hex[:12]}-{i}", "namespace": NS},
        "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": f"p{i}"},
        "reason": "LoadStarted",
        "message": f"loading s3://bench/p{i} with Job dl-p{i}-0123456789",
        "type": "Normal",
        "source": {"component": "gpu-admission"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def controller_writer(api: Any, requests: int, concurrency: int) -> float:
    """On the loop the controller runs on (gpu_admission.process.event_loop: uvloop)."""
    from gpu_admission.process import event_loop

    return event_loop.run(writer_burst(api, requests, concurrency))


def controller_writer_on_asyncio(api: Any, requests: int, concurrency: int) -> float:
    """The same on asyncio's own loop: what uvloop saves."""
    return asyncio.run(writer_burst(api, requests, concurrency))


async def writer_burst(api: Any, requests: int, concurrency: int) -> float:
    from controllers.writes.raw import RawWriter

    writer = RawWriter(api)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await writer.request("POST", PATH, event(i))

    await asyncio.gather(*(one(i) for i in range(concurrency)))  # connections open
    before = cpu_seconds()
    await asyncio.gather(*(one(i) for i in range(requests)))
    spent = cpu_seconds() - before
    await writer.close()
    return spent


def aiohttp_session(api: Any, requests: int, concurrency: int) -> float:
    """The writer's transport before: one aiohttp ClientSession, the same headers and bytes."""
    from gpu_admission.process import event_loop

    return event_loop.run(aiohttp_burst(api, requests, concurrency))


async def aiohttp_burst(api: Any, requests: int, concurrency: int) -> float:
    import aiohttp

    configuration = api.configuration
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    headers = {
        "Authorization": configuration.api_key["BearerToken"],
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    url = configuration.host + PATH
    connector = aiohttp.TCPConnector(ssl=context, limit=32)
    jar = aiohttp.DummyCookieJar()
    async with aiohttp.ClientSession(connector=connector, cookie_jar=jar) as session:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            data = json.dumps(event(i), separators=(",", ":")).encode()
            async with gate, session.post(url, data=data, headers=headers) as response:
                await response.read()
                assert response.status == 201, response.status

        await asyncio.gather(*(one(i) for i in range(concurrency)))  # connections open
        before = cpu_seconds()
        await asyncio.gather(*(one(i) for i in range(requests)))
        return cpu_seconds() - before


def in_threads(one: Callable[[int], None], requests: int, concurrency: int) -> float:
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(concurrency)))  # connections open
        before = cpu_seconds()
        list(pool.map(one, range(requests)))
        return cpu_seconds() - before


def generated_method(api: Any, requests: int, concurrency: int) -> float:
    from kubernetes import client

    core = client.CoreV1Api(api)
    return in_threads(lambda i: core.create_namespaced_event(NS, event(i)), requests, concurrency)


class BareConnection:
    """HTTP/1.1 over one kept-alive TLS socket: the request's bytes out, the answer read to its
    end (Content-Length or chunked), nothing parsed beyond that."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, token: str) -> None:
        self._socket = context.wrap_socket(
            socket.create_connection((host, port)), server_hostname=host
        )
        self._head = f"Host: {host}:{port}\r\nAuthorization: {token}\r\n"
        self._buffer = bytearray()

    def post(self, path: str, body: dict[str, Any]) -> int:
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self._socket.sendall(head.encode() + data)
        headers = self._until(b"\r\n\r\n").decode("latin-1").lower()
        if "content-length:" in headers:
            length = int(headers.split("content-length:")[1].split("\r\n")[0])
            self._take(length)
        else:  # chunked
            while size := int(self._until(b"\r\n"), 16):
                self._take(size + 2)
            self._until(b"\r\n")
        return int(headers[9:12])

    def _fill(self) -> None:
        chunk = self._socket.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self._buffer += chunk

    def _until(self, mark: bytes) -> bytes:
        while mark not in self._buffer:
            self._fill()
        end = self._buffer.index(mark)
        found = bytes(self._buffer[:end])
        del self._buffer[: end + len(mark)]
        return found

    def _take(self, size: int) -> None:
        while len(self._buffer) < size:
            self._fill()
        del self._buffer[:size]


def bare_socket(api: Any, requests: int, concurrency: int) -> float:
    configuration = api.configuration
    url = urlsplit(configuration.host)
    assert url.hostname and url.port
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    token = configuration.api_key["BearerToken"]
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "connection"):
            local.connection = BareConnection(url.hostname, url.port, context, token)
        status = local.connection.post(PATH, event(i))
        assert status == 201, status

    return in_threads(one, requests, concurrency)


PATHS: dict[str, Callable[[Any, int, int], float]] = {
    "controller writer (uvloop)": controller_writer,
    "writer on asyncio's loop": controller_writer_on_asyncio,
    "aiohttp session (uvloop)": aiohttp_session,
    "generated method (urllib3)": generated_method,
    "bare TLS socket (baseline)": bare_socket,
}


def measure(api: Any, requests: int, concurrency: int, rounds: int) -> dict[str, list[float]]:
    per_request: dict[str, list[float]] = {name: [] for name in PATHS}
    for _ in range(rounds):
        for name, run in PATHS.items():
            per_request[name].append(1e6 * run(api, requests, concurrency) / requests)
    return per_request


def report(per_request: dict[str, list[float]]) -> dict[str, Any]:
    floor = statistics.median(per_request["bare TLS socket (baseline)"])
    figures = {}
    for name, values in per_request.items():
        median = statistics.median(values)
        figures[name] = {
            "median_us": median,
            "min_us": min(values),
            "max_us": max(values),
            "over_baseline": median / floor,
        }
        print(
            f"{name:30s} {median:6.0f} us CPU/request "
            f"(range {min(values):.0f}-{max(values):.0f}), {median / floor:.2f} x baseline"
        )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.write_cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    from kubernetes import config

    from tests.world import control_plane

    plane = control_plane.start()
    try:
        api = config.new_client_from_config(str(plane.kubeconfig))
        started = time.monotonic()
        per_request = measure(api, args.requests, args.concurrency, args.rounds)
        print(
            f"{args.requests} Event POSTs x {args.rounds} rounds per path, {args.concurrency} "
            f"at once, kube-apiserver {plane.version} ({time.monotonic() - started:.0f} s)"
        )
        figures = report(per_request)
        api.close()
    finally:
        plane.stop()
    if args.json:
        args.json.write_text(json.dumps({"per_request": per_request, "figures": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
