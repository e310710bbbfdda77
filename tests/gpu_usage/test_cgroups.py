"""A process's container from its /proc/<pid>/cgroup, in each shape kubelets and runtimes give
it: cgroup v1 and v2, the cgroupfs and systemd drivers, containerd, CRI-O and cri-dockerd."""

from __future__ import annotations

import pytest

from gpu_usage.cgroups import ContainerCgroup, container_of, runtime_id

UID = "0f6b3c5e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
SYSTEMD_UID = UID.replace("-", "_")
ID = "3e1f" + "a" * 56 + "9c0d"
WANTED = ContainerCgroup(UID, ID)


@pytest.mark.parametrize(
    "cgroup_file",
    [
        # cgroup v2, systemd driver, containerd
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/"
        f"cri-containerd-{ID}.scope\n",
        # cgroup v2, systemd driver, a Guaranteed pod (no QoS slice)
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n",
        # cgroup v2, cgroupfs driver
        f"0::/kubepods/besteffort/pod{UID}/{ID}\n",
        # CRI-O, systemd driver
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/"
        f"crio-{ID}.scope\n",
        # cri-dockerd
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/"
        f"docker-{ID}.scope\n",
        # kind: a kubelet in a container, its pods under kubelet.slice
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n",
        # cgroup v1, cgroupfs driver: the path under every hierarchy
        "\n".join(
            f"{n}:{c}:/kubepods/burstable/pod{UID}/{ID}"
            for n, c in enumerate(["cpu", "cpuacct", "cpuset", "memory", "devices", "pids"], 1)
        )
        + "\n0::/\n",
        # cgroup v1, systemd driver, the named systemd hierarchy beside the rest
        f"12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}"
        f".slice/cri-containerd-{ID}.scope\n1:name=systemd:/system.slice/containerd.service\n",
        # CRI-O, cgroupfs driver: `crio-<id>`, no scope (cri-o internal/config/cgmgr/cgroupfs.go)
        f"0::/kubepods/burstable/pod{UID}/crio-{ID}\n",
        # CRI-O, systemd driver, crun's `container` cgroup under the scope (crun's
        # cgroup-systemd: the payload moved one level down so the scope can hold the monitor)
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/"
        f"crio-{ID}.scope/container\n",
        # Read from a private cgroup namespace (cgroup v2: containerd's and CRI-O's default for
        # unprivileged containers), the agent in a burstable pod, cgroupfs driver as k3s uses:
        # the kernel shows the path relative to the reader's root (kernel's proc_cgroup_show)
        f"0::/../../besteffort/pod{UID}/{ID}\n",
        # the same, the agent in a Guaranteed pod: one level less to climb
        f"0::/../pod{UID}/{ID}\n",
        # the same with the systemd driver
        f"0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/"
        f"cri-containerd-{ID}.scope\n",
        # a cgroup removed while the file was read
        f"0::/kubepods/besteffort/pod{UID}/{ID} (deleted)\n",
    ],
    ids=[
        "v2-systemd-containerd",
        "v2-systemd-guaranteed",
        "v2-cgroupfs",
        "v2-systemd-crio",
        "v2-systemd-cri-dockerd",
        "kind",
        "v1-cgroupfs",
        "v1-systemd",
        "v2-cgroupfs-crio",
        "v2-systemd-crio-crun",
        "cgroupns-cgroupfs",
        "cgroupns-cgroupfs-guaranteed",
        "cgroupns-systemd",
        "deleted",
    ],
)
def test_a_containers_process_names_its_pod_and_container(cgroup_file: str) -> None:
    assert container_of(cgroup_file) == WANTED


@pytest.mark.parametrize(
    "cgroup_file",
    [
        "0::/system.slice/sshd.service\n",  # a host daemon
        "0::/user.slice/user-1000.slice/session-4.scope\n",  # someone's shell
        "0::/\n",
        f"0::/kubepods/burstable/pod{UID}\n",  # the pod's own cgroup, no container in it
        # CRI-O's monitor of the container, not the container
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/"
        f"crio-conmon-{ID}.scope\n",
        f"0::/docker/{ID}\n",  # a container the kubelet did not start
        f"0::/../../docker/{ID}\n",  # the same, seen from a private cgroup namespace
        f"0::/{ID}\n",  # a container of the agent's own pod, seen from inside its namespace
        "",  # a process that ended while its file was read
    ],
)
def test_a_process_outside_any_pods_container_names_none(cgroup_file: str) -> None:
    assert container_of(cgroup_file) is None


def test_a_nested_runtimes_process_names_the_innermost_pod() -> None:
    inner_uid = "11111111-2222-3333-4444-555555555555"
    inner = "b" * 64
    path = f"0::/kubepods/burstable/pod{UID}/{ID}/kubepods/besteffort/pod{inner_uid}/{inner}\n"
    assert container_of(path) == ContainerCgroup(inner_uid, inner)


def test_a_status_container_id_is_stripped_of_its_runtime_scheme() -> None:
    assert runtime_id(f"containerd://{ID}") == ID
    assert runtime_id(f"cri-o://{ID}") == ID
