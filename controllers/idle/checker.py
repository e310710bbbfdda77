"""The idle check: while this replica leads, every `idle.interval`, the workloads the idle rule
names are announced once per idle stretch and, where their namespace opts in, given back after
the grace period (decide.py). Every announcement and give-back is an Event on the workload, a
metric and a line of the audit log (logger `gpu_admission.audit.idle`).

The check trusts only fresh figures (figures.py): a Prometheus that cannot answer makes the
check fail, and nothing changes; before a give-back, the range since the announcement must show
the workload idle all along. A workload that the rule no longer names has ended its stretch: its
announcement annotation is removed, and the next stretch is announced anew. Announcements live on
the objects, so a restarted or new leader neither repeats them nor shortens a grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.idle import figures
from controllers.idle.decide import (
    IdleWorkload,
    Seen,
    Step,
    announcement,
    decide,
    dry_run_message,
    gpu_hours_returned,
    returned_message,
    rfc3339,
)
from controllers.idle.targets import (
    KINDS,
    NOTEBOOK,
    Kind,
    annotations,
    give_back_patch,
    notebook_of,
    restore_command,
)
from controllers.idle.workload_api import WorkloadApi, reference
from gpu_admission.config.model import Config
from gpu_admission.names import (
    GPU_IDLE_REASON,
    GPU_RETURN_FAILED_REASON,
    GPUS_RETURNED_REASON,
)
from gpu_admission.process.metrics import Metrics
from gpu_admission.process.prometheus_api import PrometheusError

log = logging.getLogger(__name__)
audit = logging.getLogger("gpu_admission.audit.idle")

RBAC_HINT = (
    "the controller's ServiceAccount needs get and patch on the workload's kind "
    "(manifests/components/idle-gpus has the ClusterRole)"
)
Key = tuple[str, str, str]


class IdleCheckIncomplete(Exception):
    """Some idle workloads could not be read or changed; the others were handled."""


class IdleMetrics:
    """Registered whether the check runs or not, so dashboards and alerts find their series."""

    def __init__(self, metrics: Metrics) -> None:
        self.returned = metrics.counter(
            "gpu_hours_returned",
            "GPU-hours given back by idle workloads, by namespace and owner kind: at each "
            "give-back, the GPUs it freed times the hours they had been held idle",
            ["namespace", "kind"],
        )
        self.actions = metrics.counter(
            "idle_workload_actions",
            "What the idle check did, by action: announced (a GPUIdle Event), given_back, "
            "dry_run (said what would be given back), failed (a give-back the API server refused)",
            ["action"],
        )
        self.checks = metrics.counter(
            "idle_checks", "Idle checks, by outcome (succeeded, failed)", ["outcome"]
        )
        self.idle = metrics.gauge(
            "idle_workloads", "Workloads the last idle check found idle, with fresh figures"
        )
        self.last_success = metrics.gauge(
            "idle_last_check_timestamp_seconds",
            "When the last idle check that read Prometheus finished (Unix time)",
        )


@dataclass
class Memory:
    """This leader's view of the stretches it has announced: key -> announcement time."""

    announced: dict[Key, float] = field(default_factory=dict)
    said_dry_run: set[Key] = field(default_factory=set)
    said_failed: set[Key] = field(default_factory=set)

    def forget(self, key: Key) -> None:
        self.announced.pop(key, None)
        self.said_dry_run.discard(key)
        self.said_failed.discard(key)


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Target:
    """The object a workload is announced and given back on."""

    seen: Seen
    name: str

    @property
    def kind(self) -> Kind | None:
        return self.seen.kind


class IdleChecker:
    """Checks while `leading` is set; `check()` is blocking and runs in a thread."""

    def __init__(
        self,
        api: client.ApiClient,
        config: Config,
        metrics: IdleMetrics,
        leading: asyncio.Event,
        identity: str,
    ) -> None:
        assert config.idle.prometheus_url is not None
        self.url = config.idle.prometheus_url
        self.config = config.idle
        self.names = config.names
        self.api = WorkloadApi(api, identity)
        self.metrics = metrics
        self.leading = leading
        self.memory = Memory()
        self.checks_done = 0
        self.last_check_started = 0.0  # of the last check that read Prometheus (Unix time)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="idle-check")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def check_now(self) -> None:
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            if not self.leading.is_set():
                self.memory = Memory()  # the next leader reads the objects' annotations
                await self.leading.wait()
            await self.run_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.interval)
            self._wake.clear()

    async def run_once(self) -> bool:
        started = time.time()
        try:
            await asyncio.to_thread(self.check, started)
        except PrometheusError as error:
            self.metrics.checks.labels("failed").inc()
            log.error("idle check failed, nothing changed: %s", error)
            return False
        except IdleCheckIncomplete as error:
            self.metrics.checks.labels("failed").inc()
            log.error("idle check failed for some workloads: %s", error)
            return False
        except Exception as error:  # a failed check must not end the loop; the next one retries
            self.metrics.checks.labels("failed").inc()
            log.exception("idle check failed, nothing changed: %s", error)
            return False
        self.metrics.checks.labels("succeeded").inc()
        self.metrics.last_success.set(time.time())
        self.last_check_started = started
        self.checks_done += 1
        return True

    def check(self, now: float) -> None:
        idle = figures.idle_now(self.url)
        self.metrics.idle.set(len(idle))
        namespaces: dict[str, dict[str, str]] = {}
        problems: list[str] = []
        for key, gpus in sorted(idle.items()):
            if not self.leading.is_set():
                return
            workload = IdleWorkload(*key, gpus)
            try:
                self._one(workload, now, namespaces)
            except ApiException as error:
                problems.append(
                    f"{workload.kind} {workload.namespace}/{workload.name}: the API server "
                    f"answered {error.status} {error.reason}"
                    + (f"; {RBAC_HINT}" if error.status == 403 else "")
                )
        for key in [k for k in self.memory.announced if k not in idle]:
            self._stretch_ended(key)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise IdleCheckIncomplete("; ".join(problems[:3]) + more)

    def _target(self, workload: IdleWorkload, namespaces: dict[str, dict[str, str]]) -> Target:
        if workload.namespace not in namespaces:
            namespaces[workload.namespace] = self.api.namespace_labels(workload.namespace)
        labels = namespaces[workload.namespace]
        kind = KINDS.get(workload.kind)
        if kind is None:
            return Target(Seen(None, None, None, labels), workload.name)
        named = self.api.read(kind, workload.namespace, workload.name)
        notebook = notebook_of(named) if named is not None and kind.kind == "StatefulSet" else None
        if notebook:
            obj = self.api.read(NOTEBOOK, workload.namespace, notebook)
            return Target(Seen(NOTEBOOK, obj, named, labels), notebook)
        return Target(Seen(kind, named, named, labels), workload.name)

    def _announced_at(self, workload: IdleWorkload, target: Target, now: float) -> float | None:
        """This stretch's announcement: remembered, or on the object and idle all along since."""
        key = workload.key
        if key in self.memory.announced:
            return self.memory.announced[key]
        on_object = _parse_time(annotations(target.seen.obj).get(self.names.idle_announced))
        if on_object is not None and figures.idle_since(self.url, key, on_object, now):
            self.memory.announced[key] = on_object
            return on_object
        return None

    def _one(
        self, workload: IdleWorkload, now: float, namespaces: dict[str, dict[str, str]]
    ) -> None:
        target = self._target(workload, namespaces)
        announced_at = self._announced_at(workload, target, now)
        said_dry_run = workload.key in self.memory.said_dry_run
        decision = decide(announced_at, target.seen, now, self.config, self.names, said_dry_run)
        if decision.step is Step.ANNOUNCE:
            self._announce(workload, target, now)
        elif decision.step is Step.SAY_DRY_RUN and target.kind is not None:
            self._event(
                workload, target, "Warning", GPU_IDLE_REASON, dry_run_message(workload, target.kind)
            )
            self.memory.said_dry_run.add(workload.key)
            self.metrics.actions.labels("dry_run").inc()
            self._audit("would give back", workload, target, dry_run=True)
        elif decision.step is Step.GIVE_BACK and announced_at is not None:
            if not figures.idle_since(self.url, workload.key, announced_at, now):
                # It used its GPUs between two checks: a new stretch.
                self._announce(workload, target, now)
                return
            self._give_back(workload, target, announced_at, now)

    def _announce(self, workload: IdleWorkload, target: Target, now: float) -> None:
        obj, kind = target.seen.obj, target.kind
        if obj is not None and kind is not None:
            patch = {"metadata": {"annotations": {self.names.idle_announced: rfc3339(now)}}}
            self.api.patch(kind, workload.namespace, target.name, patch)
        self.memory.forget(workload.key)
        self.memory.announced[workload.key] = now
        message = announcement(workload, target.seen, now, self.config, self.names)
        self._event(workload, target, "Warning", GPU_IDLE_REASON, message)
        self.metrics.actions.labels("announced").inc()
        self._audit("announced", workload, target)

    def _give_back(
        self, workload: IdleWorkload, target: Target, announced_at: float, now: float
    ) -> None:
        kind, obj = target.kind, target.seen.obj
        assert kind is not None and kind.action is not None and obj is not None
        patch = give_back_patch(kind, obj, rfc3339(now), self.names)
        try:
            self.api.patch(kind, workload.namespace, target.name, patch)
        except ApiException as error:
            if error.status == 409:
                return  # it changed since it was read: the next check reads it again
            self.metrics.actions.labels("failed").inc()
            if workload.key not in self.memory.said_failed:
                self.memory.said_failed.add(workload.key)
                message = (
                    f"Could not be {kind.action}: the API server answered {error.status} "
                    f"{error.reason}; " + (RBAC_HINT if error.status == 403 else "retrying")
                )
                self._event(workload, target, "Warning", GPU_RETURN_FAILED_REASON, message)
            raise
        restore = restore_command(kind, workload.namespace, target.name, obj)
        message = returned_message(workload, kind, announced_at, restore)
        self._event(workload, target, "Normal", GPUS_RETURNED_REASON, message)
        hours = gpu_hours_returned(workload, announced_at, now)
        self.metrics.returned.labels(workload.namespace, kind.kind).inc(hours)
        self.metrics.actions.labels("given_back").inc()
        self._audit(str(kind.action), workload, target, gpu_hours=round(hours, 4), restore=restore)
        self.memory.forget(workload.key)

    def _stretch_ended(self, key: Key) -> None:
        """The rule no longer names it: it used its GPUs, let them go, or its figures went."""
        self.memory.forget(key)
        workload = IdleWorkload(*key, 0.0)
        try:
            target = self._target(workload, {})
            if self.names.idle_announced in annotations(target.seen.obj) and target.kind:
                patch = {"metadata": {"annotations": {self.names.idle_announced: None}}}
                self.api.patch(target.kind, workload.namespace, target.name, patch)
        except ApiException as error:
            log.info("idle stretch of %s ended; its annotation stays: %s", key, error.reason)
        audit.info(
            "idle GPUs: stretch ended",
            extra={
                "action": "stretch ended",
                "namespace": key[0],
                "workload_kind": key[1],
                "workload": key[2],
            },
        )

    def _event(
        self, workload: IdleWorkload, target: Target, event_type: str, reason: str, message: str
    ) -> None:
        ref = reference(
            target.kind, workload.kind, workload.namespace, target.name, target.seen.obj
        )
        try:
            self.api.event(ref, event_type, reason, message)
        except ApiException as error:
            log.info(
                "no %s Event on %s/%s: %s", reason, ref["namespace"], ref["name"], error.reason
            )

    def _audit(self, action: str, workload: IdleWorkload, target: Target, **fields: Any) -> None:
        audit.info(
            "idle GPUs: %s",
            action,
            extra={
                "action": action,
                "namespace": workload.namespace,
                "workload_kind": workload.kind,
                "workload": workload.name,
                "target": f"{target.kind.kind if target.kind else workload.kind}/{target.name}",
                "gpus": workload.gpus,
                "dry_run": self.config.dry_run,
                **fields,
            },
        )
