"""The node's pods by the IDs a process's cgroup names: each container's runtime ID (from the
pod's status) and each pod's UID (for a container whose status does not carry its ID yet).

For each container also what the memory-share policy gave it: `GPU_MEMORY_LIMIT_MIB` in its env
is its share, and a JAX container (`XLA_PYTHON_CLIENT_MEM_FRACTION` set and preallocation not
turned off) holds its whole pool from the start, whatever it uses of it.

A GPU-sharing scheduler's reservation pod (KAI's, in `kai-resource-reservation`) holds a whole GPU
only for the fractions it shares out, which hold their shares themselves: it holds nothing here,
and is no tenant (`reservation`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from gpu_admission.config.model import GpuConfig
from gpu_admission.gpus.scheduler_gpus import fraction_held, is_reservation_pod
from gpu_admission.names import GPU_MEMORY_LIMIT_MIB, XLA_PYTHON_CLIENT_MEM_FRACTION
from gpu_usage.cgroups import ContainerCgroup, runtime_id
from gpu_usage.units import MIB
from gpu_usage.workloads import MIG_SLICES, gpus_held, workload_of

XLA_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"


@dataclass(frozen=True)
class PodContainer:
    namespace: str
    pod: str
    container: str
    share_bytes: int | None  # None: no share was given (a whole GPU, or not shared)
    preallocated: bool  # a JAX pool: NVML shows the pool, not what is used of it
    workload_kind: str = ""
    workload: str = ""
    reservation: bool = False  # a scheduler's reservation pod (is_reservation_pod): no tenant


@dataclass(frozen=True)
class Holding:
    """What a running container holds of the node's GPUs (workloads.gpus_held)."""

    namespace: str
    pod: str
    container: str
    workload_kind: str
    workload: str
    gpus: float


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {
        e["name"]: str(e.get("value", ""))
        for e in container.get("env") or []
        if isinstance(e, Mapping) and "name" in e and "valueFrom" not in e
    }


def _share(env: Mapping[str, str]) -> int | None:
    try:
        mib = float(env[GPU_MEMORY_LIMIT_MIB])
    except (KeyError, ValueError):
        return None
    return int(mib * MIB) if mib > 0 else None


def _preallocated(env: Mapping[str, str]) -> bool:
    return XLA_PYTHON_CLIENT_MEM_FRACTION in env and env.get(XLA_PREALLOCATE, "").lower() not in (
        "false",
        "0",
    )


class PodIndex:
    def __init__(
        self,
        pods: Iterable[Mapping[str, Any]],
        gpu: GpuConfig | None = None,
        mig_slices: int = MIG_SLICES,
    ) -> None:
        """`mig_slices`: the compute slices of the node's GPUs (workloads.mig_slices)."""
        gpu = gpu or GpuConfig()
        self._by_id: dict[str, PodContainer] = {}
        self._by_uid: dict[str, PodContainer] = {}  # the pod, its container not known yet
        self._uids: dict[tuple[str, str], str] = {}
        self.holdings: list[Holding] = []
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            namespace, name = meta.get("namespace", ""), meta.get("name", "")
            kind, workload = workload_of(pod)
            reservation = is_reservation_pod(pod, gpu)
            self._by_uid[meta.get("uid", "")] = PodContainer(
                namespace, name, "", None, False, kind, workload, reservation
            )
            self._uids[(namespace, name)] = meta.get("uid", "")
            containers = {
                c["name"]: c
                for key in ("initContainers", "containers", "ephemeralContainers")
                for c in spec.get(key) or []
            }
            status = pod.get("status") or {}
            for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
                for state in status.get(key) or []:
                    if not state.get("containerID"):
                        continue
                    env = _env(containers.get(state["name"], {}))
                    self._by_id[runtime_id(state["containerID"])] = PodContainer(
                        namespace,
                        name,
                        state["name"],
                        _share(env),
                        _preallocated(env),
                        kind,
                        workload,
                        reservation,
                    )
            if status.get("phase") != "Running" or reservation:
                # GPUs are held from the start to the end of the run; a reservation pod's GPU is
                # held by the fractions it was made for, each counting its share: counting its
                # whole GPU too would hold that GPU twice.
                continue
            for container in spec.get("containers") or []:
                # A GPU-sharing scheduler's fraction (KAI) holds its share, with no resource.
                held = gpus_held(container, _env(container), gpu, mig_slices) or fraction_held(
                    pod, container, gpu
                )
                if held > 0:
                    self.holdings.append(
                        Holding(namespace, name, container["name"], kind, workload, held)
                    )

    def find(self, cgroup: ContainerCgroup) -> PodContainer | None:
        found = self._by_id.get(cgroup.container_id)
        if found is not None:
            return found
        # The pod is known but not yet this container's ID (its status lags the start).
        return self._by_uid.get(cgroup.pod_uid)

    @property
    def container_ids(self) -> Set[str]:
        """The runtime IDs of the node's containers that have started (a view, not a copy)."""
        return self._by_id.keys()

    def uid_of(self, namespace: str, pod: str) -> str:
        """The pod's UID ("" when unknown), for an Event that `kubectl describe` finds."""
        return self._uids.get((namespace, pod), "")
