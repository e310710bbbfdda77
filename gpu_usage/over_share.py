"""Which containers use more of a shared GPU's memory than their share (pure).

The memory-share policy's share is what the framework may allocate; NVML counts each process's
CUDA context on top, and the context is not one size: 772 MiB for a bare PyTorch process on an
H200 (driver 580), more once cuBLAS and cuDNN have loaded their kernels, and NCCL's buffers are
outside the framework's allocator. So a container is over its share only past share + one
allowance per process, and the allowance is a setting (`--context-allowance-mib`, default 1024
MiB). A JAX container shows its whole preallocated pool from the start: a pool the size of its
share is that share, not an excess, and the same allowance keeps it under. A container whose
memory NVML cannot tell is not judged.

A container is reported once per rise: when it first passes the line, then again only after it
has come back within its share and passed the line once more. A container that has had no GPU
process for a sweep but still runs keeps its state (a training loop between two workers is not
a new rise). The Event of a rise has a name made of the container, the GPU and the rise's
number, so an agent restarted during a rise writes the same name, which the API server refuses
as existing: one Event per rise, across restarts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Set
from dataclasses import dataclass

from gpu_usage.containers import ContainerUsage
from gpu_usage.units import GIB, MIB

CONTEXT_ALLOWANCE_BYTES = GIB  # per process: one CUDA context, with room
_POD_NAME_ROOM = 200  # an Event's name is the pod's, a dot and 16 characters, within 253


@dataclass(frozen=True)
class OverShare:
    usage: ContainerUsage
    limit_bytes: int  # share + allowance
    neighbours: tuple[ContainerUsage, ...]  # the other containers on the same GPU
    rise: int = 0  # the container's rises on this GPU before this one

    def event_name(self) -> str:
        """The same for the same rise, whichever agent process writes it."""
        u = self.usage
        digest = hashlib.sha256(f"{u.container_id}/{u.gpu.uuid}".encode()).hexdigest()[:12]
        return f"{u.pod[:_POD_NAME_ROOM]}.{digest}-{self.rise}"

    def message(self) -> str:
        u = self.usage
        share = u.share_bytes or 0
        others = ", ".join(f"{n.namespace}/{n.pod} ({_mib(n.used_bytes)})" for n in self.neighbours)
        return (
            f"container {u.container} uses {_mib(u.used_bytes)} of GPU "
            f"{u.gpu.index} ({u.gpu.model}, {u.gpu.uuid}), over its share of "
            f"{share / MIB:,.0f} MiB (allowing {(self.limit_bytes - share) / MIB:,.0f} MiB of "
            f"CUDA context for {len(u.pids)} process(es)); the pods sharing this GPU may run out "
            f"of memory: {others or 'none now'}. Cap the framework at its share "
            "(GPU_MEMORY_LIMIT_MIB in the container's env), or ask for a whole GPU"
        )


def _mib(used: int | None) -> str:
    return "an unknown amount" if used is None else f"{used / MIB:,.0f} MiB"


def limit_of(usage: ContainerUsage, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> int | None:
    if usage.share_bytes is None:
        return None
    return usage.share_bytes + allowance * max(1, len(usage.pids))


class OverShareWatch:
    def __init__(self, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> None:
        self.allowance = allowance
        self._over: set[tuple[str, str]] = set()  # (container ID, GPU UUID) reported, not back
        self._rises: dict[tuple[str, str], int] = {}  # rises reported so far
        self.current: list[tuple[ContainerUsage, int]] = []  # over now, by how many bytes

    def update(
        self, usage: Iterable[ContainerUsage], running: Set[str] | None = None
    ) -> list[OverShare]:
        """The containers that passed their line since the last update. `running`: the IDs of
        the node's running containers (None when unknown): a container's state is kept while
        it runs (or while the node's containers cannot be listed), and forgotten once it has
        neither a GPU process nor runs."""
        listed = list(usage)
        found = []
        present = set()
        self.current = []
        for u in listed:
            key = (u.container_id, u.gpu.uuid)
            present.add(key)
            limit = limit_of(u, self.allowance)
            if limit is None or u.used_bytes is None:
                continue
            if u.used_bytes > limit:
                self.current.append((u, u.used_bytes - limit))
                if key not in self._over:
                    self._over.add(key)
                    neighbours = tuple(n for n in listed if n.gpu.uuid == u.gpu.uuid and n is not u)
                    rise = self._rises.get(key, 0)
                    self._rises[key] = rise + 1
                    found.append(OverShare(u, limit, neighbours, rise))
            elif u.used_bytes <= (u.share_bytes or 0):
                self._over.discard(key)  # back within its share: the next rise is news
        for key in list(self._rises):
            if key not in present and running is not None and key[0] not in running:
                self._over.discard(key)
                del self._rises[key]
        return found
