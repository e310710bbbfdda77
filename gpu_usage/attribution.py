"""Who uses what of each GPU: NVML's processes joined with their containers and pods (pure).

Each GPU process becomes a row naming its pod and container, or the host command for a process
outside any pod (or in a scheduler's reservation pod, which is no tenant's). Memory NVML counts
on a GPU but for no listed process (the driver's reserve, processes of other kinds) is a row of
its own, so the rows of a GPU add up to what it says it uses: nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_usage.host_processes import ENDED, HostProcess
from gpu_usage.nvml_reader import Gpu, Sweep
from gpu_usage.pod_index import PodContainer, PodIndex

UNLISTED = "(not listed by a process)"
UNNAMED = "?"  # the namespace of a container in a pod the agent's listing does not name


@dataclass(frozen=True)
class UsageRow:
    gpu: Gpu
    pid: int  # 0 for the GPU's unlisted memory
    command: str
    namespace: str  # "" outside any pod
    pod: str
    container: str
    used_bytes: int | None
    sm_percent: float | None  # None: not supported on this GPU, or not sampled
    share_bytes: int | None
    preallocated: bool
    container_id: str = ""  # the runtime's ID, "" outside any container
    workload_kind: str = ""  # workloads.workload_of
    workload: str = ""

    @property
    def in_pod(self) -> bool:
        return bool(self.pod)

    @property
    def named(self) -> bool:
        """In a pod the agent knows by name (not only by its UID and container ID)."""
        return self.in_pod and self.namespace != UNNAMED


def attribute(
    sweep: Sweep, processes: dict[int, HostProcess], pods: PodIndex | None
) -> list[UsageRow]:
    """Rows for every GPU process still alive, then each GPU's unlisted memory."""
    gpus = {gpu.uuid: gpu for gpu in sweep.gpus}
    rows: list[UsageRow] = []
    listed: dict[str, int] = {}
    for process in sweep.processes:
        gpu = gpus.get(process.gpu_uuid)
        host = processes.get(process.pid, ENDED)
        if gpu is None:
            continue
        listed[gpu.uuid] = listed.get(gpu.uuid, 0) + (process.used_bytes or 0)
        if host is ENDED:
            continue  # it ended between NVML's list and /proc: its memory is being freed
        place = _place(host, pods)
        sm = sweep.sm_percent.get((gpu.uuid, process.pid))
        if process.mps_client or (gpu.uuid, process.pid) in sweep.sm_dropped:
            sm = None  # the MPS server's samples, or a garbage one: its own share is not known
        elif sm is None and sweep.utilization_read(gpu.uuid):
            sm = 0.0  # sampled, and no sample for it: it did not compute since the last sweep
        rows.append(
            UsageRow(
                gpu,
                process.pid,
                host.command,
                place.namespace,
                place.pod,
                place.container,
                process.used_bytes,
                sm,
                place.share_bytes,
                place.preallocated,
                host.container.container_id if host.container else "",
                place.workload_kind,
                place.workload,
            )
        )
    for gpu in sweep.gpus:
        rest = gpu.memory_used - listed.get(gpu.uuid, 0)
        if rest > 0:
            rows.append(UsageRow(gpu, 0, UNLISTED, "", "", "", rest, None, None, False))
    return rows


_OUTSIDE = PodContainer("", "", "", None, False)


def _place(host: HostProcess, pods: PodIndex | None) -> PodContainer:
    if host.container is None:
        return _OUTSIDE
    found = pods.find(host.container) if pods is not None else None
    if found is not None and found.reservation:
        # A scheduler's reservation pod runs nothing of a tenant's: whatever NVML lists for it
        # is the scheduler's, kept as memory outside pods (by its command) so the GPU's rows
        # still add up, and never a container's use, share or over-share.
        return _OUTSIDE
    if found is not None:
        return found
    # In a pod this agent does not know (no API access, or not listed yet): name it by IDs.
    short = host.container.container_id[:13]
    return PodContainer(UNNAMED, f"uid {host.container.pod_uid}", short, None, False)
