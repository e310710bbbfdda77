"""Where the install's self-check speaks: a gauge per object and state, a gauge per ServiceAccount
whose credentials are not routed, a gauge per GPU daemon the visibility policy blinds, a Warning
Event for each new or changed finding (on the service's Deployment; a blinded daemon's on the
daemon's own workload), and one log line per change of state (a finding that appears, changes or
clears).

Publishing the same report twice says nothing the second time: Events and log lines follow
changes, not checks.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gpu_admission.admission.installed import (
    CREDENTIALS_NOT_ROUTED,
    InstallReport,
    ObjectState,
)
from gpu_admission.gpus.daemons import DAEMON_BLINDED
from gpu_admission.process.metrics import Metrics

log = logging.getLogger(__name__)

# (reason, message, the object it is about: None for the service's Deployment) -> an Event.
PostEvent = Callable[[str, str, dict[str, str] | None], Awaitable[None]]


class InstallMetrics:
    """Registered whether the check runs or not, so dashboards and alerts find their names."""

    def __init__(self, metrics: Metrics) -> None:
        self.state = metrics.gauge(
            "admission_object_state",
            "The install's admission objects (policies, bindings, webhook configurations) against "
            "what the configuration implies: 1 for each object's current state (ok, missing, "
            "stale), 0 for the others. Reported by the leading controller replica",
            ["kind", "name", "state"],
        )
        self.not_routed = metrics.gauge(
            "credentials_not_routed",
            "A series per ServiceAccount bound to cloud credentials in a namespace whose pods are "
            "not sent to the webhook (not labelled for ServiceAccount credentials); its value is "
            "the number of its running pods that lack them (NaN when they could not be counted)",
            ["namespace", "serviceaccount"],
        )
        self.daemons = metrics.gauge(
            "blinded_gpu_daemon",
            "A series per workload (DaemonSet, Deployment, StatefulSet, Job, CronJob, or a Pod "
            "of none of them), in a namespace that is not exempt, whose pods ask for no GPU yet "
            "want the node's GPUs (they set NVIDIA_VISIBLE_DEVICES, or run under an NVIDIA "
            "runtime): the GPU-visibility policy hides the GPUs from them. 1 while "
            "gpu-visibility enforces, 0 while it does not yet",
            ["namespace", "kind", "name"],
        )
        self.checks = metrics.counter(
            "admission_object_checks",
            "Comparisons of the installed admission objects, by outcome",
            ["outcome"],
        )
        self.writes = metrics.counter(
            "admission_object_writes",
            "Admission objects the leading controller wrote as the configuration implies them "
            "(applied: missing or stale; deleted: a leftover of an earlier configuration), by "
            "result (done, failed)",
            ["kind", "action", "result"],
        )


class InstallReporter:
    def __init__(self, metrics: InstallMetrics, post_event: PostEvent) -> None:
        self.metrics = metrics
        self._post_event = post_event
        self._said: dict[tuple[str, ...], str] = {}  # finding -> the message last said
        self._states: set[tuple[str, str]] = set()
        self._accounts: set[tuple[str, str]] = set()
        self._daemons: set[tuple[str, str, str]] = set()

    async def publish(self, report: InstallReport) -> None:
        self._gauges(report)
        now: dict[tuple[str, ...], tuple[str, str, dict[str, Any]]] = {}
        for finding in report.problems:
            extra = {
                "kind": finding.kind,
                "object": finding.name,
                "state": str(finding.state),
                "fix": finding.fix,
            }
            now[("object", finding.kind, finding.name)] = (finding.reason, finding.message, extra)
        for account in report.credentials:
            extra = {
                "namespace": account.namespace,
                "serviceaccount": account.service_account,
                "fix": account.fix,
            }
            key = ("credentials", account.namespace, account.service_account)
            # The pod count moves with every pod: the finding is the binding, not the count.
            now[key] = (CREDENTIALS_NOT_ROUTED, account.message, extra)
        about: dict[tuple[str, ...], dict[str, str]] = {}
        for daemon in report.daemons:
            key = ("daemon", daemon.kind, daemon.namespace, daemon.name)
            extra = {
                "kind": daemon.kind,
                "object": f"{daemon.namespace}/{daemon.name}",
                "gpu_daemon": daemon.daemon,
            }
            now[key] = (DAEMON_BLINDED, daemon.message, {**extra, "fix": daemon.fix})
            about[key] = daemon.involved
        for key, (reason, message, extra) in now.items():
            identity = reason + message if key[0] != "credentials" else reason
            if self._said.get(key) == identity:
                continue
            self._said[key] = identity
            log.warning("install check: %s", message, extra={"reason": reason, **extra})
            await self._post_event(reason, message, about.get(key))
        for key in [k for k in self._said if k not in now]:
            del self._said[key]
            if key[0] == "object":
                log.info("install check: %s %s is ok again", key[1], key[2])
            elif key[0] == "daemon":
                log.info("install check: %s %s/%s is not blinded any more", *key[1:])
            else:
                log.info(
                    "install check: the pods of ServiceAccount %s/%s are routed again, or it "
                    "is bound no more",
                    key[1],
                    key[2],
                )

    def _gauges(self, report: InstallReport) -> None:
        states = set()
        for finding in report.objects:
            states.add((finding.kind, finding.name))
            for state in ObjectState:
                value = 1.0 if state is finding.state else 0.0
                self.metrics.state.labels(finding.kind, finding.name, str(state)).set(value)
        for kind, name in self._states - states:
            for state in ObjectState:
                self.metrics.state.remove(kind, name, str(state))
        self._states = states
        accounts = set()
        for account in report.credentials:
            key = (account.namespace, account.service_account)
            accounts.add(key)
            count = account.running_without
            self.metrics.not_routed.labels(*key).set(float("nan") if count is None else count)
        for key in self._accounts - accounts:
            self.metrics.not_routed.remove(*key)
        self._accounts = accounts
        daemons = set()
        for daemon in report.daemons:
            key3 = (daemon.namespace, daemon.kind, daemon.name)
            daemons.add(key3)
            self.metrics.daemons.labels(*key3).set(1.0 if daemon.enforced else 0.0)
        for key3 in self._daemons - daemons:
            self.metrics.daemons.remove(*key3)
        self._daemons = daemons

    def forget(self) -> None:
        """This replica stopped leading: its series go, and the next term says all again."""
        for kind, name in self._states:
            for state in ObjectState:
                self.metrics.state.remove(kind, name, str(state))
        for key in self._accounts:
            self.metrics.not_routed.remove(*key)
        for key3 in self._daemons:
            self.metrics.daemons.remove(*key3)
        self._states, self._accounts, self._daemons, self._said = set(), set(), set(), {}
