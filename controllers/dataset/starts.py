"""Naming loader pods that cannot start: on their PVC's Loading condition, in an Event, and as a
metric (`blocked.py` says why; this module gathers what it needs and remembers what it said).

It runs on each reconcile of a running load (spaced by the progress interval): it looks at the
load's loader pods in the informer cache, and reads a pod's Events (one list call, by field
selector) only while that pod has not started and its status names no cause, since a volume that
cannot be mounted shows only there.
"""

from __future__ import annotations

import time
from datetime import datetime

from controllers.dataset.blocked import START_GRACE_SECONDS, Blockage, blockage
from controllers.dataset.recorder import pvc_ref
from controllers.dataset.records import JobRecord, LoaderPod, PvcRecord
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.names import Names

REASON_BLOCKED = "LoaderBlocked"


def _age(pod: LoaderPod, now: float) -> float:
    try:
        created = datetime.fromisoformat(pod.created_at).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - created)


class LoaderStarts:
    def __init__(self, api: ApiWriter, loader_pods: Informer[LoaderPod], names: Names) -> None:
        self.api, self.loader_pods, self.names = api, loader_pods, names
        self._reported: dict[str, Blockage] = {}  # PVC key -> what its condition says now
        self._where: dict[str, tuple[str, str]] = {}  # PVC key -> (namespace, name)

    async def check(self, pvc: PvcRecord, job: JobRecord) -> tuple[Blockage | None, float | None]:
        """What keeps the load's pods from starting (None: nothing, or not yet), and when to
        look again if a pod may still turn out to be stuck (None: no need)."""
        now = time.time()
        found: Blockage | None = None
        recheck: float | None = None
        waiting = [
            p
            for p in self.loader_pods.values()
            if p.job_key == f"{job.namespace}/{job.name}" and not p.started and p.exit_code is None
        ]
        for pod in sorted(waiting, key=lambda p: p.name):
            age = _age(pod, now)
            cause = blockage(pod, (), age, self.names.data_credentials)
            if cause is None or cause.cause == "not-started":
                events = await self.api.pod_events(pod.namespace, pod.name)
                cause = blockage(pod, events, age, self.names.data_credentials)
            if cause is not None:
                found = cause
                break
            remaining = START_GRACE_SECONDS - age
            recheck = remaining if recheck is None else min(recheck, remaining)
        await self._report(pvc, found)
        return found, recheck

    async def _report(self, pvc: PvcRecord, found: Blockage | None) -> None:
        if found is None:
            self.forget(pvc.key)
            return
        if self._reported.get(pvc.key) != found:
            await self.api.event(pvc_ref(pvc), "Warning", REASON_BLOCKED, found.message)
        self._reported[pvc.key] = found
        self._where[pvc.key] = (pvc.namespace, pvc.name)

    def forget(self, pvc_key: str) -> None:
        self._reported.pop(pvc_key, None)
        self._where.pop(pvc_key, None)

    def blocked(self) -> dict[tuple[str, str], str]:
        """(namespace, PVC) -> cause, for the metric."""
        return {self._where[k]: b.cause for k, b in self._reported.items() if k in self._where}
