"""The background scan: while this replica leads, every `audit.interval`, the audit of what the
cluster holds (the same function as `gpu-admission audit`, brought by the entry point) becomes
one report per namespace, and the violations become metrics.

The scan reads the informers' caches for what policies look up (nodes, ServiceAccounts,
credential Secrets, PVCs, DRA objects) and one paginated list per audited kind; it never makes a
request per object. A scan that fails (RBAC not installed, the CRD missing) says why in the log
and in `gpu_admission_audit_scans_total{outcome="failed"}`, and the next one tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from controllers.reports.build import REPORT_KINDS, desired_reports
from controllers.reports.store import ReportStore
from gpu_admission.admission.findings import Finding
from gpu_admission.cluster.pages import Pages
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics

log = logging.getLogger(__name__)


def _status_message(error: ApiException) -> str:
    """The Status message the API server sent (`deployments.apps is forbidden: User ... cannot
    list ...`): it names what was refused, and carries no object's contents."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


OVERLAY_HINT = (
    "install manifests/overlays/policy-reports (the scan's RBAC) and the report CRD "
    "(wgpolicyk8s.io PolicyReport, or openreports.io Report when audit.report_format is "
    "openreports)"
)


@dataclass
class ScanResult:
    findings: list[Finding]
    objects: dict[str, int] = field(default_factory=dict)  # audited, by kind
    list_requests: int = 0


class ScanMetrics:
    """Registered whether the scan runs or not, so dashboards and alerts find their series."""

    def __init__(self, metrics: Metrics) -> None:
        self.violations = metrics.gauge(
            "audit_violations",
            "What the last background scan found among the objects the cluster holds, by policy, "
            "the policy's mode and the object's kind: objects that policy would refuse or change "
            "if they were created now",
            ["policy", "mode", "kind"],
        )
        self.scans = metrics.counter(
            "audit_scans", "Background scans, by outcome (succeeded, failed)", ["outcome"]
        )
        self.duration = metrics.gauge(
            "audit_scan_duration_seconds", "Wall time of the last background scan that finished"
        )
        self.last_success = metrics.gauge(
            "audit_last_success_timestamp_seconds",
            "When the last background scan that wrote its reports finished (Unix time)",
        )
        self.requests = metrics.gauge(
            "audit_scan_api_requests",
            "API requests of the last background scan: its paginated lists and report writes",
        )
        self.writes = metrics.counter(
            "audit_report_writes",
            "Reports written by background scans, by operation (created, updated, deleted, "
            "unchanged, conflicted)",
            ["operation"],
        )

    def found(self, findings: list[Finding]) -> None:
        counted: dict[tuple[str, str, str], int] = {}
        for f in findings:
            key = (f.policy, f.mode, f.kind)
            counted[key] = counted.get(key, 0) + 1
        self.violations.clear()
        for labels, count in counted.items():
            self.violations.labels(*labels).set(count)


class AuditScanner:
    """Scans while `leading` is set; `scan()` is blocking and runs in a thread."""

    def __init__(
        self,
        api: ApiClient,
        config: Config,
        metrics: ScanMetrics,
        scan: Callable[[], ScanResult],
        leading: asyncio.Event,
    ) -> None:
        self.config = config
        self.scan = scan
        self.leading = leading
        self.metrics = metrics
        self.store = ReportStore(
            api,
            REPORT_KINDS[config.audit.report_format],
            config.audit.report_name,
            config.names.results_omitted,
        )
        self.scans_done = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="audit-scan")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def scan_now(self) -> None:
        """Start the next scan without waiting out the interval (tests, and a future trigger)."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            if not self.leading.is_set():
                # A replica that does not lead reports nothing: a former leader's counts would
                # outlive the violations they count.
                self.metrics.violations.clear()
                await self.leading.wait()
            await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.audit.interval)
            self._wake.clear()

    async def run_once(self) -> bool:
        started = time.monotonic()
        try:
            result = await asyncio.to_thread(self.scan)
            if not self.leading.is_set():  # lost the Lease meanwhile: the new leader writes
                return False
            requests = await asyncio.to_thread(self._write, result)
        except ApiException as error:
            said = _status_message(error)
            self._failed(
                f"the API server answered {error.status} {error.reason}"
                + (f" ({said})" if said else ""),
                error,
            )
            return False
        except Exception as error:  # a failed scan must not end the loop; the next one retries
            self._failed(f"{type(error).__name__}: {error}", error)
            return False
        elapsed = time.monotonic() - started
        self.metrics.found(result.findings)
        self.metrics.scans.labels("succeeded").inc()
        self.metrics.duration.set(elapsed)
        self.metrics.requests.set(result.list_requests + requests)
        self.metrics.last_success.set(time.time())
        self.scans_done += 1
        log.info(
            "background audit written",
            extra={
                "objects": result.objects,
                "findings": len(result.findings),
                "api_requests": result.list_requests + requests,
                "seconds": round(elapsed, 3),
            },
        )
        return True

    def _write(self, result: ScanResult) -> int:
        pages = Pages()
        current = self.store.current(pages)
        desired = desired_reports(
            result.findings,
            self.store.kind,
            self.store.name,
            int(time.time()),
            current,
            self.config.audit.max_results_per_report,
            self.config.names.results_omitted,
        )
        tally = self.store.write(current, desired)
        for operation, count in tally.by_operation.items():
            self.metrics.writes.labels(operation).inc(count)
        return pages.requests + tally.requests

    def _failed(self, why: str, error: BaseException) -> None:
        self.metrics.scans.labels("failed").inc()
        hint = (
            f"; {OVERLAY_HINT}"
            if isinstance(error, ApiException)
            and error.status
            in (
                403,
                404,
            )
            else ""
        )
        log.error("background audit failed: %s%s", why, hint)
