"""`gpu-admission serve`: the webhooks, their certificates, the cluster caches and the metrics
listener in one process, with a graceful shutdown. The dataset controller is a process of its
own (`gpu-admission controller`), so its bursts never take the webhooks' interpreter.

Start-up order: certificates (the HTTPS site needs one), cluster caches, the HTTPS and metrics
sites, then background services. /readyz reports what is not ready yet: certificates, cache sync.

Shutdown (SIGTERM or SIGINT): /readyz turns 503 at once; the service keeps answering for
`server.drain_seconds`, each answer closing its connection, then closes its listener and its idle
connections, and answers what it has received (for up to `server.shutdown_grace_seconds`;
`webhooks/service/draining.py`); background services stop in reverse order, the caches and the
metrics listener last; then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from kubernetes.client import ApiClient

from certs.serving import ServingCertificates
from gpu_admission.cluster.kube import api_client, has_cluster_config
from gpu_admission.cluster.live_view import LiveClusterView
from gpu_admission.cluster.view import ClusterView, MissResolver, StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.process.heap import freeze_long_lived
from gpu_admission.process.http_probes import create_metrics_app
from gpu_admission.process.loop_lag import LoopLag
from gpu_admission.process.metrics import NOT_KNOWN, Metrics
from gpu_admission.process.stop_signals import stop_signals
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.interface import PolicySet
from webhooks.service.draining import DRAIN, Drain, close_gracefully
from webhooks.service.server import create_app, make_runner

log = logging.getLogger(__name__)

SHUTTING_DOWN = "shutdown in progress"
SERVICE_STOP_TIMEOUT_SECONDS = 10.0
INFORMER_JOIN_SECONDS = 5.0
SYNC_POLL_SECONDS = 0.5


class BackgroundService(Protocol):
    """Something that runs beside the webhooks (certificate renewal, the informers).
    `start` returns once it is running; `stop` returns once it has stopped."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class _Informers:
    """The informer-fed cluster view as a background service; its threads watch the API."""

    name = "informers"

    def __init__(self, view: LiveClusterView) -> None:
        self.view = view
        self._freezer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.view.start()
        self._freezer = asyncio.create_task(self._freeze_once_synced())

    async def _freeze_once_synced(self) -> None:
        # The caches' first lists are the bulk of what lives on; /readyz holds traffic off
        # until then, so the one collection this takes delays no request.
        while self.view.ready():
            await asyncio.sleep(SYNC_POLL_SECONDS)
        freeze_long_lived("informers synced")

    async def stop(self) -> None:
        if self._freezer is not None:
            self._freezer.cancel()
        self.view.stop()
        if not await asyncio.to_thread(self.view.join, INFORMER_JOIN_SECONDS):
            log.warning("informer threads did not stop within %ss", INFORMER_JOIN_SECONDS)


class AdmissionServer:
    """Everything `serve` runs, startable and stoppable in-process."""

    def __init__(
        self,
        config: Config,
        api: ApiClient | None,
        policy_set: PolicySet | None = None,
        metrics: Metrics | None = None,
        extra_services: Sequence[BackgroundService] | None = None,
        cluster: tuple[ClusterView, MissResolver | None] | None = None,
    ) -> None:
        """`cluster` replaces the informer-fed view and resolver (embedding, tests); by default
        they come from `api`, or an empty view offline."""
        self.config = config
        self.api = api
        self.policy_set = policy_set if policy_set is not None else build_policy_set(config)
        self.metrics = metrics or Metrics()
        self.extra_services = list(extra_services or ())
        self.certificates = ServingCertificates(config.certs, api)
        self.cluster = cluster
        self.informers: LiveClusterView | None = None
        self.draining = False
        self._started: list[BackgroundService] = []
        self._webhook_runner: web.AppRunner | None = None
        self._drain: Drain | None = None
        self._metrics_runner: web.AppRunner | None = None
        self.loop_lag = LoopLag(self.metrics)
        self.metrics.watch_readiness(self.readiness)
        self.metrics.gauge_of(
            "serving_certificate_expiry_timestamp_seconds",
            "When the serving certificate now loaded expires (Unix time); NaN before one is",
            self._certificate_expiry,
        )

    def _certificate_expiry(self) -> float:
        current = self.certificates.reloader.current
        return current.not_after.timestamp() if current is not None else NOT_KNOWN

    # -- readiness ----------------------------------------------------------------------------

    def readiness(self) -> list[str]:
        waiting = [SHUTTING_DOWN] if self.draining else []
        waiting += self.certificates.not_ready()
        if self.informers is not None:
            waiting += self.informers.ready()
        return waiting

    # -- lifecycle ----------------------------------------------------------------------------

    def _cluster(self) -> tuple[ClusterView, MissResolver | None]:
        if self.cluster is not None:
            return self.cluster
        if self.api is None:
            log.warning(
                "no kubeconfig and no in-cluster configuration: serving without informers; "
                "policies see an empty cluster (no nodes, Secrets, ServiceAccounts or PVCs)"
            )
            return StaticClusterView(), None
        self.informers = LiveClusterView(self.api, self.config)
        return self.informers, self.informers

    async def start(self) -> None:
        """Load certificates, start caches, open both listeners and the background services.
        On failure, whatever started is stopped again before the error propagates."""
        try:
            await self.certificates.load()
            view, resolver = self._cluster()
            await self._start_service(self.certificates)
            if self.informers is not None:
                await self._start_service(_Informers(self.informers))
            server = self.config.server
            app = create_app(
                self.config, self.policy_set, view, resolver, self.readiness, self.metrics
            )
            self._drain = app[DRAIN]
            self._webhook_runner = make_runner(app, server.shutdown_grace_seconds)
            await self._webhook_runner.setup()
            await web.TCPSite(
                self._webhook_runner,
                server.host,
                server.port,
                ssl_context=self.certificates.reloader.context,
            ).start()
            if server.metrics_port:
                self._metrics_runner = make_runner(create_metrics_app(self.metrics), 1.0)
                await self._metrics_runner.setup()
                await web.TCPSite(self._metrics_runner, server.host, server.metrics_port).start()
            await self._start_service(self.loop_lag)
            for service in self.extra_services:
                await self._start_service(service)
        except BaseException:
            await self.stop()
            raise
        freeze_long_lived("started")
        log.info(
            "serving admission webhooks",
            extra={
                "https": self.addresses(self._webhook_runner),
                "metrics": self.addresses(self._metrics_runner),
                "informers": self.informers is not None,
            },
        )

    async def _start_service(self, service: BackgroundService) -> None:
        await service.start()
        self._started.append(service)

    @staticmethod
    def addresses(runner: web.AppRunner | None) -> list[str]:
        if runner is None:
            return []
        return [f"{a[0]}:{a[1]}" for a in runner.addresses]

    async def stop(self) -> None:
        """Stop gracefully: unready at once, drain, finish in-flight requests, then the rest."""
        self.draining = True
        if self._webhook_runner is not None and self._drain is not None:
            began = time.monotonic()
            server = self.config.server
            await close_gracefully(
                self._webhook_runner,
                self._drain,
                server.drain_seconds,
                server.shutdown_grace_seconds,
            )
            self._webhook_runner = None
            log.info("drained and finished in-flight requests in %.2fs", time.monotonic() - began)
        while self._started:
            service = self._started.pop()
            try:
                await asyncio.wait_for(service.stop(), SERVICE_STOP_TIMEOUT_SECONDS)
            except Exception:
                log.exception("background service %s did not stop cleanly", service.name)
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
            self._metrics_runner = None


def cluster_client(config: Config) -> ApiClient | None:
    """The API client for `--kubeconfig` or the in-cluster ServiceAccount; None offline.
    Raises ClusterConfigError when a named kubeconfig cannot be used."""
    if not has_cluster_config(config.kubeconfig):
        return None
    return api_client(config.kubeconfig)


async def serve(config: Config) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    api = cluster_client(config)
    try:
        with stop_signals() as received:
            server = AdmissionServer(config, api)
            # A stop signal while starting (waiting for an unreachable API server, say) ends
            # the start: `start` stops what it had started when cancelled.
            starting = asyncio.ensure_future(server.start())
            await asyncio.wait({starting, received}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
                log.info("received %s while starting: stopped", received.result())
                return
            starting.result()  # a failed start raises here
            name = await received
            log.info("received %s: shutting down", name)
            await server.stop()
            log.info("shutdown complete")
    finally:
        if api is not None:
            api.close()
