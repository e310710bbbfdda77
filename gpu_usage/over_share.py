"""Which containers use more of a shared GPU's memory than their share (pure).

The memory-share policy's share is what the framework may allocate; NVML counts each process's
CUDA context on top (772 MiB for a PyTorch process on an H200, driver 580), so a container is
over its share only past share + one context allowance per process. A JAX container shows its
whole preallocated pool from the start: a pool the size of its share is that share, not an
excess, and the same allowance keeps it under.

A container is reported once per rise: when it first passes the line, then again only after it
has come back within its share and passed the line once more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpu_usage.containers import ContainerUsage
from gpu_usage.units import GIB, MIB

CONTEXT_ALLOWANCE_BYTES = GIB  # per process: one CUDA context, with room


@dataclass(frozen=True)
class OverShare:
    usage: ContainerUsage
    limit_bytes: int  # share + allowance
    neighbours: tuple[ContainerUsage, ...]  # the other containers on the same GPU

    def message(self) -> str:
        u = self.usage
        share = u.share_bytes or 0
        others = ", ".join(
            f"{n.namespace}/{n.pod} ({n.used_bytes / MIB:,.0f} MiB)" for n in self.neighbours
        )
        return (
            f"container {u.container} uses {u.used_bytes / MIB:,.0f} MiB of GPU "
            f"{u.gpu.index} ({u.gpu.model}, {u.gpu.uuid}), over its share of "
            f"{share / MIB:,.0f} MiB (allowing {(self.limit_bytes - share) / MIB:,.0f} MiB of "
            f"CUDA context for {len(u.pids)} process(es)); the pods sharing this GPU may run out "
            f"of memory: {others or 'none now'}. Cap the framework at its share "
            "(GPU_MEMORY_LIMIT_MIB in the container's env), or ask for a whole GPU"
        )


def limit_of(usage: ContainerUsage, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> int | None:
    if usage.share_bytes is None:
        return None
    return usage.share_bytes + allowance * max(1, len(usage.pids))


class OverShareWatch:
    def __init__(self, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> None:
        self._allowance = allowance
        self._over: set[tuple[str, str]] = set()  # (container ID, GPU UUID) reported, not back
        self.current: list[tuple[ContainerUsage, int]] = []  # over now, by how many bytes

    def update(self, usage: Iterable[ContainerUsage]) -> list[OverShare]:
        """The containers that passed their line since the last update."""
        listed = list(usage)
        found = []
        present = set()
        self.current = []
        for u in listed:
            key = (u.container_id, u.gpu.uuid)
            present.add(key)
            limit = limit_of(u, self._allowance)
            if limit is None:
                continue
            if u.used_bytes > limit:
                self.current.append((u, u.used_bytes - limit))
                if key not in self._over:
                    self._over.add(key)
                    neighbours = tuple(n for n in listed if n.gpu.uuid == u.gpu.uuid and n is not u)
                    found.append(OverShare(u, limit, neighbours))
            elif u.used_bytes <= (u.share_bytes or 0):
                self._over.discard(key)  # back within its share: the next rise is news
        self._over &= present
        return found
