"""Tail latency at a fixed rate of all-different pods: the project's webhook against a Go peer.

`python -m bench.admission_tail [--rate 200] [--duration 60] [--rounds 3]`. Needs `wrk` and a Go
toolchain (`apt-get install wrk golang-go`): the Go peer (`bench/go_peer/main.go`, standard
library only) is built into a temporary directory. Both servers run over TLS on CPU 0, wrk on
CPU 1; every request is a pod with a label of its own (`pod-unique` of `bench.admission`, or
`--scenario pod-indexed`), so the project's memo never answers. The two are measured in
alternation, round after round, at the same offered rate (each of `--connections` connections
waits so that together they offer `--rate`); each round gives one p99 ratio, project ÷ Go.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.admission import (
    Run,
    Server,
    _check,
    _free_port,
    _script,
    _start,
    _wrk,
    scenario_named,
)
from certs.issue import ServingSpec, issue_bundle

GO_PEER = Path(__file__).resolve().parent / "go_peer" / "main.go"


@dataclass
class Tail:
    project: list[Run]
    go: list[Run]

    @property
    def ratios(self) -> list[float]:
        """p99 project ÷ p99 Go, one per round."""
        return [p.p99_ms / g.p99_ms for p, g in zip(self.project, self.go, strict=True)]


def build_go(source: Path, out: Path) -> Path:
    """A module-less single-file build into `out`, named after its folder, its cache there."""
    binary = out / source.parent.name
    env = {**os.environ, "GO111MODULE": "off", "GOCACHE": str(out / "go-cache")}
    subprocess.run(["go", "build", "-o", str(binary), str(source)], check=True, env=env)
    return binary


def build_go_peer(out: Path) -> Path:
    return build_go(GO_PEER, out)


def measure(servers: tuple[Server, Server], ca: Path, args: argparse.Namespace, tmp: Path) -> Tail:
    scenario = scenario_named(args.scenario)
    delay_ms = 1000.0 * args.connections / args.rate
    script = _script(tmp, scenario, delay_ms)
    for server in servers:
        assert _check(server.port, ca, scenario).get("allowed") is True
        _wrk("warm-up", server.url(scenario.path), script, 3, args.connections, server.process.pid)
    runs: dict[str, list[Run]] = {server.label: [] for server in servers}
    for _ in range(args.rounds):
        for server in servers:
            runs[server.label].append(
                _wrk(
                    server.label,
                    server.url(scenario.path),
                    script,
                    args.duration,
                    args.connections,
                    server.process.pid,
                )
            )
    return Tail(runs["project"], runs["go"])


def report(tail: Tail, rate: int) -> str:
    lines = []
    for label, runs in (("project", tail.project), ("go", tail.go)):
        p99s = ", ".join(f"{r.p99_ms:.2f}" for r in runs)
        rates = ", ".join(f"{r.requests_per_second:.0f}" for r in runs)
        cpu = statistics.median(r.cpu_us_per_request for r in runs)
        lines.append(
            f"{label:8s} p50 {statistics.median(r.p50_ms for r in runs):5.2f} ms | p99 per round "
            f"{p99s} ms | req/s {rates} | CPU/request {cpu:.0f} us | errors "
            f"{sum(r.errors for r in runs)}"
        )
    ratios = tail.ratios
    lines.append(
        f"p99 ratio project/go at {rate} req/s: {statistics.median(ratios):.2f} "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=200, help="offered reviews per second")
    parser.add_argument("--duration", type=int, default=60, help="seconds per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument(
        "--scenario",
        choices=("pod-unique", "pod-indexed"),
        default="pod-unique",
        help="the all-different pods: a label value of their own, or Indexed Job pods",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    for tool, package in (("wrk", "wrk"), ("go", "golang-go")):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: apt-get install {package}", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        bundle = issue_bundle(ServingSpec("bench", "bench", dns=["localhost"], ips=["127.0.0.1"]))
        (tmp / "ca.crt").write_bytes(bundle.ca_cert_pem)
        (tmp / "tls.crt").write_bytes(bundle.cert_pem)
        (tmp / "tls.key").write_bytes(bundle.key_pem)
        peer = build_go_peer(tmp)
        project_port, go_port = _free_port(), _free_port()
        project_command = [sys.executable, "-m", "bench.project_server"]
        project_command += ["--port", str(project_port), "--cert-dir", str(tmp)]
        go_command = [str(peer), "-addr", f"127.0.0.1:{go_port}"]
        go_command += ["-cert", str(tmp / "tls.crt"), "-key", str(tmp / "tls.key")]
        servers = (
            _start("project", project_command, project_port),
            _start("go", go_command, go_port),
        )
        try:
            tail = measure(servers, tmp / "ca.crt", args, tmp)
        finally:
            for server in servers:
                server.process.terminate()
                server.process.wait(timeout=30)
    print(report(tail, args.rate))
    if args.json:
        figures = {"rate": args.rate, "ratios": tail.ratios, **asdict(tail)}
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
