"""Start the emulator on its own thread and event loop; the handle is what tests hold."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .faults import Faults
from .server import KubeAPIServer
from .tls import TlsMaterial, tls_material, write_kubeconfig


@dataclass
class KubeAPIHandle:
    url: str
    kubeconfig_path: Path
    ca_path: Path
    server: KubeAPIServer
    tls: TlsMaterial
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _runner: web.AppRunner = field(repr=False)
    _workdir: tempfile.TemporaryDirectory[str] = field(repr=False)
    _sites: list[web.TCPSite] = field(repr=False, default_factory=list)

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def go_offline(self) -> None:
        """An outage as clients see one: stop listening (new connections are refused) and cut
        every open connection, watches included. The stored objects stay for `come_back`."""

        async def cut() -> None:
            for site in self._sites:
                await site.stop()
            self._sites.clear()
            server = self._runner.server
            for handler in server.connections if server is not None else ():
                handler.force_close()
                if handler.transport is not None:
                    handler.transport.abort()

        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(timeout=10)

    def come_back(self) -> None:
        """Listen again on the same address, with the same objects and resourceVersions."""

        async def listen() -> None:
            site = web.TCPSite(
                self._runner, "127.0.0.1", self.port, ssl_context=self.tls.server_ssl_context()
            )
            await site.start()
            self._sites.append(site)

        asyncio.run_coroutine_threadsafe(listen(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._workdir.cleanup()

    def __enter__(self) -> KubeAPIHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_kubeapi(
    *, history_size: int = 1000, bookmark_interval: float = 60.0, port: int = 0
) -> KubeAPIHandle:
    """Serve a fresh emulator on https://127.0.0.1:<port> (a free port by default)."""
    material = tls_material()
    server = KubeAPIServer(
        history_size=history_size,
        bookmark_interval=bookmark_interval,
        ca_pem=material.ca_path.read_text(),
    )
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(server.app, shutdown_timeout=0.5, access_log=None)
    ready = threading.Event()
    failure: list[BaseException] = []
    bound: list[int] = []
    sites: list[web.TCPSite] = []

    async def serve() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=material.server_ssl_context())
        await site.start()
        sites.append(site)
        bound.append(runner.addresses[0][1])

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve())
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    thread = threading.Thread(target=run, name="kubeapi-emulator", daemon=True)
    thread.start()
    if not ready.wait(timeout=30):
        raise TimeoutError("the Kubernetes API emulator did not start")
    if failure:
        raise failure[0]
    url = f"https://127.0.0.1:{bound[0]}"
    server.tokens.issuer = url  # its discovery documents are served at this URL
    workdir = tempfile.TemporaryDirectory(prefix="kubeapi-")
    kubeconfig = write_kubeconfig(Path(workdir.name) / "kubeconfig", url, material)
    return KubeAPIHandle(
        url, kubeconfig, material.ca_path, server, material, loop, thread, runner, workdir, sites
    )
