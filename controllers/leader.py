"""Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

A candidate takes the Lease when it is free (no holder) or expired. Expiry is judged on the
candidate's own clock: the Lease counts as expired when its record (holder, renewTime) has not
changed for leaseDurationSeconds since this candidate first saw it, so clock skew between
replicas does not matter. Writes carry the resourceVersion read, so two candidates cannot both
win. The leader renews every retry period and steps down if it could not renew within the renew
deadline. A clean stop releases the Lease (empty holder), so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from controllers.writes.raw import write
from gpu_admission.cluster.informer import describe_error
from gpu_admission.process.metrics import Metrics
from gpu_admission.process.quiet_log import QuietLog
from gpu_admission.process.reachability import unreachable_reason

log = logging.getLogger(__name__)


def lease_trouble(namespace: str, name: str, error: BaseException) -> str:
    """One line: what is wrong with taking the Lease, and what to do about it."""
    where = f"lease {namespace}/{name}"
    if isinstance(error, ApiException):
        if error.status == 404:
            return (
                f"{where}: namespace {namespace} does not exist; create it, or set "
                "leader_election.namespace to the namespace the controller runs in"
            )
        if error.status == 403:
            return (
                f"{where}: {describe_error(error)}; grant get, create and update on leases in "
                f"namespace {namespace} to the controller's ServiceAccount"
            )
    unreachable = unreachable_reason(error)
    if unreachable is not None:  # short and stable, so a flapping connection is said once
        return f"{where}: cannot be read or written ({unreachable}); retrying"
    return f"{where}: cannot be read or written: {describe_error(error)}; retrying"


def _micro_time(moment: dt.datetime | None = None) -> str:
    return (moment or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.leader = metrics.gauge(
            "leader", "1 while this replica holds the controller's Lease, else 0"
        )
        self.failures = metrics.counter(
            "leader_election_failures",
            "Lease reads or writes that failed (see /readyz or the logs for why)",
        )


class LeaderElector:
    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[], Awaitable[None]],
        on_stopped_leading: Callable[[], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self._api = CoordinationV1Api(api_client)
        self.namespace, self.name, self.identity = namespace, name, identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leading = False
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._quiet = QuietLog(log)
        # Until the Lease has been read once, nothing says this replica can take part: a
        # controller that never reached its API server must not report ready.
        self._trouble: str | None = f"lease {namespace}/{name}: not read yet"
        self._metrics = LeaderMetrics(metrics or Metrics(process_metrics=False))

    @property
    def is_leader(self) -> bool:
        return self._leading

    def trouble(self) -> list[str]:
        """Why this replica cannot take part in the election right now, for /readyz."""
        return [self._trouble] if self._trouble else []

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"leader-election-{self.name}")

    async def stop(self) -> None:
        """Stop campaigning; if leading, stop the leader's work, then release the Lease."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        if self._leading:
            await self._step_down()
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._release)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            if await self._attempt():
                self._leading = True
                self._metrics.leader.set(1)
                log.info(
                    "%s: became leader of lease %s/%s", self.identity, self.namespace, self.name
                )
                try:
                    await self._on_started()
                except Exception:
                    log.exception("starting the leader's work failed; stepping down")
                    await self._step_down()
                    continue
                await self._renew_until_lost()
                if self._stopping.is_set():
                    return  # stop() steps down and releases
                log.warning("%s: lost lease %s/%s", self.identity, self.namespace, self.name)
                await self._step_down()
            await self._pause(self._retry_period)

    async def _renew_until_lost(self) -> None:
        last_renewal = self._clock()
        while not self._stopping.is_set():
            await self._pause(self._retry_period)
            if self._stopping.is_set():
                return
            if await self._attempt():
                last_renewal = self._clock()
            elif self._clock() - last_renewal >= self._renew_deadline:
                return

    async def _step_down(self) -> None:
        if not self._leading:
            return
        self._leading = False
        self._metrics.leader.set(0)
        try:
            await self._on_stopped()
        except Exception:
            log.exception("stopping the leader's work failed")

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _attempt(self) -> bool:
        try:
            won = await asyncio.to_thread(self._try_acquire_or_renew)
        except Exception as exc:  # the API being unreachable must not kill the campaign
            self._metrics.failures.inc()
            self._trouble = lease_trouble(self.namespace, self.name, exc)
            self._quiet.failed("lease", self._trouble)  # said once, then at debug level
            return False
        if self._trouble is not None:
            self._trouble = None
            self._quiet.recovered("lease", f"lease {self.namespace}/{self.name}: reachable again")
        return won

    # -- Lease calls (in a thread) ----------------------------------------------------------

    def _read(self) -> dict[str, Any] | None:
        try:
            response = self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def _try_acquire_or_renew(self) -> bool:
        now = _micro_time()
        lease = self._read()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                write(self._api.create_namespaced_lease, self.namespace, body)
            except ApiException as exc:
                if exc.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        duration = spec.get("leaseDurationSeconds") or self._lease_duration
        if holder and holder != self.identity and self._clock() - self._observed_at < duration:
            return False  # held, and renewed within its duration as far as we have seen
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(spec.get("acquireTime") or now, now, transitions)
        else:
            new_spec = self._spec(now, now, transitions + 1)
        lease["spec"] = new_spec
        try:
            write(self._api.replace_namespaced_lease, self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote first
                return False
            raise
        self._observed = (self.identity, now, new_spec["leaseDurationSeconds"])
        self._observed_at = self._clock()
        return True

    def _spec(self, acquired: str, renewed: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self._lease_duration)),
            "acquireTime": acquired,
            "renewTime": renewed,
            "leaseTransitions": transitions,
        }

    def _release(self) -> None:
        lease = self._read()
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"].update(holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time())
        write(self._api.replace_namespaced_lease, self.name, self.namespace, lease)
