"""A real node: kubelet v1.36 (`KUBEBUILDER_ASSETS`) on containerd, with a host-only pod network,
registered with a control plane started for it (`control_plane.start(node_ca=...)`).

Start-up waits on conditions: containerd answering on its socket, then the Node `Ready` in the
API. Stopping leaves nothing: the kubelet first (so it restarts nothing), then every container
through containerd, the shims (they outlive containerd), containerd, the mounts under the node's
folder, the pods' network namespaces and the bridge.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import ROOT
from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.control_plane import ADMIN_TOKEN, ControlPlane, Unavailable, assets
from tests.world.node import containerd, network
from tests.world.node.kubelet import kubeconfig, kubelet_configuration, write_yaml
from tests.world.node.pki import ClusterCA

NODE_NAME = "gpu-node-1"
READY_SECONDS = 120.0
NETNS_DIR = Path("/run/netns")
PAUSE_ARCHIVE = "pause-3.10.tar"


def pause_archive() -> Path | None:
    """The pod sandbox image: beside the binaries, or in ../shared/kube/images."""
    for folder in (
        Path(os.environ.get("KUBEBUILDER_ASSETS", "/nonexistent")),
        ROOT.parent / "shared" / "kube" / "images",
    ):
        if (folder / PAUSE_ARCHIVE).is_file():
            return folder / PAUSE_ARCHIVE
    return None


def unavailable_reason() -> str | None:
    """Why a real node cannot run here, or None."""
    try:
        binaries = assets()
    except Unavailable as error:
        return str(error)
    if not os.access(binaries / "kubelet", os.X_OK):
        return "KUBEBUILDER_ASSETS has no kubelet (../shared/kube/unpack.sh unpacks one)"
    if os.geteuid() != 0:
        return "a kubelet and containerd need root"
    if pause_archive() is None:
        return f"no {PAUSE_ARCHIVE} (../shared/kube/images)"
    return containerd.missing()


@dataclass
class RealNode:
    name: str
    folder: Path
    plane: ControlPlane
    version: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    namespaces_before: set[str] = field(default_factory=set)

    @property
    def socket(self) -> Path:
        return self.folder / "containerd" / "containerd.sock"

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-6000:] if path.exists() else ""

    def import_image(self, archive: Path, *names: str) -> None:
        """Import a docker-archive into containerd and tag it with `names` (the references pods
        use, e.g. `docker.io/library/gpu-admission:0.1.0` for `gpu-admission:0.1.0`)."""
        before = set(containerd.image_names(self.socket))
        containerd.import_archive(self.socket, archive)
        imported = sorted(set(containerd.image_names(self.socket)) - before) or sorted(before)
        source = next((n for n in imported if not n.startswith("sha256:")), imported[0])
        if names:
            containerd.tag(self.socket, source, *names)

    def stop(self) -> None:
        kubelet = self.processes.pop("kubelet", None)
        if kubelet is not None:
            kubelet.kill()
            kubelet.wait()
        if "containerd" in self.processes:
            containerd.kill_tasks(self.socket)
        _kill_shims(str(self.folder))
        for process in self.processes.values():
            process.kill()
            process.wait()
        self.processes.clear()
        _unmount_under(self.folder)
        for name in set(_namespaces()) - self.namespaces_before:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        network.bridge_down()
        shutil.rmtree(self.folder, ignore_errors=True)


def _namespaces() -> list[str]:
    return [p.name for p in NETNS_DIR.iterdir()] if NETNS_DIR.is_dir() else []


def _kill_shims(marker: str) -> None:
    """containerd's shims (and so their containers) started for a folder containing `marker`."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and marker.encode() in b" ".join(argv)
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(folder: Path) -> None:
    prefix = str(folder) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _start(node: RealNode, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    log = (node.folder / f"{name}.log").open("wb")
    node.processes[name] = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def _node_status(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    request = urllib.request.Request(f"{plane.url}/api/v1/nodes/{name}")
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            node = json.load(answer)
    except urllib.error.HTTPError:
        return None
    ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
    return node if ready and ready[0]["status"] == "True" else None


def start(plane: ControlPlane, ca: ClusterCA, name: str = NODE_NAME) -> RealNode:
    """A kubelet on containerd registered with `plane` (started with `node_ca=ca` and
    `host=network.HOST`); returns once the Node is Ready."""
    reason = unavailable_reason()
    if reason:
        raise Unavailable(reason)
    _kill_shims("/kube-node-")  # an interrupted run's containers
    folder = Path(tempfile.mkdtemp(prefix="kube-node-"))
    node = RealNode(name=name, folder=folder, plane=plane, namespaces_before=set(_namespaces()))
    try:
        network.bridge_up()
        runtime = folder / "containerd"
        runtime.mkdir()
        cni = network.write_conflist(folder / "cni", folder / "ipam")
        (runtime / "config.toml").write_text(containerd.config(runtime, cni.parent))
        _start(
            node,
            "containerd",
            ["containerd", "--config", str(runtime / "config.toml")],
            containerd.environment(),
        )
        while_running(
            lambda: (
                subprocess.run(
                    ["ctr", "--address", str(node.socket), "version"],
                    capture_output=True,
                    check=False,
                ).returncode
                == 0
            ),
            "containerd to answer",
            node.processes,
            60,
            folder / "containerd.log",
        )
        archive = pause_archive()
        assert archive is not None
        containerd.import_archive(node.socket, archive)

        pki = folder / "pki"
        identity = f"system:node:{name}"
        serving = ca.issue(
            "kubelet",
            identity,
            dns_names=(name,),
            ip_addresses=(network.HOST, "127.0.0.1"),
            server=True,
        )
        client = ca.issue("kubelet-client", identity, ("system:nodes",), client=True)
        config = kubelet_configuration(
            address=network.HOST,
            port=free_port(),
            healthz_port=free_port(),
            runtime_socket=node.socket,
            client_ca=ca.pair.cert,
            serving=serving,
            logs_dir=folder / "pod-logs",
        )
        access = kubeconfig(plane.url, ca.pair.cert, client)
        kubelet_argv = [
            str(assets() / "kubelet"),
            f"--config={write_yaml(folder / 'kubelet.yaml', config)}",
            f"--kubeconfig={write_yaml(folder / 'kubelet.kubeconfig', access)}",
            f"--hostname-override={name}",
            f"--node-ip={network.HOST}",
            f"--root-dir={folder / 'kubelet'}",
            f"--cert-dir={pki}",
            "--v=1",
        ]
        _start(node, "kubelet", kubelet_argv)
        ready = while_running(
            lambda: _node_status(plane, name),
            f"Node {name} to be Ready",
            node.processes,
            READY_SECONDS,
            folder / "kubelet.log",
        )
        node.version = str(ready["status"]["nodeInfo"]["kubeletVersion"])
    except BaseException:
        node.stop()
        raise
    return node
