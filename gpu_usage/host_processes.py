"""The node's processes as `/proc` shows them: each GPU process's container (from its cgroup)
and its command name.

A process's cgroup does not change while it lives, so each PID is read once and remembered; a
PID NVML no longer lists is forgotten at the end of the sweep, so a reused PID is read afresh.
A process that ends between NVML's list and the read is `ENDED`, not an error: its memory is
being freed as we look.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_usage.cgroups import ContainerCgroup, container_of


@dataclass(frozen=True)
class HostProcess:
    pid: int
    command: str  # /proc/<pid>/comm: what `ps` shows, for a process outside any pod
    container: ContainerCgroup | None  # None: outside any pod


ENDED = HostProcess(0, "", None)


class ProcessTable:
    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._known: dict[int, HostProcess] = {}
        self.reads = 0  # /proc reads made, for the benchmark's split of a sweep's cost

    def lookup(self, pid: int) -> HostProcess:
        known = self._known.get(pid)
        if known is not None:
            return known
        try:
            cgroup = (self._proc / str(pid) / "cgroup").read_text()
            command = (self._proc / str(pid) / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            return ENDED
        except PermissionError:
            # Not readable without the host's PID namespace: the agent runs with hostPID.
            return HostProcess(pid, "?", None)
        finally:
            self.reads += 1
        found = HostProcess(pid, command, container_of(cgroup))
        self._known[pid] = found
        return found

    def keep_only(self, pids: set[int]) -> None:
        """Forget every PID not in `pids` (those NVML listed this sweep)."""
        for pid in list(self._known):
            if pid not in pids:
                del self._known[pid]
