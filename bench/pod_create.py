"""Pod-create latency through a real kube-apiserver: what admission adds to a CPU-only pod and to a
pod that needs the webhook, against no admission at all and against a Go webhook pair, in one run.

    python -m bench.pod_create [--pods 200] [--rounds 5] [--dry-run] [--kind KIND] [--variant NAME]
                               [--json FILE]

Needs KUBEBUILDER_ASSETS (the real control plane) and Go (`apt-get install golang-go`). Three
admission set-ups, applied in turn, in a rotated order each round, on one API server:

- `none`: no webhook, no admission policy of the project's;
- `go`: a Go `net/http` webhook pair (bench/go_peer: a mutating webhook for every pod, with the
  same shape of patch, and a validating one that allows), `failurePolicy: Fail`, spoken to in
  HTTP/1.1 as kube-apiserver speaks to every webhook in a cluster (`k8s.io/apiserver/pkg/util/
  webhook/client.go` sets `NextProtos = ["http/1.1"]` for `clientConfig.service` and for a URL
  that is not loopback; the set-ups here are registered at 127.0.0.1, so the peer refuses h2);
- `go-h2`: the same pair offering HTTP/2, which kube-apiserver negotiates with a loopback URL
  only: what a webhook server that speaks HTTP/2 could gain, never the baseline (the project's
  service speaks HTTP/1.1);
- `project`: the base as installed: the admission objects its controller writes for the default
  configuration (GPU visibility in a MutatingAdmissionPolicy, the checks in
  ValidatingAdmissionPolicies, both webhook configurations with their routing), calling
  the project's service (`bench.project_server`, every policy on, cluster state from
  examples/cluster-state.yaml).

Each round creates `--pods` pods of each `--kind` (default `cpu` and `gpu`): CPU-only pods, GPU pods
(`nvidia.com/gpu: 1`, which the project's routing sends to its webhook: its memory share depends on
the nodes, which time-slice it in the example cluster, and the Go pair is told so) and shared-GPU
pods (`shared`: `nvidia.com/gpu.shared: 1`, which the pods policy judges too), one at a time over
one kept-alive connection, and times each create. A set-up counts once the API server applies it
(probed with dry runs: its own informers pick admission configuration up a moment after it is
written), then `--warm-up` untimed creates of each kind (200: the first hundred or so creates after
admission policies are written are a millisecond slower, which an installed cluster pays once, not
per pod). `--dry-run`: server-side dry runs, admission without storage. Figures: each set-up's
median and p99 per round, and per round the ratios project/none and project/go.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.admission import Server, _free_port, _start
from bench.admission_tail import build_go_peer
from bench.policy_forms import (
    MARK_LABEL,
    apply_configuration,
    coarse_pod_policy,
    marked_pods,
    marked_pods_unguarded,
    routing_without_checks,
    visibility_changing_pods_only,
    without_pod_checks_webhook,
)
from bench.server_side import GoPeerConnections, Snapshot, figures, http_text, read_all
from certs.issue import CertBundle, ServingSpec, issue_bundle
from gpu_admission.config.model import Config
from webhooks.apiserver_policies.bindings import admission_policy_objects
from webhooks.apiserver_policies.webhook_configurations import webhook_configurations

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "bench"
SETUPS = ("none", "go", "go-h2", "project")
GO_SETUPS = ("go", "go-h2")  # the Go pair in HTTP/1.1, and offering HTTP/2
CUDA = "nvidia/cuda:12.4.1-base-ubuntu22.04"
WAIT_SECONDS = 60.0


# The pods created, by kind: CPU-only; a whole GPU under the plain name (the webhook's); a
# time-sliced GPU under its renamed name (the webhook's, and the one the pods policy judges).
KINDS = ("cpu", "gpu", "shared")
_GPU_RESOURCE = {"gpu": "nvidia.com/gpu", "shared": "nvidia.com/gpu.shared"}


def pod(kind: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": CUDA}
    if kind in _GPU_RESOURCE:
        container["resources"] = {"limits": {_GPU_RESOURCE[kind]: "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{kind}-"},
        "spec": {"containers": [container]},
    }


class Api:
    """Creates over one kept-alive HTTPS connection, as lean a client as the timing allows."""

    def __init__(self, url: str, token: str, ca: Path) -> None:
        host, port = url.removeprefix("https://").split(":")
        context = ssl.create_default_context(cafile=str(ca))
        self._connection = http.client.HTTPSConnection(host, int(port), context=context)
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        self._connection.request(method, path, body=data, headers=self._headers)
        answer = self._connection.getresponse()
        text = answer.read()
        return answer.status, json.loads(text) if text else None

    def text(self, path: str) -> str:
        """A GET answered in text: the server's /metrics."""
        return self.raw(path).decode()

    def raw(self, path: str) -> bytes:
        """A GET's body as sent: a profile, /metrics."""
        self._connection.request("GET", path, headers=self._headers)
        return self._connection.getresponse().read()

    def create_pod(self, body: dict[str, Any], dry_run: bool) -> tuple[int, Any]:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods" + ("?dryRun=All" if dry_run else "")
        return self.call("POST", path, body)


REGISTRATION = "/apis/admissionregistration.k8s.io/v1"
COLLECTIONS = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}


def _webhook(name: str, url: str, ca: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        **extra,
    }


def go_objects(port: int, ca: str) -> list[dict[str, Any]]:
    base = f"https://127.0.0.1:{port}"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "bench-go"},
            "webhooks": [
                _webhook(
                    "pods.mutate.go.bench", f"{base}/mutate", ca, reinvocationPolicy="IfNeeded"
                )
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "bench-go"},
            "webhooks": [_webhook("pods.validate.go.bench", f"{base}/validate", ca)],
        },
    ]


def project_objects(port: int, ca: str) -> list[dict[str, Any]]:
    """The base's admission policies and webhook configurations, calling the service here."""
    configurations = webhook_configurations(Config())
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"].pop("service")["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
    return admission_policy_objects(Config()) + configurations


def setup_objects(setup: str, port: int, ca: str) -> list[dict[str, Any]]:
    """The project's admission objects calling `port`, in the form `setup` (a variant's, if it
    changes them) gives them."""
    objects = project_objects(port, ca)
    form = VARIANTS[setup].objects if setup in VARIANTS else None
    return objects if form is None else form(objects, Config())


def apply(api: Api, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        status, answer = api.call("POST", f"{REGISTRATION}/{COLLECTIONS[obj['kind']]}", obj)
        assert status == 201, answer


def remove(api: Api, objects: list[dict[str, Any]]) -> None:
    for obj in reversed(objects):
        name = obj["metadata"]["name"]
        api.call("DELETE", f"{REGISTRATION}/{COLLECTIONS[obj['kind']]}/{name}")


def answered_as(api: Api, setup: str, peers: Mapping[str, GoPeerConnections]) -> bool:
    """Whether the API server applies `setup` now: a CPU pod's env and a shared-GPU pod's say
    which admission ran (the Go peer writes GPU_REPLICAS, the project GPU_SHARED_REPLICAS: one
    without the other, so the set-up before has gone; a policy left over from the project would
    give the Go peer's CPU pod a second entry), and the Go peers' counts which of them answered
    (`peers` by set-up: the two write the same)."""
    before = {name: peer.reviews() for name, peer in peers.items()}
    cpu_status, cpu = api.create_pod(pod("cpu"), dry_run=True)
    shared_status, made = api.create_pod(pod("shared"), dry_run=True)
    if cpu_status != 201 or shared_status != 201:
        return False
    called = {name for name, peer in peers.items() if peer.reviews() > before[name]}
    cpu_env = cpu["spec"]["containers"][0].get("env") or []
    names = {e["name"] for e in made["spec"]["containers"][0].get("env") or []}
    if setup == "none":
        return not cpu_env and not names and not called
    go, project = "GPU_REPLICAS" in names, "GPU_SHARED_REPLICAS" in names
    if setup in GO_SETUPS:
        return len(cpu_env) == 1 and go and not project and called == {setup}
    # The project, or a variant of it.
    return len(cpu_env) == 1 and project and not go and not called


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)  # polling a condition, bounded by the deadline


@dataclass
class Sample:
    setup: str
    kind: str  # one of KINDS
    round: int
    latencies_ms: list[float] = field(repr=False)
    # Where the servers measure, over the same creates (bench.server_side.figures).
    server: dict[str, float] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99(self) -> float:
        return statistics.quantiles(self.latencies_ms, n=100)[98]


def timed_creates(api: Api, kind: str, count: int, dry_run: bool) -> list[float]:
    body = pod(kind)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        status, answer = api.create_pod(body, dry_run)
        latencies.append(1000.0 * (time.perf_counter() - started))
        assert status == 201, answer
    return latencies


@dataclass(frozen=True)
class Variant:
    """The project as a set-up of its own, otherwise than installed, to pair with `project`
    round by round: its service run with other arguments, or other admission objects."""

    server_args: tuple[str, ...] = ()
    objects: Callable[[list[dict[str, Any]], Config], list[dict[str, Any]]] | None = None


VARIANTS = {
    # The service on uvloop's event loop (as the controller runs), not asyncio's own.
    "project-uvloop": Variant(server_args=("--loop", "uvloop")),
    # GPU visibility as an ApplyConfiguration (bench/policy_forms.py), not a JSONPatch.
    "project-applyconfig": Variant(objects=apply_configuration),
    # The webhook's routing without its stateless-checks half (bench/policy_forms.py).
    "project-routing-without-checks": Variant(objects=routing_without_checks),
    # The pods policy matching every pod it may refuse, as before its exact condition.
    "project-coarse-pod-policy": Variant(objects=coarse_pod_policy),
    # No validating webhook for pods: the most folding it into the mutating one could save.
    "project-without-pod-checks-webhook": Variant(objects=without_pod_checks_webhook),
    # The visibility policy matching only pods it changes at first, as before it also matched
    # the GPU pods the webhook does not see, so that a container a later webhook adds is hidden.
    "project-visibility-changing-pods-only": Variant(objects=visibility_changing_pods_only),
    # The pods the service handled marked, and left to its webhook in the second pass.
    "project-marked-pods": Variant(server_args=("--mark-label", MARK_LABEL), objects=marked_pods),
    # The same without the policy that makes an author's label gain nothing: its share.
    "project-marked-pods-unguarded": Variant(
        server_args=("--mark-label", MARK_LABEL), objects=marked_pods_unguarded
    ),
}


@dataclass
class ProjectServer:
    port: int
    stats: str  # its plain-HTTP /metrics and /connections


@dataclass
class Servers:
    projects: dict[str, ProjectServer]  # "project", and each variant asked for
    go_ports: dict[str, int]  # by set-up: "go", "go-h2"
    ca: str  # base64, as caBundle takes it
    ca_file: str

    def go_peers(self) -> dict[str, GoPeerConnections]:
        return go_peers(self.go_ports, self.ca_file)


def go_peers(ports: Mapping[str, int], ca_file: str) -> dict[str, GoPeerConnections]:
    """Each Go peer's /connections, by set-up."""
    return {
        setup: GoPeerConnections(f"https://127.0.0.1:{port}", ca_file, setup)
        for setup, port in ports.items()
    }


def serving_certificates(tmp: Path) -> CertBundle:
    """A CA and a serving certificate for 127.0.0.1, written to `tmp` (tls.crt, tls.key, ca.crt)
    for the webhook servers, which all serve with it."""
    bundle = issue_bundle(ServingSpec("bench", "bench", dns=["localhost"], ips=["127.0.0.1"]))
    (tmp / "tls.crt").write_bytes(bundle.cert_pem)
    (tmp / "tls.key").write_bytes(bundle.key_pem)
    (tmp / "ca.crt").write_bytes(bundle.ca_bundle_pem)
    return bundle


# examples/cluster-state.yaml, which the project's service reads, has nodes that time-slice GPUs
# under the plain name: the service writes a memory share for a `gpu` pod, and so must the pair.
SHARED_PLAIN = "nvidia.com/gpu"


def go_peer_command(tmp: Path, port: int, setup: str = "go") -> list[str]:
    """The Go webhook pair of `setup` (HTTP/1.1 only; `go-h2`: offering HTTP/2 too), built into
    `tmp`, serving on `port` with `serving_certificates`."""
    command = [str(build_go_peer(tmp)), "-addr", f"127.0.0.1:{port}", "-shared", SHARED_PLAIN]
    command += ["-http2"] if setup == "go-h2" else []
    return [*command, "-cert", str(tmp / "tls.crt"), "-key", str(tmp / "tls.key")]


def start_go_peers(
    tmp: Path, start: Callable[[str, list[str], int], Server] = _start
) -> tuple[dict[str, int], list[Server]]:
    """Both Go pairs, each on a free port, started by `start` (pinned, or not): the ports by
    set-up, and the processes."""
    ports = {setup: _free_port() for setup in GO_SETUPS}
    started = [start(s, go_peer_command(tmp, port, s), port) for s, port in ports.items()]
    return ports, started


@contextmanager
def servers(tmp: Path, variants: list[str]) -> Iterator[Servers]:
    """The Go peer and the project's service (and each variant of it), each in a process of its
    own, with the CA all are signed by."""
    bundle = serving_certificates(tmp)
    go_ports, started = start_go_peers(tmp)
    projects = {}
    for name in ["project", *variants]:
        port, stats_port = _free_port(), _free_port()
        extra = VARIANTS[name].server_args if name in VARIANTS else ()
        command = [sys.executable, "-m", "bench.project_server", *extra]
        command += ["--port", str(port), "--cert-dir", str(tmp)]
        command += ["--stats-port", str(stats_port)]
        started.append(_start(name, command, port))
        projects[name] = ProjectServer(port, f"http://127.0.0.1:{stats_port}")
    try:
        yield Servers(
            projects,
            go_ports,
            base64.b64encode(bundle.ca_bundle_pem).decode(),
            str(tmp / "ca.crt"),
        )
    finally:
        for server in started:
            server.process.terminate()
            server.process.wait(timeout=30)


def measure(args: argparse.Namespace) -> list[Sample]:
    sys.path.insert(0, str(ROOT))
    from tests.world import control_plane  # the real control plane, started as the tests do

    plane = control_plane.start(controller_manager=True)  # it makes the default ServiceAccount
    samples: list[Sample] = []
    try:
        variants = args.variant or []
        with (
            tempfile.TemporaryDirectory() as tmpdir,
            servers(Path(tmpdir), variants) as running,
        ):
            api = Api(plane.url, control_plane.ADMIN_TOKEN, plane.ca_path)
            peers = running.go_peers()
            wait_until(lambda: _answers(running, peers), "the webhook servers")

            def snapshot(setup: str) -> Snapshot:
                project = running.projects.get(setup, running.projects["project"])
                return read_all(lambda: api.text("/metrics"), project.stats, peers.values())

            status, answer = api.call(
                "POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}
            )
            assert status == 201, answer
            wait_until(lambda: api.create_pod(pod("cpu"), dry_run=True)[0] == 201, "the namespace")
            made: dict[str, list[dict[str, Any]]] = {"none": []}
            for name, port in running.go_ports.items():
                made[name] = go_objects(port, running.ca)
            for name, project in running.projects.items():
                made[name] = setup_objects(name, project.port, running.ca)
            setups = [*SETUPS, *variants]
            for index in range(args.rounds):
                turn = index % len(setups)
                order = setups[turn:] + setups[:turn]
                for setup in order:
                    apply(api, made[setup])
                    wait_until(lambda s=setup: answered_as(api, s, peers), f"{setup} to be applied")
                    for kind in args.kind:
                        timed_creates(api, kind, args.warm_up, args.dry_run)
                    for kind in args.kind:
                        before = snapshot(setup)
                        latencies = timed_creates(api, kind, args.pods, args.dry_run)
                        measured = figures(before, snapshot(setup), args.pods)
                        samples.append(Sample(setup, kind, index, latencies, measured))
                    remove(api, made[setup])
                print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        plane.stop()
    return samples


def _answers(running: Servers, peers: Mapping[str, GoPeerConnections]) -> bool:
    try:
        for project in running.projects.values():
            http_text(f"{project.stats}/connections")
        for peer in peers.values():
            peer.snapshot()
    except OSError:
        return False
    return True


def spread(values: list[float], digits: int = 2) -> str:
    """Median (min - max)."""
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f} - {max(values):.{digits}f})"
    )


def _setups(samples: list[Sample]) -> list[str]:
    present = {s.setup for s in samples}
    return [*(s for s in SETUPS if s in present), *sorted(present - set(SETUPS))]


# The API server's own time for a pod that needs the webhook, per set-up: the webhook calls it
# makes (each mutating and validating one, as many calls per create as it made).
def apiserver_webhook_ms(server: dict[str, float]) -> float:
    """The API server's time in webhooks per create (its own figure, summed over webhooks):
    `server` is a timed block's figures (bench.server_side.figures)."""
    total = 0.0
    for key, value in server.items():
        if key.startswith("webhook ") and key.endswith(" ms"):
            calls = server.get(key.removesuffix(" ms") + " calls/create", 1.0)
            total += value * calls
    return total


def report(samples: list[Sample]) -> str:
    rounds = sorted({s.round for s in samples})
    by = {(s.setup, s.kind, s.round): s for s in samples}
    setups = _setups(samples)
    lines = ["median and p99 per round, ms: median (min - max) over rounds"]
    for kind in [k for k in KINDS if any(s.kind == k for s in samples)]:
        for setup in setups:
            chosen = [by[(setup, kind, r)] for r in rounds]
            lines.append(
                f"{kind} {setup:8s} median {spread([s.median for s in chosen])}  "
                f"p99 {spread([s.p99 for s in chosen])}"
            )
        pairs = [(p, o) for p in setups if p.startswith("project") for o in ("none", "go")]
        # What HTTP/2 would gain: the pair's own, and the project against it (never the target).
        pairs += [("go-h2", "go"), ("project", "go-h2")]
        pairs += [(v, "project") for v in setups if v.startswith("project-")]
        pairs = [(a, b) for a, b in pairs if a in setups and b in setups]
        for mine, other in pairs:
            medians = [by[(mine, kind, r)].median / by[(other, kind, r)].median for r in rounds]
            p99s = [by[(mine, kind, r)].p99 / by[(other, kind, r)].p99 for r in rounds]
            lines.append(
                f"{kind} {mine}/{other:4s}  median ratio {spread(medians)}  "
                f"p99 ratio {spread(p99s)}"
            )
        for mine, other in pairs:
            if other == "none":
                continue
            theirs = [apiserver_webhook_ms(by[(other, kind, r)].server) for r in rounds]
            ours = [apiserver_webhook_ms(by[(mine, kind, r)].server) for r in rounds]
            if not all(theirs):
                continue
            ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
            lines.append(
                f"{kind} {mine}/{other:4s}  API server's webhook ms ratio {spread(ratios)}"
            )
    return "\n".join(lines + server_report(samples))


# What the report shows of the servers' figures, by the start of their keys: the API server's
# per webhook and per admission plugin, the project's own time per review, the connections each
# webhook server accepted and the HTTP versions, the project's event-loop lag (mean ms a tick)
# and its ticks over 1 ms late.
SHOWN = (
    "webhook ",
    "plugin MutatingAdmissionPolicy ms",
    "plugin ValidatingAdmissionPolicy ms",
    "plugin MutatingAdmissionWebhook ms",
    "plugin ValidatingAdmissionWebhook ms",
    "service ",
    "project ",
    "go ",
    "go-h2 ",
    "lag ms",
    "late",
)


def server_report(samples: list[Sample]) -> list[str]:
    """Where the API server (and each webhook server) measured the same creates: each figure's
    median (min - max) over rounds, by set-up and kind."""
    rounds = sorted({s.round for s in samples})
    by = {(s.setup, s.kind, s.round): s for s in samples}
    lines = ["", "where the servers measure, per timed block: median (min - max) over rounds"]
    for kind in [k for k in KINDS if any(s.kind == k for s in samples)]:
        for setup in _setups(samples):
            chosen = [by[(setup, kind, r)] for r in rounds if (setup, kind, r) in by]
            for key in sorted({k for s in chosen for k in s.server if k.startswith(SHOWN)}):
                values = [s.server.get(key, 0.0) for s in chosen]
                if any(values) or key.endswith(" connections"):  # none opened is the news
                    lines.append(f"{kind} {setup:8s} {key:58s} {spread(values)}")
    return lines


def missing_prerequisite() -> str:
    """What the pod benchmarks need and this machine lacks, said; "" when nothing is missing."""
    if not os.environ.get("KUBEBUILDER_ASSETS"):
        return "KUBEBUILDER_ASSETS is not set (../shared/kube/unpack.sh)"
    if subprocess.run(["sh", "-c", "command -v go"], capture_output=True).returncode != 0:
        return "go is not installed: apt-get install golang-go"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_create", description=__doc__)
    parser.add_argument("--pods", type=int, default=200, help="timed creates per kind and round")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=200,
        help="untimed creates per kind after each set-up is applied",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dry-run", action="store_true", help="server-side dry runs")
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="also this set-up of the project (see VARIANTS), paired with `project` each round",
    )
    parser.add_argument(
        "--kind", action="append", choices=KINDS, help="default: cpu and gpu (repeatable)"
    )
    parser.add_argument("--json", type=Path, help="also write every latency here")
    args = parser.parse_args(argv)
    args.kind = args.kind or ["cpu", "gpu"]
    missing = missing_prerequisite()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    samples = measure(args)
    print(report(samples))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(s)} for s in samples]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
