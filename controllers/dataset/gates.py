"""Pods waiting for their datasets: released (gate and label removed) once every dataset PVC
they mount has loaded, warned (one Event per pod and load) when one failed."""

from __future__ import annotations

from typing import Any

from jsonpointer import escape

from controllers.dataset.records import PvcRecord, WaitingPod
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.names import Names


class WaitingPods:
    def __init__(
        self,
        pods: Informer[WaitingPod],
        pvcs: Informer[PvcRecord],
        api: ApiWriter,
        names: Names,
    ) -> None:
        self.pods, self.pvcs, self.api, self.names = pods, pvcs, api, names
        self._warned: set[tuple[str, str]] = set()  # (pod uid, job) failure events sent

    def waiting_for(self, pvc: PvcRecord) -> list[str]:
        """Keys of the pods that mount `pvc`."""
        return [
            pod.key
            for pod in self.pods.values()
            if pod.namespace == pvc.namespace and pvc.name in pod.claims
        ]

    async def reconcile(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            return
        datasets = [
            record
            for claim in pod.claims
            if (record := self.pvcs.get(f"{pod.namespace}/{claim}")) is not None
        ]
        waiting = [d for d in datasets if not d.loaded]
        if waiting:
            for dataset in waiting:
                if dataset.load.failed:
                    await self._warn(pod, dataset)
            return
        await self._release(pod)

    async def _warn(self, pod: WaitingPod, dataset: PvcRecord) -> None:
        marker = (pod.uid, dataset.current_job)
        if marker in self._warned:
            return
        await self.api.event(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
            "Warning",
            "DatasetLoadFailed",
            f"dataset PVC {dataset.name!r} failed to load; this pod stays gated until a load "
            f"succeeds: fix the PVC's data source (see its events)",
        )
        self._warned.add(marker)

    async def _release(self, pod: WaitingPod) -> None:
        """Remove our gate (tested first, so a concurrent change cannot shift what we remove)
        and the waiting label in one patch. A stale view of its gates (the test fails) is
        settled by the informer's next event for the pod, which queues it again."""
        gate = self.names.data_load_gate
        ops: list[dict[str, Any]] = []
        if gate in pod.gates:
            index = pod.gates.index(gate)
            path = f"/spec/schedulingGates/{index}"
            ops += [
                {"op": "test", "path": path, "value": {"name": gate}},
                {"op": "remove", "path": path},
            ]
        ops.append(
            {"op": "remove", "path": f"/metadata/labels/{escape(self.names.data_wait_label)}"}
        )
        await self.api.patch_pod(pod.namespace, pod.name, ops)
