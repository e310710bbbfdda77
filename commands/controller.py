"""`gpu-admission controller`: the dataset controller, in a process of its own.

The webhooks answer the API server on every pod creation; the controller reconciles bursts of
dataset PVCs. In one process they shared one interpreter and one GIL, so a burst of reconciles
showed up as admission latency for every pod in the cluster. Here each has its own: the
controller runs as a second Deployment of the same image and config (as Kyverno runs its
background and cleanup controllers beside its admission controller), with its own
ServiceAccount, so each side holds only the permissions it uses. Every replica campaigns for the
Lease; only the leader reconciles.

The leader also compares the installed admission objects (policies, bindings, webhook
configurations) with what the configuration implies, and says what is missing or stale
(`controllers/install_check`; the judgement is webhooks/apiserver_policies/install_expectation.py).

With `idle.prometheus_url` set, the leader also reads the idle-GPU rules from Prometheus,
announces idle workloads and, where a namespace opts in, gives their GPUs back
(`controllers/idle`).

With `audit.interval` set, the leader also scans what the cluster holds with every policy and
writes one report per namespace (`controllers/reports`); the scan is the audit
`gpu-admission audit` runs (`webhooks/audit/cluster.py`), wired here, where parts meet.

It serves plain HTTP on the metrics port: /metrics, /healthz (the event loop answers) and /readyz
(its caches have listed, and the Lease can be read: a standby that cannot reach its Lease says
why). SIGTERM stops the work, releases the Lease (so a standby takes over at once) and exits 0.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from kubernetes.client import ApiClient

from controllers.dataset import DatasetController
from controllers.idle import IdleChecker, IdleMetrics
from controllers.install_check import InstallChecker
from controllers.reports import AuditScanner
from controllers.reports.scanner import ScanMetrics, ScanResult
from gpu_admission.cluster.live_view import LiveClusterView
from gpu_admission.config.model import Config
from gpu_admission.process.heap import freeze_long_lived
from gpu_admission.process.http_probes import create_metrics_app
from gpu_admission.process.metrics import Metrics
from gpu_admission.process.stop_signals import stop_signals
from webhooks.apiserver_policies.install_expectation import InstallExpectation, lacks_credentials
from webhooks.audit.cluster import audit_cluster, exempt_namespaces
from webhooks.dispatch.registry import build_policy_set

log = logging.getLogger(__name__)

SHUTTING_DOWN = "shutdown in progress"
# How long a scan waits for the lookup caches' first lists before it fails with their errors.
SCAN_SYNC_SECONDS = 60.0


def audit_scan(config: Config, api: ApiClient, view: LiveClusterView) -> ScanResult:
    """One background audit: the same audit as `gpu-admission audit`, over the caches in
    `view` (started by the caller) and one paginated list per audited kind."""
    if not all(i.wait_synced(SCAN_SYNC_SECONDS) for i in view.informers):
        raise RuntimeError(f"the lookup caches have not listed: {', '.join(view.ready())}")
    exempt = exempt_namespaces(api, config)
    run = audit_cluster(api, config, build_policy_set(config), view, exempt)
    return ScanResult(run.findings, run.objects, run.list_requests + 1)


class ControllerProcess:
    """Everything `controller` runs, startable and stoppable in-process."""

    def __init__(
        self,
        config: Config,
        api: ApiClient,
        metrics: Metrics | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.controller = DatasetController(api, config, self.metrics, identity=identity)
        # The install checks itself while this replica leads (controllers/install_check).
        # It also writes the admission objects the configuration implies (repair.py).
        expectation = InstallExpectation(config)
        self.install_check = InstallChecker(
            api,
            config,
            self.metrics,
            expectation.check,
            lambda pod, secrets: lacks_credentials(pod, secrets, config),
            self.controller.api,
            implied=expectation.objects if config.install.write_admission_objects else None,
        )
        self.controller.add_term_hooks(self.install_check.start, self.install_check.stop)
        self.scan_view: LiveClusterView | None = None
        self.scanner: AuditScanner | None = None
        scan_metrics = ScanMetrics(self.metrics)
        if config.audit.interval > 0:
            view = self.scan_view = LiveClusterView(api, config)
            self.scanner = AuditScanner(
                api,
                config,
                scan_metrics,
                lambda: audit_scan(config, api, view),
                self.controller.leading,
            )
        # Idle GPUs: announced and, where a namespace opts in, given back (controllers/idle).
        idle_metrics = IdleMetrics(self.metrics)
        self.idle_checker: IdleChecker | None = None
        if config.idle.prometheus_url is not None:
            self.idle_checker = IdleChecker(
                api, config, idle_metrics, self.controller.leading, self.controller.identity
            )
        self.draining = False
        self._runner: web.AppRunner | None = None
        self._freezer: asyncio.Task[None] | None = None
        self.metrics.watch_readiness(self.readiness)

    def readiness(self) -> list[str]:
        return ([SHUTTING_DOWN] if self.draining else []) + self.controller.readiness()

    def addresses(self) -> list[str]:
        if self._runner is None:
            return []
        return [f"{a[0]}:{a[1]}" for a in self._runner.addresses]

    async def start(self) -> None:
        server = self.config.server
        if server.metrics_port:
            app = create_metrics_app(self.metrics, self.readiness)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await self._runner.setup()
            await web.TCPSite(self._runner, server.host, server.metrics_port).start()
        try:
            await self.controller.start()
        except BaseException:
            await self.stop()
            raise
        if self.scan_view is not None and self.scanner is not None:
            self.scan_view.start()
            self.scanner.start()
        if self.idle_checker is not None:
            self.idle_checker.start()
        freeze_long_lived("started")
        self._freezer = asyncio.create_task(self._freeze_once_leading())

    async def _freeze_once_leading(self) -> None:
        # Leading starts with the caches' first lists: the bulk of what lives on.
        await self.controller.leading.wait()
        freeze_long_lived("caches synced")
        log.info(
            "dataset controller started",
            extra={
                "identity": self.controller.identity,
                "metrics": self.addresses(),
                "event_loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
            },
        )

    async def stop(self) -> None:
        self.draining = True
        if self._freezer is not None:
            self._freezer.cancel()
        if self.scanner is not None:
            await self.scanner.stop()
        if self.idle_checker is not None:
            await self.idle_checker.stop()
        if self.scan_view is not None:
            self.scan_view.stop()
        try:
            await self.controller.stop()  # stops reconciling, then releases the Lease
        finally:
            if self._runner is not None:
                await self._runner.cleanup()
                self._runner = None


async def run_controller(config: Config, api: ApiClient) -> None:
    """Run until SIGTERM or SIGINT, then stop cleanly."""
    with stop_signals() as received:
        process = ControllerProcess(config, api)
        await process.start()
        name = await received
        log.info("received %s: stopping the controller", name)
        await process.stop()
        log.info("stopped")
