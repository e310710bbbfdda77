"""Pod creates under load through a real kube-apiserver: many clients at once, not one at a time.

    python -m bench.pod_load [--clients 16] [--seconds 60] [--rounds 3] [--kind gpu]
                             [--setup NAME] [--variant NAME] [--profile DIR]
                             [--sweep 16,32,64,128,256] [--sweep-seconds 20] [--store]
                             [--json FILE]

Needs KUBEBUILDER_ASSETS (the real control plane) and Go (`apt-get install golang-go`): the load
client (bench/go_load, standard library only) and the Go webhook pair (bench/go_peer) are built
into a temporary directory. The admission set-ups are `bench.pod_create`'s, applied in turn on one
API server in a rotated order each round:

- `none`: no admission of the project's or the pair's;
- `go`: the Go webhook pair, spoken to in HTTP/1.1 as kube-apiserver speaks to a Service webhook;
- `go-h2`: the same pair offering HTTP/2, which kube-apiserver takes with a loopback URL only
  (`bench.pod_create`): what HTTP/2 could gain, a line of its own;
- `project`: the base manifests' admission policies and webhook configurations, calling one
  replica of the project's service;
- `project-2`: the same, calling two replicas: two service processes sharing one port
  (SO_REUSEPORT), so the kernel spreads the API server's connections over them, as kube-proxy
  spreads a Service's.

`--setup` picks some of these (default: all); `--variant` adds the project otherwise set up
(`bench.pod_create`'s VARIANTS: other admission objects calling the one replica, or a replica of
its own run with other arguments), paired with `project` round by round.

For each set-up and `--kind` (`gpu`: `nvidia.com/gpu: 1`, a pod the project's routing sends to its
webhook; `shared`: `nvidia.com/gpu.shared: 1`, which the pods policy judges too; `cpu`: a CPU-only
pod, which meets only the admission policies), `--clients` clients
create pods back to back for `--seconds`, each over a connection of its own, after a short untimed
warm-up. Figures per run: creates per second, latency percentiles, CPU per created pod of the API
server and of the webhook server(s) (from /proc), and the API server's own time per webhook call
(`apiserver_admission_webhook_admission_duration_seconds`). The creates are server-side dry runs
(`?dryRun=All`: every admission step, no write to etcd), so each set-up meets the same store and
a run of tens of thousands of pods leaves nothing to delete; `--store` writes them, and deletes
them after each run. `--profile DIR` also takes the API server's own CPU profile over each run
(Go's pprof, which kube-apiserver serves while `--profiling` is on, its default), for
`go tool pprof -top -cum DIR/project-gpu-16-0.pprof`, and runs the one-replica service under
cProfile over the whole benchmark (DIR/service.prof, for `python -m pstats`).

Then the sweep: for each set-up, `--sweep` client counts in turn, `--sweep-seconds` each, until
the p99 passes `--p99-limit-ms` (100): the load where each set-up stops answering in time.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.admission import Server, _cpu_seconds, _free_port
from bench.admission_tail import build_go
from bench.pod_create import (
    KINDS,
    NAMESPACE,
    VARIANTS,
    Api,
    answered_as,
    apiserver_webhook_ms,
    apply,
    go_objects,
    go_peers,
    missing_prerequisite,
    pod,
    remove,
    serving_certificates,
    setup_objects,
    spread,
    start_go_peers,
    wait_until,
)
from bench.server_side import GoPeerConnections, apiserver_snapshot, figures

ROOT = Path(__file__).resolve().parent.parent
GO_LOAD = Path(__file__).resolve().parent / "go_load" / "main.go"
SETUPS = ("none", "go", "go-h2", "project", "project-2")
WARM_UP_SECONDS = 5.0
DELETE_SECONDS = 600.0
SWEEP = (16, 32, 64, 128, 256)


@dataclass
class Load:
    """One run: `clients` creating `kind` pods through `setup` for a while."""

    setup: str
    kind: str
    round: int
    clients: int
    created: int
    failed: int
    per_second: float
    latency_ms: dict[str, float]
    # CPU milliseconds per created pod: "apiserver", "etcd", "webhook" (the webhook servers)
    # and "client" (the load client).
    cpu_ms: dict[str, float] = field(default_factory=dict)
    # The API server's own figures over the run (bench.server_side.figures).
    server: dict[str, float] = field(default_factory=dict)
    first_failure: str = ""

    @property
    def p99(self) -> float:
        return self.latency_ms["p99"]


@dataclass
class Running:
    load_client: Path
    go_ports: dict[str, int]  # "go", "go-h2"
    peers: dict[str, GoPeerConnections]  # the same, to tell which one answers
    project_ports: dict[str, int]  # set-up -> the port its webhook configurations call
    ca: str  # base64, as caBundle takes it
    pids: dict[str, list[int]]  # set-up -> its webhook servers' processes


@contextmanager
def servers(
    tmp: Path, profile: Path | None = None, variants: Sequence[str] = ()
) -> Iterator[Running]:
    """The Go pair, one project replica on a port of its own and two sharing another, and one
    for each variant run with other arguments; none pinned to a core (two replicas are there to
    use two)."""
    bundle = serving_certificates(tmp)
    load_client = build_go(GO_LOAD, tmp)
    go_ports, started = start_go_peers(tmp, _start)
    one, two = _free_port(), _free_port()
    project = [sys.executable, "-m", "bench.project_server", "--cert-dir", str(tmp)]
    profiled = []
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        profiled = ["--profile", str(profile / "service.prof")]
    started.append(_start("project", [*project, "--port", str(one), *profiled], one))
    for _ in range(2):
        started.append(_start("project-2", [*project, "--port", str(two), "--reuse-port"], two))
    ports = {"project": one, "project-2": two}
    for variant in variants:
        if VARIANTS[variant].server_args:
            ports[variant] = _free_port()
            command = [*project, "--port", str(ports[variant]), *VARIANTS[variant].server_args]
            started.append(_start(variant, command, ports[variant]))
    pids: dict[str, list[int]] = {"none": []}
    for server in started:
        pids.setdefault(server.label, []).append(server.process.pid)
    try:
        yield Running(
            load_client,
            go_ports,
            go_peers(go_ports, str(tmp / "ca.crt")),
            ports,
            base64.b64encode(bundle.ca_bundle_pem).decode(),
            pids,
        )
    finally:
        for server in started:
            server.process.terminate()
            server.process.wait(timeout=30)


class Bench:
    def __init__(
        self,
        plane: Any,
        running: Running,
        tmp: Path,
        token: str,
        store: bool,
        profile: Path | None = None,
    ) -> None:
        self.plane, self.running, self.tmp, self.token = plane, running, tmp, token
        self.store, self.profile = store, profile
        self.api = Api(plane.url, token, plane.ca_path)

    def objects(self, setup: str) -> list[dict[str, Any]]:
        if setup == "none":
            return []
        if setup in self.running.go_ports:
            return go_objects(self.running.go_ports[setup], self.running.ca)
        # A variant's other admission objects call the one replica.
        port = self.running.project_ports.get(setup, self.running.project_ports["project"])
        return setup_objects(setup, port, self.running.ca)

    @contextmanager
    def applied(self, setup: str) -> Iterator[None]:
        objects = self.objects(setup)
        apply(self.api, objects)
        try:
            wait_until(
                lambda: answered_as(self.api, setup, self.running.peers), f"{setup} to be applied"
            )
            yield
        finally:
            remove(self.api, objects)

    def load(self, kind: str, clients: int, seconds: float) -> tuple[dict[str, Any], float]:
        """The load client's answer, and the CPU seconds it took itself."""
        body = self.tmp / f"{kind}.json"
        body.write_text(json.dumps(pod(kind)))
        command = [str(self.running.load_client), "-url", f"{self.plane.url}/api/v1/namespaces/"]
        command[-1] += f"{NAMESPACE}/pods" + ("" if self.store else "?dryRun=All")
        command += ["-token", self.token, "-ca", str(self.plane.ca_path), "-body", str(body)]
        command += ["-clients", str(clients), "-seconds", str(seconds)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return json.loads(done.stdout), cpu

    def run(self, setup: str, kind: str, round_: int, clients: int, seconds: float) -> Load:
        """Warm up, then the timed run, then delete what it made."""
        self.load(kind, min(clients, 16), WARM_UP_SECONDS)
        processes = {
            "apiserver": [self.plane.apiserver.pid],
            "etcd": [p.pid for p in self.plane.processes if Path(str(p.args[0])).name == "etcd"],
            # A variant without a replica of its own calls the one project replica; `none`, no one.
            "webhook": self.running.pids.get(setup, self.running.pids["project"]),
        }
        cpu_before = {k: sum(_cpu_seconds(p) for p in pids) for k, pids in processes.items()}
        before = apiserver_snapshot(self.api.text("/metrics"))
        with self.profiled(f"{setup}-{kind}-{clients}-{round_}", seconds):
            answer, client_cpu = self.load(kind, clients, seconds)
        after = apiserver_snapshot(self.api.text("/metrics"))
        created = max(1, answer["created"])
        cpu = {
            k: 1000.0 * (sum(_cpu_seconds(p) for p in pids) - cpu_before[k]) / created
            for k, pids in processes.items()
            if pids
        }
        cpu["client"] = 1000.0 * client_cpu / created
        if self.store:
            self.delete_pods()
        return Load(
            setup,
            kind,
            round_,
            clients,
            answer["created"],
            answer["failed"],
            answer["per_second"],
            answer["latency_ms"],
            cpu,
            figures(before, after, created),
            answer.get("first_failure", ""),
        )

    @contextmanager
    def profiled(self, name: str, seconds: float) -> Iterator[None]:
        """With --profile: the API server's own CPU profile (Go's pprof, served at
        /debug/pprof/profile while --profiling is on, its default) over most of the run, written
        as DIR/NAME.pprof for `go tool pprof -top`."""
        if self.profile is None:
            yield
            return
        span = max(1, int(seconds) - 2)
        path = f"/debug/pprof/profile?seconds={span}"
        api = Api(self.plane.url, self.token, self.plane.ca_path)  # a connection of its own
        with ThreadPoolExecutor(1) as pool:
            taken = pool.submit(api.raw, path)
            yield
            self.profile.mkdir(parents=True, exist_ok=True)
            (self.profile / f"{name}.pprof").write_bytes(taken.result())

    def delete_pods(self) -> None:
        """Delete the run's pods (none was given a node, so each goes at once); a collection of
        tens of thousands outlasts the API server's request timeout, which then drops the
        connection while the deletion goes on: wait on a fresh one until the list is empty."""
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        with suppress(http.client.HTTPException, OSError):
            self.api.call("DELETE", path)
        self.api = Api(self.plane.url, self.token, self.plane.ca_path)
        deadline = time.monotonic() + DELETE_SECONDS
        while self.api.call("GET", f"{path}?limit=1")[1]["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pods of {NAMESPACE} were not deleted in time")
            time.sleep(1.0)  # polling a condition, bounded by the deadline


def _start(label: str, command: list[str], port: int) -> Server:
    return Server(label, port, subprocess.Popen(command, stdout=subprocess.DEVNULL))


def measure(args: argparse.Namespace) -> tuple[list[Load], list[Load]]:
    sys.path.insert(0, str(ROOT))
    from tests.world import control_plane  # the real control plane, started as the tests do

    plane = control_plane.start(controller_manager=True)  # it makes the default ServiceAccount
    loads: list[Load] = []
    sweep: list[Load] = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmpdir,
            servers(Path(tmpdir), args.profile, args.variant or ()) as running,
        ):
            token = control_plane.ADMIN_TOKEN
            bench = Bench(plane, running, Path(tmpdir), token, args.store, args.profile)
            status, answer = bench.api.call(
                "POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}
            )
            assert status == 201, answer
            wait_until(lambda: bench.api.create_pod(pod("cpu"), True)[0] == 201, "the namespace")
            setups = [*(args.setup or SETUPS), *(args.variant or [])]
            for index in range(args.rounds):
                order = setups[index % len(setups) :] + setups[: index % len(setups)]
                for setup in order:
                    with bench.applied(setup):
                        for kind in args.kind:
                            loads.append(bench.run(setup, kind, index, args.clients, args.seconds))
                _progress(f"round {index + 1}/{args.rounds} done")
            for setup in (args.setup or SETUPS) if args.sweep else ():
                with bench.applied(setup):
                    for clients in args.sweep:
                        step = bench.run(setup, "gpu", 0, clients, args.sweep_seconds)
                        sweep.append(step)
                        _progress(f"sweep {setup} {clients} clients: p99 {step.p99:.1f} ms")
                        if step.p99 > args.p99_limit_ms:
                            break
    finally:
        plane.stop()
    return loads, sweep


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def report(loads: list[Load]) -> list[str]:
    """Each set-up's figures, median (min - max) over rounds, and the ratios taken within each
    round: project/go and project-2/project."""
    if not loads:
        return []
    by = {(x.setup, x.kind, x.round): x for x in loads}
    rounds = sorted({x.round for x in loads})
    clients = loads[0].clients
    lines = [f"{clients} clients at once: median (min - max) over {len(rounds)} rounds"]
    setups = [*SETUPS, *sorted({x.setup for x in loads} - set(SETUPS))]
    for kind in sorted({x.kind for x in loads}):
        for setup in setups:
            runs = [by[(setup, kind, r)] for r in rounds if (setup, kind, r) in by]
            if not runs:
                continue
            line = (
                f"{kind} {setup:9s} creates/s {spread([x.per_second for x in runs], 0)}  "
                f"p50 {spread([x.latency_ms['p50'] for x in runs], 1)} ms  "
                f"p99 {spread([x.p99 for x in runs], 1)} ms  "
                f"CPU ms/pod: API server {spread([x.cpu_ms['apiserver'] for x in runs])}  "
                f"etcd {spread([x.cpu_ms.get('etcd', 0.0) for x in runs])}  "
                f"client {spread([x.cpu_ms.get('client', 0.0) for x in runs])}"
            )
            if setup != "none":
                webhook_ms = [apiserver_webhook_ms(x.server) for x in runs]
                line += (
                    f"  webhook server(s) {spread([x.cpu_ms['webhook'] for x in runs])}"
                    f"  API server's webhook time {spread(webhook_ms)} ms"
                )
            failed = sum(x.failed for x in runs)
            if failed:
                line += f"  failed {failed}: {next(x.first_failure for x in runs if x.failed)}"
            lines.append(line)
        # go-h2: what HTTP/2 would gain, a line of its own, never the baseline.
        pairs = [("project", "go"), ("project-2", "go"), ("project-2", "project")]
        pairs += [("go-h2", "go"), ("project", "go-h2")]
        pairs += [(v, "project") for v in setups if v in VARIANTS]
        for mine, other in pairs:
            both = [(by.get((mine, kind, r)), by.get((other, kind, r))) for r in rounds]
            present = [(a, b) for a, b in both if a and b]
            if not present:
                continue
            lines.append(
                f"{kind} {mine}/{other}  creates/s ratio "
                f"{spread([a.per_second / b.per_second for a, b in present])}  p99 ratio "
                f"{spread([a.p99 / b.p99 for a, b in present])}  API server CPU/pod ratio "
                f"{spread([a.cpu_ms['apiserver'] / b.cpu_ms['apiserver'] for a, b in present])}"
            )
    return lines


def crossings(sweep: list[Load], limit_ms: float) -> list[str]:
    """Per set-up: the steps of the sweep, and the first client count whose p99 passed the
    limit (or that none did)."""
    lines = ["", f"clients until the p99 passes {limit_ms:g} ms (GPU pods)"]
    for setup in SETUPS:
        steps = sorted((x for x in sweep if x.setup == setup), key=lambda x: x.clients)
        if not steps:
            continue
        shown = "  ".join(f"{x.clients}: {x.per_second:.0f}/s p99 {x.p99:.1f}" for x in steps)
        passed = next((x for x in steps if x.p99 > limit_ms), None)
        verdict = (
            f"passed at {passed.clients} clients"
            if passed
            else f"not passed up to {steps[-1].clients} clients"
        )
        lines.append(f"{setup:9s} {verdict}   ({shown})")
    return lines


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_load", description=__doc__)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0, help="per set-up, kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", action="append", choices=KINDS, help="default: gpu (repeatable)")
    parser.add_argument(
        "--sweep",
        type=_counts,
        default=list(SWEEP),
        help="client counts for the sweep, comma-separated; empty skips it",
    )
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    parser.add_argument("--p99-limit-ms", type=float, default=100.0)
    parser.add_argument(
        "--store",
        action="store_true",
        help="store the pods (deleted after each run); default: server-side dry runs, admission "
        "without etcd",
    )
    parser.add_argument(
        "--setup", action="append", choices=SETUPS, help="default: every one (repeatable)"
    )
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="also the project with these admission objects (bench.pod_create's VARIANTS), "
        "paired with `project` each round",
    )
    parser.add_argument("--json", type=Path, help="also write every run here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="write the API server's CPU profile of each run into this folder (go tool pprof)",
    )
    args = parser.parse_args(argv)
    args.kind = args.kind or ["gpu"]
    missing = missing_prerequisite()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    started = time.monotonic()
    loads, sweep = measure(args)
    print(f"machine: {os.cpu_count()} cores; took {time.monotonic() - started:.0f} s")
    print("\n".join(report(loads) + crossings(sweep, args.p99_limit_ms)))
    if args.json:
        args.json.write_text(json.dumps([asdict(x) for x in loads + sweep]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
