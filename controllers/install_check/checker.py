"""The install checks itself, in the leading controller replica.

Why the controller and not the service: one replica leads, so each finding is one Event and one
log line for the whole install, and one watch per kind for the cluster; the webhooks' interpreter
never runs the comparison, so it costs no admission anything. Why not readiness: a missing policy
must not take the webhooks down too (docs/operations.md).

While this replica leads: the caches of `live.py`, and a comparison (`judge`, brought by the
entry point: webhooks/apiserver_policies/install_expectation.py) at start and after every change
they see, coalesced. Given what the configuration implies (`implied`), what a comparison finds
missing or stale is written first (`repair.py`), and the report said is the one after the
writes. The running pods of the ServiceAccounts whose credentials are not routed are counted
(`with_running_counts`: a list per namespace, or one of the cluster when they are many), after
each comparison and every RECOUNT_SECONDS while any is found: pods come and go without the
watched objects changing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api
from kubernetes.client.exceptions import ApiException

from controllers.install_check.live import LiveInstall
from controllers.install_check.repair import NOT_OWNED, AdmissionObjectWriter, Write, writes
from controllers.install_check.report import InstallMetrics, InstallReporter
from controllers.writes.dataset import ApiWriter
from gpu_admission.admission.installed import InstallReport, LiveAdmission
from gpu_admission.cluster.informer import describe_error
from gpu_admission.cluster.installed_objects import Lacks, with_running_counts
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from gpu_admission.process.quiet_log import QuietLog

log = logging.getLogger(__name__)

Judge = Callable[[LiveAdmission], InstallReport]
Implied = Callable[[LiveAdmission], dict[tuple[str, str], dict[str, Any]]]

RECOUNT_SECONDS = 60.0
# After writing, how long the next comparison waits for the watch to see the writes.
REPAIR_SETTLE_SECONDS = 10.0
# A write that did not hold (another writer fighting) is made again after this long, not at once.
REWRITE_SECONDS = 300.0
OBJECTS_WRITTEN = "AdmissionObjectsWritten"  # a Normal Event on the service's Deployment
SYNC_POLL_SECONDS = 0.5
UNSYNCED_WARNING_SECONDS = 30.0


class InstallChecker:
    def __init__(
        self,
        api: ApiClient,
        config: Config,
        metrics: Metrics,
        judge: Judge,
        lacks: Lacks,
        writer: ApiWriter,
        implied: Implied | None = None,
    ) -> None:
        self._api = api
        self._config = config
        self._judge = judge
        self._lacks = lacks
        self._writer = writer
        # With `implied`, this replica owns the admission objects: it writes what the check finds
        # missing or stale (repair.py) before saying anything of it.
        self._implied = implied
        self._objects = AdmissionObjectWriter(api, writer.raw) if implied is not None else None
        # Each write made -> when: one that does not hold is made again after REWRITE_SECONDS.
        self._last_writes: dict[tuple[str, str, str, str], float] = {}
        self._quiet = QuietLog(log)
        self.reporter = InstallReporter(InstallMetrics(metrics), self._post_event)
        self._metrics = self.reporter.metrics
        self._live: LiveInstall | None = None
        self._task: asyncio.Task[None] | None = None
        self._deployment: dict[str, str] | None = None
        self.recount_seconds = RECOUNT_SECONDS
        self.report: InstallReport | None = None  # the last one published
        self.published = asyncio.Condition()  # notified after each publish (tests wait on it)

    # -- a term of leadership ---------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()  # this term's: set by the informers' threads

        def on_change() -> None:  # an informer thread
            loop.call_soon_threadsafe(changed.set)

        self._live = LiveInstall(self._api, self._config, on_change)
        self._live.start()
        self._task = asyncio.create_task(self._run(self._live, changed))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.reporter.forget()
        self.report = None

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self, live: LiveInstall, changed: asyncio.Event) -> None:
        waited = 0.0
        while not await asyncio.to_thread(_synced_within, live, SYNC_POLL_SECONDS):
            waited += SYNC_POLL_SECONDS
            if waited == UNSYNCED_WARNING_SECONDS:  # once: RBAC not installed, say
                log.warning("install check: waiting for its caches: %s", "; ".join(live.unsynced()))
        self._deployment = await asyncio.to_thread(self._deployment_ref)
        while True:
            changed.clear()
            try:
                snapshot = live.snapshot()
                report = await self._check(snapshot)
            except Exception:  # the next change, or the next recount, tries again
                log.exception("install check: the comparison failed")
                self._metrics.checks.labels("failed").inc()
            else:
                self._metrics.checks.labels("succeeded").inc()
                written = await self._repaired(snapshot, report)
                if written:
                    # Said once the watch has seen the writes: the next comparison's report.
                    await self._settle(live, changed, written)
                    continue
                await self.reporter.publish(report)
                self.report = report
                async with self.published:
                    self.published.notify_all()
            waiting = self.recount_seconds if self.report and self.report.credentials else None
            if self._implied is not None and self.report and self.report.problems:
                waiting = min(waiting or REWRITE_SECONDS, REWRITE_SECONDS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), waiting)

    async def _settle(
        self, live: LiveInstall, changed: asyncio.Event, written: set[tuple[str, str]]
    ) -> None:
        """Wait (at most REPAIR_SETTLE_SECONDS) until the watch shows every written object as
        the configuration implies it, so that no report names a write still on its way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REPAIR_SETTLE_SECONDS
        while (remaining := deadline - loop.time()) > 0:
            changed.clear()
            report = self._judge(live.snapshot())
            if not {(p.kind, p.name) for p in report.problems} & written:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    async def _repaired(
        self, snapshot: LiveAdmission, report: InstallReport
    ) -> set[tuple[str, str]]:
        """Write what puts `report` right. A write that was made, and is due again for the next
        report, did not hold (another writer puts its own version back): it is made again only
        after REWRITE_SECONDS, and the report says what differs meanwhile. A write that failed
        (a refusal, a conflict) is tried again at the next change, its failure said once.
        The (kind, name) of what was written."""
        if self._implied is None or self._objects is None:
            return set()
        if not report.problems:
            self._last_writes = {}
        now = time.monotonic()
        planned = [
            w
            for w in writes(report, self._implied(snapshot), snapshot.objects)
            if now - self._last_writes.get(_write_key(w), -REWRITE_SECONDS) >= REWRITE_SECONDS
        ]
        if not planned:
            return set()
        owner = await asyncio.to_thread(self._objects.read_owner)
        done = []
        for write in planned:
            key = (write.kind, write.name, str(write.action))
            try:
                await self._objects.write(write, owner)
            except (ApiException, OSError, ValueError) as error:
                self._metrics.writes.labels(write.kind, write.action, "failed").inc()
                self._quiet.failed(
                    key,
                    f"install check: cannot write {write.kind} {write.name} ({write.action}): "
                    f"{describe_error(error)}",
                )
                continue
            self._quiet.recovered(key, f"install check: {write.kind} {write.name} written again")
            self._last_writes[_write_key(write)] = now
            self._metrics.writes.labels(write.kind, write.action, "done").inc()
            log.info(
                "install check: %s %s %s (it was %s)",
                write.kind,
                write.name,
                write.action,
                write.was,
                extra={"kind": write.kind, "object": write.name, "action": str(write.action)},
            )
            done.append(write)
        if done:
            await self._post_event(OBJECTS_WRITTEN, written_message(done), None, "Normal")
        return {(w.kind, w.name) for w in done}

    async def _check(self, snapshot: LiveAdmission) -> InstallReport:
        report = self._judge(snapshot)
        if not report.credentials:
            return report
        try:
            counted = await asyncio.to_thread(
                with_running_counts, self._api, report.credentials, self._lacks
            )
        except (ApiException, OSError, ValueError) as error:
            log.warning(
                "install check: cannot count the running pods of the ServiceAccounts whose "
                "credentials are not routed: %s",
                describe_error(error),
            )
            return report
        return dataclasses.replace(report, credentials=tuple(counted))

    # -- Events on the service's Deployment ---------------------------------------------------

    def _deployment_ref(self) -> dict[str, str]:
        """The Deployment the findings are told on, with its uid where it can be read (kubectl
        describe finds Events by uid); without, `kubectl get events` still shows them."""
        certs = self._config.certs
        ref = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": certs.namespace,
            "name": certs.service_name,
        }
        try:
            deployment = AppsV1Api(self._api).read_namespaced_deployment(
                certs.service_name, certs.namespace
            )
            ref["uid"] = str(deployment.metadata.uid)
        except (ApiException, OSError) as error:
            log.warning(
                "install check: cannot read the Deployment %s/%s that its Events are about: %s",
                certs.namespace,
                certs.service_name,
                describe_error(error),
            )
        return ref

    async def _post_event(
        self,
        reason: str,
        message: str,
        involved: dict[str, str] | None = None,
        kind: str = "Warning",
    ) -> None:
        about = involved or self._deployment
        if about is not None:
            await self._writer.event(about, kind, reason, message)


def written_message(done: list[Write]) -> str:
    """The Event's words: each object that was missing or stale, then those only taken over
    (an Event holds 1 KiB: the repairs come first)."""
    repaired = [w for w in done if w.was != NOT_OWNED]
    taken = [w for w in done if w.was == NOT_OWNED]
    parts = [f"{w.kind} {w.name} {w.action} (it was {w.was})" for w in repaired]
    if taken:
        names = ", ".join(f"{w.kind} {w.name}" for w in taken)
        parts.append(f"taken over as they were ({NOT_OWNED}): {names}")
    return "The install's admission objects, put as the configuration implies them: " + (
        "; ".join(parts)
    )


def _write_key(write: Write) -> tuple[str, str, str, str]:
    body = json.dumps(write.obj, sort_keys=True) if write.obj is not None else ""
    return (write.kind, write.name, str(write.action), body)


def _synced_within(live: LiveInstall, seconds: float) -> bool:
    """Whether every cache has listed, waiting at most `seconds` in all (a thread's wait)."""
    deadline = time.monotonic() + seconds
    return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in live.informers)
