"""containerd 1.6 (Debian's) as the node's container runtime, in a folder of this run's own.

The configuration is the one `../shared/kube/README.md` ("A real node") checked on these
machines: the CRI plugin runs runc through `tests/world/containers/runc-wrapper` (the sandbox
refuses a negative oom_score_adj and raised rlimits), cgroupfs, no AppArmor or SELinux, overlayfs,
the pause image `registry.k8s.io/pause:3.10`, a loopback stream server, and the test world's CNI
configuration. No registry is reachable, so every image is imported before a pod needs it, and
any pull is sent to a proxy on a closed loopback port: it fails at once, and never leaves the
machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.world.containers.engine import WRAPPER

NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CLOSED_PROXY = "http://127.0.0.1:9"  # discard port, never served here: a pull fails at once


def missing() -> str | None:
    """Why containerd cannot run here, or None."""
    for tool in ("containerd", "ctr", "containerd-shim-runc-v2", "runc", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install containerd runc iproute2)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "the CNI plugins are not installed (apt-get install containernetworking-plugins)"
    return None


def config(folder: Path, cni_conf_dir: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{folder}/root"
state = "{folder}/state"
oom_score = 0

[grpc]
  address = "{folder}/containerd.sock"

[ttrpc]
  address = "{folder}/containerd.sock.ttrpc"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{WRAPPER}"
  Root = "{folder}/runc"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni_conf_dir}"
"""


def environment() -> dict[str, str]:
    """containerd's environment: the wrapper finds python3 and runc on PATH; pulls go to a
    closed port."""
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/sbin", "/usr/bin", "/sbin"])
    env = {"PATH": path + os.pathsep + os.environ.get("PATH", "")}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = CLOSED_PROXY
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def ctr(socket: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(socket), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )


def import_archive(socket: Path, archive: Path) -> None:
    """A docker-archive tarball into the CRI namespace, unpacked for overlayfs."""
    ctr(socket, "images", "import", "--snapshotter", "overlayfs", str(archive))


def tag(socket: Path, source: str, *targets: str) -> None:
    ctr(socket, "images", "tag", "--force", source, *targets)


def image_names(socket: Path) -> list[str]:
    listing = ctr(socket, "images", "list", "--quiet").stdout
    return [line for line in listing.splitlines() if line]


def kill_tasks(socket: Path) -> None:
    """Every container's processes, killed through containerd (its shims outlive it)."""
    try:
        tasks = ctr(socket, "tasks", "list", "--quiet", timeout=30).stdout.split()
    except (subprocess.SubprocessError, OSError):
        return
    for task in tasks:
        subprocess.run(
            [
                "ctr",
                "--address",
                str(socket),
                "-n",
                NAMESPACE,
                "tasks",
                "kill",
                "-a",
                "-s",
                "KILL",
                task,
            ],
            capture_output=True,
            check=False,
            timeout=30,
        )
