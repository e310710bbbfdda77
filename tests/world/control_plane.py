"""A real Kubernetes control plane for tests: etcd and kube-apiserver, and kube-controller-manager
where Jobs, garbage collection or namespace deletion matter.

The binaries come from ``KUBEBUILDER_ASSETS``, envtest's layout: CI sets it from
``../shared/kube/unpack.sh`` (kube-apiserver, kube-controller-manager and kube-scheduler 1.36.2,
etcd 3.4); elsewhere controller-runtime's ``setup-envtest use 1.36 -p path`` gives the same
folder (without the controller-manager). Everything listens on 127.0.0.1, on free ports, with
its state in a temporary folder. The flags are those ``../shared/kube/README.md`` lists: a
static admin token (group system:masters), RBAC, a service-account key pair made here so
TokenRequest works, and a loopback Service range: nothing routes Services here, so a ClusterIP
dialled by mistake must be one that no other host answers.

Start-up is waited on by condition (each server's health endpoint answering), never by sleeps.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.node.pki import ClusterCA

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
ADMIN_TOKEN = "gpu-admission-tests-admin"
START_SECONDS = 60.0
SERVICE_RANGE = "127.96.0.0/16"
FIRST_SERVICE_IP = "127.96.0.1"  # the `kubernetes` Service's ClusterIP
PR_SET_PDEATHSIG = 1  # linux/prctl.h


# What this process started, for the test run's summary: server versions, or why none.
STARTED: list[str] = []
SKIPPED: list[str] = []


class Unavailable(Exception):
    """The control plane cannot start here, and why."""


def assets() -> Path:
    """The folder with the binaries, or Unavailable saying what is missing."""
    folder = os.environ.get(ASSETS_VARIABLE)
    if not folder:
        raise Unavailable(
            f"{ASSETS_VARIABLE} is not set (export KUBEBUILDER_ASSETS=$(../shared/kube/unpack.sh),"
            " or use setup-envtest: docs/development.md)"
        )
    path = Path(folder)
    for binary in ("etcd", "kube-apiserver"):
        if not os.access(path / binary, os.X_OK):
            raise Unavailable(f"{ASSETS_VARIABLE}={folder} has no executable {binary}")
    return path


def _ready(url: str, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class ControlPlane:
    """A running etcd and kube-apiserver (and kube-controller-manager when asked)."""

    folder: Path
    port: int
    version: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    etcd_url: str = ""
    apiserver_argv: list[str] = field(default_factory=list)
    apiserver: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"
    ca_file: Path | None = None  # set for a cluster with a real node: its CA

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        """The CA of the server's serving certificate (self-signed, naming 127.0.0.1; or the
        cluster CA of a control plane for a real node)."""
        return self.ca_file or self.folder / "certs" / "apiserver.crt"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (JSON lines, AUDIT_POLICY): where warn- and audit-mode
        policies' records land, as on a cluster with auditing on."""
        return self.folder / "audit.log"

    def stop(self) -> None:
        # Its state is thrown away with its folder, so nothing needs a graceful shutdown
        # (kube-apiserver's takes seconds).
        for process in reversed(self.processes):
            process.kill()
            process.wait()
        self.processes.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def stop_apiserver(self) -> None:
        """An API outage: kube-apiserver is killed, as when it crashes or its node is lost, so
        every connection drops at once and its port refuses new ones until `start_apiserver`.
        (A SIGTERM is a rolling restart instead: it keeps serving open watches for up to a
        minute while it drains.)"""
        process = self.apiserver
        assert process is not None, "kube-apiserver is not running"
        process.kill()
        process.wait()
        self.processes.remove(process)
        self.apiserver = None

    def start_apiserver(self) -> None:
        """kube-apiserver again, on the same port with the same flags, state and certificate;
        returns once it is ready."""
        assert self.apiserver is None, "kube-apiserver is running"
        self.apiserver = _start(self, "kube-apiserver", self.apiserver_argv)
        _wait(self, "kube-apiserver", self.apiserver, f"{self.url}/readyz")

    def compact_etcd(self) -> None:
        """Compact etcd to its current revision: a watch from an older resourceVersion of a
        resource the API server serves without its watch cache (ConfigMaps, see `start`) is
        answered 410 Gone, as any watch is once its history has been compacted away."""
        revision = _etcd_call(self.etcd_url, "kv/range", {"key": "AA=="})["header"]["revision"]
        _etcd_call(self.etcd_url, "kv/compaction", {"revision": revision, "physical": True})

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _etcd_call(base: str, method: str, body: dict[str, object]) -> dict[str, Any]:
    """etcd's v3 API through its JSON gateway (etcd 3.4 serves it at /v3/)."""
    request = urllib.request.Request(
        f"{base}/v3/{method}", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.load(answer))


def _write_keys(folder: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (folder / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (folder / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _write_kubeconfig(plane: ControlPlane) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": plane.url,
                    "certificate-authority": str(plane.ca_path),
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        "current-context": "test",
    }
    plane.kubeconfig.write_text(yaml.safe_dump(config))


def _die_with_parent() -> None:
    """In the child: be killed when the test process dies, however it dies (Linux
    PR_SET_PDEATHSIG), so an interrupted run leaves no server behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _start(plane: ControlPlane, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    # PR_SET_PDEATHSIG fires when the starting *thread* ends: a server started from a worker
    # thread (asyncio.to_thread) would be killed with it.
    assert threading.current_thread() is threading.main_thread(), f"start {name} on the main thread"
    log = (plane.folder / f"{name}.log").open("wb")
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=plane.folder,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    plane.processes.append(process)
    return process


def _wait(plane: ControlPlane, name: str, process: subprocess.Popen[bytes], url: str) -> None:
    try:
        while_running(
            lambda: _ready(url, ADMIN_TOKEN),
            f"{name} to answer {url}",
            {name: process},
            START_SECONDS,
            plane.folder / f"{name}.log",
        )
    except AssertionError as error:
        raise Unavailable(str(error)) from None


# Metadata level (annotations included) for the kinds the policies judge; nothing else.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update]
    resources:
      - group: ""
        resources: [pods, secrets, persistentvolumeclaims]
  - level: None
"""


def _node_flags(plane: ControlPlane, ca: ClusterCA) -> list[str]:
    """What a real kubelet needs of the API server (`../shared/kube/README.md`, "A real node"):
    a serving certificate naming the address pods dial, client certificates from the cluster CA
    (kubelets are `system:node:<name>` in `system:nodes`), the Node authorizer beside RBAC and
    NodeRestriction, a client certificate of its own for the kubelets' logs and exec, and
    webhooks called at their Service's endpoint (no kube-proxy routes a ClusterIP here)."""
    serving = ca.issue(
        "apiserver",
        "kube-apiserver",
        dns_names=("kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"),
        ip_addresses=(plane.host, "127.0.0.1", FIRST_SERVICE_IP),
        server=True,
    )
    kubelet_client = ca.issue(
        "apiserver-kubelet-client",
        "kube-apiserver-kubelet-client",
        ("system:masters",),
        client=True,
    )
    return [
        f"--advertise-address={plane.host}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        f"--client-ca-file={ca.pair.cert}",
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={kubelet_client.cert}",
        f"--kubelet-client-key={kubelet_client.key}",
        "--enable-aggregator-routing=true",
    ]


def start(
    controller_manager: bool = False,
    scheduler: bool = False,
    node_ca: ClusterCA | None = None,
    host: str = "127.0.0.1",
) -> ControlPlane:
    """Start etcd and kube-apiserver (and kube-controller-manager, kube-scheduler) and wait
    until they serve. With `node_ca`, the API server serves on `host` (the pod network's
    address, tests/world/node) for a real kubelet."""
    binaries = assets()
    folder = Path(tempfile.mkdtemp(prefix="kube-"))
    plane = ControlPlane(folder=folder, port=free_port(), host=host)
    if node_ca is not None:
        plane.ca_file = node_ca.pair.cert
    try:
        _write_keys(folder)
        (folder / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,admin,system:masters\n")
        (folder / "audit-policy.yaml").write_text(AUDIT_POLICY)
        client, peer = free_port(), free_port()
        etcd = _start(
            plane,
            "etcd",
            [
                str(binaries / "etcd"),
                "--data-dir",
                str(folder / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
            ],
        )
        _wait(plane, "etcd", etcd, f"http://127.0.0.1:{client}/health")
        plane.etcd_url = f"http://127.0.0.1:{client}"
        plane.apiserver_argv = [
            str(binaries / "kube-apiserver"),
            "--etcd-servers",
            f"http://127.0.0.1:{client}",
            "--bind-address",
            plane.host,
            "--secure-port",
            str(plane.port),
            "--cert-dir",
            str(folder / "certs"),
            # Tokens are issued by the server's own URL (as EKS or GKE issue them by a URL a
            # cloud's STS can reach), where it serves OIDC discovery and its JWKS; the
            # in-cluster name is still accepted.
            "--service-account-issuer",
            plane.url,
            "--service-account-issuer",
            "https://kubernetes.default.svc.cluster.local",
            # Else discovery names the keys at the server's advertise address, which is
            # not this machine's loopback.
            "--service-account-jwks-uri",
            f"{plane.url}/openid/v1/jwks",
            "--service-account-key-file",
            str(folder / "sa.pub"),
            "--service-account-signing-key-file",
            str(folder / "sa.key"),
            "--token-auth-file",
            str(folder / "tokens.csv"),
            "--authorization-mode",
            "RBAC" if node_ca is None else "Node,RBAC",
            # Loopback: a Service's ClusterIP that something dials by mistake (a webhook
            # registered by Service) is refused on this machine, never sent anywhere.
            "--service-cluster-ip-range",
            SERVICE_RANGE,
            # A played kubelet's address is 127.0.0.1 (InternalIP); by default the server
            # would first look its Hostname up in DNS, off this machine.
            "--kubelet-preferred-address-types=InternalIP",
            "--audit-policy-file",
            str(folder / "audit-policy.yaml"),
            "--audit-log-path",
            str(plane.audit_log),
            # ConfigMaps straight from etcd: compacting etcd then makes a watch from an
            # older resourceVersion 410 Gone, which the informer tests need on demand (a
            # watch-cached resource answers from the cache's own window). The product
            # watches no ConfigMaps.
            "--watch-cache-sizes=configmaps#0",
        ]
        if node_ca is not None:
            plane.apiserver_argv += _node_flags(plane, node_ca)
        plane.start_apiserver()
        _write_kubeconfig(plane)
        if controller_manager:
            _start_controller_manager(plane, binaries)
        if scheduler:
            _start_scheduler(plane, binaries)
        plane.version = _server_version(plane)
        STARTED.append(plane.version)
    except BaseException:
        plane.stop()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return plane


def _start_controller_manager(plane: ControlPlane, binaries: Path) -> None:
    _start_component(
        plane,
        binaries,
        "kube-controller-manager",
        [
            "--service-account-private-key-file",
            str(plane.folder / "sa.key"),
            "--use-service-account-credentials",
            "--root-ca-file",
            str(plane.ca_path),
            # All of them, the node lifecycle controller included: it lifts the not-ready taint
            # the API server puts on every new Node once the node's kubelet (played) says
            # Ready, and marks Nodes nobody heartbeats unreachable, as in a cluster.
            "--controllers=*",
            "--node-monitor-period=1s",
            # Its default client rate (20 requests a second) makes each namespace deletion, a
            # hundred list and delete-collection calls, take five seconds.
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
        ],
    )


def _start_scheduler(plane: ControlPlane, binaries: Path) -> None:
    _start_component(plane, binaries, "kube-scheduler", [])


def _start_component(plane: ControlPlane, binaries: Path, name: str, flags: list[str]) -> None:
    """A client of the API server with a health endpoint: kube-controller-manager or
    kube-scheduler, alone (no leader election), on a free loopback port."""
    binary = binaries / name
    if not os.access(binary, os.X_OK):
        raise Unavailable(f"{ASSETS_VARIABLE} has no {name}")
    port = free_port()
    argv = [str(binary), "--kubeconfig", str(plane.kubeconfig), *flags, "--leader-elect=false"]
    argv += ["--bind-address", "127.0.0.1", "--secure-port", str(port)]
    process = _start(plane, name, argv)
    _wait(plane, name, process, f"https://127.0.0.1:{port}/healthz")


def _server_version(plane: ControlPlane) -> str:
    request = urllib.request.Request(f"{plane.url}/version")
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    context.check_hostname = False
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        return str(json.load(answer)["gitVersion"])
