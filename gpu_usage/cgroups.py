"""Which container a process runs in, from its `/proc/<pid>/cgroup`.

The kubelet puts every pod under a `kubepods` cgroup and the runtime puts each container in a
cgroup of its own named by the container's ID: the ID the pod's status carries as
`containerID: containerd://<id>` (or `cri-o://<id>`). The path's shape depends on the cgroup
version, the driver and the runtime:

- cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>` (Guaranteed pods sit right under
  `/kubepods/pod<uid>/`); CRI-O names the container `crio-<id>` there (cri-o
  `internal/config/cgmgr/cgroupfs.go`, `crioPrefix`);
- systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _ for
  ->.slice/cri-containerd-<id>.scope` (CRI-O: `crio-<id>.scope`, and crun may add a `container`
  cgroup under it; its `crio-conmon-<id>.scope` is the monitor, not the container; cri-dockerd:
  `docker-<id>.scope`).

cgroup v2 has one line, `0::<path>`; v1 has one per hierarchy, `<n>:<controllers>:<path>`, where
the same path appears under each (the `memory` or `pids` line is read first, the rest in turn).
A process in a container started inside a container (a nested runtime) lies deeper; the
innermost kubepods pod and container are the ones the kubelet knows.

Paths are shown relative to the reader's own cgroup namespace (the kernel's `proc_cgroup_show`).
containerd and CRI-O give an unprivileged container a private one on cgroup v2: the agent then
reads another pod's process as `0::/../../burstable/pod<uid>/<id>`, its `kubepods` ancestor above
the agent's namespace root and out of sight. A path that climbs out of the reader's namespace
(`..`) is the node's, so its pod component counts without a `kubepods` one above it. A cgroup
removed while read ends in ` (deleted)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `pod<uid>`, `kubepods-burstable-pod<uid>.slice`, and kind's `kubelet-kubepods-pod<uid>.slice`.
_POD = re.compile(r"^(?:[a-z]+-)*pod([0-9a-fA-F_-]{32,36})(?:\.slice)?$")
# A systemd scope (`cri-containerd-`, `crio-`, `docker-`), or CRI-O's cgroupfs `crio-<id>`.
_SCOPE = re.compile(r"^(?:cri-containerd|crio|docker)-([0-9a-f]{64})(?:\.scope)?$")
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")
_PREFERRED_V1 = ("memory", "pids", "cpu,cpuacct", "cpuacct", "devices")
_DELETED = " (deleted)"


@dataclass(frozen=True)
class ContainerCgroup:
    pod_uid: str  # with dashes, as the pod's metadata.uid
    container_id: str  # the runtime's 64-hex ID, without the `containerd://` scheme


def _paths(cgroup_file: str) -> list[str]:
    """The file's paths, the v2 one or the preferred v1 hierarchies' first."""
    by_controllers: dict[str, str] = {}
    for line in cgroup_file.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            by_controllers.setdefault(parts[1], parts[2].removesuffix(_DELETED))
    ordered = [by_controllers[c] for c in ("", *_PREFERRED_V1) if c in by_controllers]
    return ordered + [p for p in by_controllers.values() if p not in ordered]


def _from_path(path: str) -> ContainerCgroup | None:
    parts = [p for p in path.split("/") if p]
    outside = bool(parts) and parts[0] == ".."  # above the reader's namespace root
    for index in range(len(parts) - 2, -1, -1):  # the innermost pod first
        pod = _POD.match(parts[index])
        if pod is None:
            continue
        if not outside and not any("kubepods" in p for p in parts[: index + 1]):
            continue
        leaf = parts[index + 1]
        found = _SCOPE.match(leaf) or _BARE_ID.match(leaf)
        if found is None:
            return None  # the pod's own cgroup: no container of it (a sandbox being made)
        container_id = found.group(1) if found.groups() else found.group(0)
        return ContainerCgroup(pod.group(1).replace("_", "-"), container_id)
    return None


def container_of(cgroup_file: str) -> ContainerCgroup | None:
    """The pod and container a process runs in, or None for a process outside any pod (the
    host's, a system daemon's) or one whose cgroup names no container."""
    for path in _paths(cgroup_file):
        found = _from_path(path)
        if found is not None:
            return found
    return None


def runtime_id(container_id: str) -> str:
    """A pod status's `containerID` (`containerd://<id>`, `cri-o://<id>`) as the cgroup names it."""
    return container_id.rsplit("://", 1)[-1]
