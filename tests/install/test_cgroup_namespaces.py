"""The agent's cgroup reading against the real kernel: a process in a pod on the real node (the
kubelet's cgroupfs driver, containerd, cgroup v1 here) read by a process in a cgroup namespace of
its own (`unshare --cgroup`), rooted where an agent's container would be: the node's root, a
pod's cgroup, a container's cgroup (containerd's and CRI-O's private namespace for a container).
The kernel shows the path relative to the reader's root, climbing out of it with `..`; each
must still name the pod and the container. The layouts this kernel cannot show (cgroup v2, the
systemd driver, CRI-O) are in tests/gpu_usage/test_cgroups.py, with their sources."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_usage.cgroups import ContainerCgroup, container_of, runtime_id
from tests.install.cluster import InstallCluster, wait_for

NS = "cgroup-probe"
HIERARCHIES = Path("/sys/fs/cgroup")


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _running(cluster: InstallCluster, name: str) -> ContainerCgroup | None:
    pod = cluster.core.read_namespaced_pod(name, NS)
    statuses = pod.status.container_statuses or []
    if pod.status.phase != "Running" or not statuses or not statuses[0].container_id:
        return None
    return ContainerCgroup(pod.metadata.uid, runtime_id(statuses[0].container_id))


@pytest.fixture(scope="module")
def two_pods(install_cluster: InstallCluster) -> Iterator[tuple[ContainerCgroup, ContainerCgroup]]:
    """The pod whose process is read, and the pod whose cgroups root the reader."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare (util-linux) on this machine")
    install_cluster.namespace(NS)
    install_cluster.apply([_pod("target"), _pod("home")])
    try:
        found = [
            wait_for(lambda n=name: _running(install_cluster, n), f"pod {name} running")
            for name in ("target", "home")
        ]
        yield found[0], found[1]
    finally:
        install_cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")


def _pid_of(container: ContainerCgroup) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if container.container_id in (entry / "cgroup").read_text():
                    return int(entry.name)
            except OSError:
                continue
    raise AssertionError(f"no process of container {container.container_id[:13]} in /proc")


def _cgroup_dirs(pid: int, keep: int) -> list[Path]:
    """The cgroup folders of `pid` in every mounted hierarchy, less `keep` trailing parts
    trimmed off (1: its pod's, 0: its own)."""
    dirs = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        name = controllers.removeprefix("name=") or "unified"
        parts = [p for p in path.split("/") if p]
        folder = HIERARCHIES.joinpath(name, *parts[: len(parts) - keep])
        if (folder / "cgroup.procs").exists():
            dirs.append(folder)
    return dirs


def _read_from(root_dirs: list[Path], pid: int) -> str:
    """/proc/<pid>/cgroup as a process sees it whose cgroup namespace is rooted at
    `root_dirs` (the host's root where empty)."""
    moves = "".join(f'echo $$ > "{d}/cgroup.procs" && ' for d in root_dirs)
    script = f"{moves}exec unshare --cgroup cat /proc/{pid}/cgroup"
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("root", "climbs"),
    [("the node's root", False), ("a pod's cgroup", True), ("a container's cgroup", True)],
)
def test_a_pods_process_is_named_from_a_cgroup_namespace_of_its_own(
    two_pods: tuple[ContainerCgroup, ContainerCgroup], root: str, climbs: bool
) -> None:
    target, home = two_pods
    home_pid = _pid_of(home)
    dirs = {
        "the node's root": [],
        "a pod's cgroup": _cgroup_dirs(home_pid, keep=1),
        "a container's cgroup": _cgroup_dirs(home_pid, keep=0),
    }[root]
    seen = _read_from(dirs, _pid_of(target))
    if climbs:
        assert "/../" in seen, seen  # the kernel really showed it relative
    assert container_of(seen) == target, seen
    # A process of the reader's own container is inside its root: no pod is named.
    if root == "a container's cgroup":
        assert container_of(_read_from(dirs, home_pid)) is None


def test_the_reader_is_really_in_a_new_namespace() -> None:
    """`unshare --cgroup` from the host's root shows its own cgroup as `/` (the kernel's
    cgroup_namespaces(7)), so the cases above are read from where they say."""
    seen = subprocess.run(
        ["unshare", "--cgroup", sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if seen.returncode != 0:
        pytest.skip(f"unshare --cgroup refused here: {seen.stderr.strip()}")
    assert all(line.endswith(":/") for line in seen.stdout.split())
