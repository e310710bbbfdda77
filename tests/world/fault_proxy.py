"""A fault-injecting proxy in front of the real kube-apiserver: what the real server cannot be
made to answer on demand.

Everything it passes through is the real server's answer, byte for byte (streams included:
watches, logs). On top it can, for the tests that need it:
- count requests by method and path (the product's API calls are part of its contract: a lookup
  served from cache makes none);
- answer the next matching requests with 500, or 429 with Retry-After, or delay them;
- end every open watch stream now, as a restarted server or a dropped connection does;
- answer 404 for a whole API group, as a cluster without it does (kube-apiserver cannot stop
  serving a built-in group, or a CRD's, without a restart).

Compaction is real (`ControlPlane.compact_etcd`), and so is an outage
(`ControlPlane.stop_apiserver`): neither is played here.

The proxy terminates TLS with the API server's own certificate and key (its self-signed serving
certificate names 127.0.0.1), so a kubeconfig differs from the server's only in its port. It
forwards the caller's Authorization header: identities are the real server's to decide.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from tests.support.loops import run_until_stopped
from tests.world.faults import Faults

START_SECONDS = 30.0
# Per RFC 9110, not forwarded by a proxy; Content-Length is recomputed for the stream.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
CHUNK = 64 * 1024


def _status(code: int, reason: str, message: str, **details: object) -> web.Response:
    """A metav1.Status as kube-apiserver writes one."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        status["details"] = details
    return web.Response(status=code, text=json.dumps(status), content_type="application/json")


def _group_of(path: str) -> str | None:
    parts = [part for part in path.split("/") if part]
    if len(parts) >= 2 and parts[0] == "apis":
        return parts[1]
    return None


def _is_watch(request: web.Request) -> bool:
    return request.query.get("watch") in ("true", "1") or "/watch/" in request.path


class FaultProxy:
    """The proxy on 127.0.0.1:<free port>, serving on its own thread and event loop."""

    def __init__(self, upstream: str, ca_path: Path, key_path: Path) -> None:
        self.upstream = upstream
        self.faults = Faults()
        self.unserved_groups: set[str] = set()
        self._ca_path = ca_path
        self._key_path = key_path
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=run_until_stopped, args=(self._loop,), name="fault-proxy", daemon=True
        )
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._watches: dict[int, web.Request] = {}
        self.port = 0
        self.faults._drop_watches = self.drop_watches

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        self.port = started.result(timeout=START_SECONDS)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(START_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=START_SECONDS)

    def reset(self) -> None:
        """What one test set up is gone before the next: rules, counts, unserved groups."""
        self.faults.clear()
        self.faults.reset_counts()
        self.unserved_groups.clear()

    def drop_watches(self) -> None:
        """End every open watch stream now (thread-safe; returns once they are cut)."""

        async def cut() -> None:
            for request in list(self._watches.values()):
                if request.transport is not None:
                    request.transport.close()
            self._watches.clear()

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(START_SECONDS)

    # ----------------------------------------------------------------- serving
    async def _serve(self) -> int:
        upstream_tls = ssl.create_default_context(cafile=str(self._ca_path))
        # No pool limit: every open watch holds a connection.
        connector = aiohttp.TCPConnector(ssl=upstream_tls, limit=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # pass gzip through as the server sent it
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving_tls.load_cert_chain(self._ca_path, self._key_path)
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving_tls)
        await site.start()
        return int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        for request in list(self._watches.values()):
            if request.transport is not None:
                request.transport.close()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        # Handlers still waiting on the server (an open watch) end here, not with the loop.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        watch = _is_watch(request)
        if watch:
            # Known as open from its first byte, before the fault rules are read: a watch the
            # server has not answered yet is cut with the rest, and one that arrives after the
            # cut meets the rules set before it (drop_watches runs on this loop, so the two
            # steps never interleave with it).
            self._watches[id(request)] = request
        try:
            return await self._answer(request, watch)
        finally:
            self._watches.pop(id(request), None)

    async def _answer(self, request: web.Request, watch: bool) -> web.StreamResponse:
        error, delay = self.faults.record(request.method, request.path)
        if delay:
            await asyncio.sleep(delay)
        if error is not None:
            return self._injected(error.code, error.retry_after)
        if _group_of(request.path) in self.unserved_groups:
            # What kube-apiserver answers for a group it does not serve.
            return _status(404, "NotFound", "the server could not find the requested resource")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        data = await request.read() if request.can_read_body else None
        try:
            upstream = await self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=data,
                allow_redirects=False,
                # A body without a Content-Type goes on without one (the server reads it as
                # JSON); aiohttp would otherwise call it application/octet-stream.
                skip_auto_headers=("Content-Type",),
            )
        except aiohttp.ClientError as exc:
            # The real server is down (an outage test): the caller sees what a load balancer
            # in front of a stopped server answers.
            return _status(503, "ServiceUnavailable", f"the API server is unreachable: {exc}")
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in HOP_BY_HOP:
                response.headers.add(name, value)
        try:
            if watch and id(request) not in self._watches:
                raise ConnectionResetError("the watch was cut before the server answered")
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionResetError, aiohttp.ClientError):
            pass  # the caller went away, or the stream was cut on purpose: nothing to answer
        finally:
            upstream.release()
        return response

    @staticmethod
    def _injected(code: int, retry_after: int) -> web.Response:
        if code == 429:
            response = _status(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                retryAfterSeconds=retry_after,
            )
            response.headers["Retry-After"] = str(retry_after)
            return response
        return _status(
            code,
            "InternalError",
            "Internal error occurred: injected fault",
            causes=[{"message": "injected fault"}],
        )


def kubeconfig_through(proxy: FaultProxy, kubeconfig: Path) -> Path:
    """A copy of `kubeconfig` (beside it) whose server is the proxy: same user, same CA."""
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = proxy.url
    path = kubeconfig.with_name(f"{kubeconfig.name}-proxy")
    path.write_text(yaml.safe_dump(config))
    return path
