"""The dataset loader controller: a loader Job per (PVC, content), state on the PVC, gates removed.

Runs in its own process (`gpu-admission controller`), active on the leader replica only: each
term of leadership gets a Reconciler of its own (`reconciler.py`: the informers, the work queue
and the reconciles), made complete when the term begins and stopped when it ends. What lives as
long as the process is here: the configuration, the API writer, the metrics and the leader
election. All state lives in the cluster (Job names are deterministic, phases are PVC
annotations), so a restarted controller carries on where the last one stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

from kubernetes.client import ApiClient

from controllers.dataset.load_gauges import LoadStateCollector
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.reconciler import Reconciler
from controllers.dataset.records import PvcRecord
from controllers.leader import LeaderElector
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.own_image import in_pod, loader_image, with_loader_image
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics

log = logging.getLogger(__name__)

TermHook = Callable[[], Awaitable[None]]


def _identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class DatasetController:
    name = "dataset-controller"

    def __init__(
        self,
        api_client: ApiClient,
        config: Config,
        registry: Metrics | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.config = config
        self._api_client = api_client
        self.registry = registry or Metrics(process_metrics=False)
        self.metrics = DatasetMetrics(self.registry)
        self.identity = identity or _identity()
        self.api = ApiWriter(api_client, self.identity, config.dataset.reconcile_workers)
        election = config.leader_election
        self._elector = (
            LeaderElector(
                api_client,
                namespace=election.namespace,
                name=election.lease_name,
                identity=self.identity,
                lease_duration=election.lease_duration_seconds,
                renew_deadline=election.renew_deadline_seconds,
                retry_period=election.retry_period_seconds,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
                metrics=self.registry,
            )
            if election.enabled
            else None
        )
        # The current term's work, from its start (its caches filling) to its end; else None.
        self.reconciler: Reconciler | None = None
        self._graceful_stop = False
        self.leading = asyncio.Event()
        # What else runs for a term of leadership: (start, stop), in order.
        self._term_hooks: list[tuple[TermHook, TermHook]] = []
        self.registry.registry.register(
            LoadStateCollector(
                self._cached_pvcs, config.dataset.load_stuck_after_seconds, self._blocked
            )
        )

    def add_term_hooks(self, start: TermHook, stop: TermHook) -> None:
        """`start()` when a term of leadership begins (after the dataset work has), `stop()`
        when it ends (before the dataset work stops)."""
        self._term_hooks.append((start, stop))

    def _leading_reconciler(self) -> Reconciler | None:
        return self.reconciler if self.leading.is_set() else None

    def _blocked(self) -> dict[tuple[str, str], str]:
        reconciler = self._leading_reconciler()
        return reconciler.starts.blocked() if reconciler is not None else {}

    def _cached_pvcs(self) -> list[PvcRecord]:
        """The dataset PVCs as the leader's cache holds them; none on a standby."""
        reconciler = self._leading_reconciler()
        return reconciler.pvcs.values() if reconciler is not None else []

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._elector is None:
            await self._start_leading()
        else:
            self._elector.start()

    async def stop(self) -> None:
        # A stop (SIGTERM, a rollout) lets each worker finish the reconcile it is in
        # (Reconciler.stop); losing the Lease stops them at once (another replica leads).
        self._graceful_stop = True
        if self._elector is not None:
            await self._elector.stop()  # stops the work, then releases the Lease
        else:
            await self._stop_leading()
        await self.api.drain()  # the Events of the last reconciles
        await self.api.close()

    def readiness(self) -> list[str]:
        """What this replica waits for: its leader election's trouble, or its caches."""
        waiting = self._elector.trouble() if self._elector is not None else []
        reconciler = self.reconciler
        return waiting + (reconciler.unsynced() if reconciler is not None else [])

    async def _start_leading(self) -> None:
        if self.config.dataset.loader_image is None and in_pod(os.environ):
            # The controller's own image (what the kustomization's `images:` set), read once
            # this replica leads: the API answers then (gpu_admission/cluster/own_image.py).
            image = await asyncio.to_thread(loader_image, self.config, self._api_client, os.environ)
            self.config = with_loader_image(self.config, image)
            log.info("loader Jobs run image %s", image)
        self.reconciler = Reconciler(self._api_client, self.api, self.config, self.metrics)
        await self.reconciler.start()
        for start, _ in self._term_hooks:
            await start()
        self.leading.set()

    async def _stop_leading(self) -> None:
        self.leading.clear()
        for _, stop in reversed(self._term_hooks):
            await stop()
        reconciler, self.reconciler = self.reconciler, None
        if reconciler is not None:
            await reconciler.stop(graceful=self._graceful_stop)
