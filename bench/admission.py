"""Admission load benchmark: the project's webhooks against a static-response baseline.

Both servers run over TLS on CPU 0, one after the other; wrk (Debian package `wrk`) drives them
from CPU 1 with keep-alive connections. Scenarios, each a real AdmissionReview captured from a
kube-apiserver and posted to the path the API server would use:

- `pod`: /mutate/pods with the ~7 KB review of a Deployment-created pod asking for a shared GPU
  (every pod policy has work to do); also measured at a fixed offered rate (default 2,000 req/s).
- `pod-unique`, `pod-indexed`: the same pod with a label of its own on every request (a changed
  value; the Indexed Job index label), so no answer can be reused.
- `secret-opaque`: /validate/secrets with an Opaque Secret (the fast path must cost nothing).
- `secret-gcp`: /validate/secrets with a gcp-credential Secret (a repeated key: the RSA check is
  cached by content hash; `python -m bench.bench_secret_validation` has the uncached cost).

For each: req/s with p50/p99 latency for both servers and the ratio project/static; then the
project server's RSS. Run: `make bench` or `python -m bench.admission [--duration 10]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from certs.issue import ServingSpec, issue_bundle

DATA = Path(__file__).resolve().parent / "data"
SERVER_CPU, LOAD_CPU = "0", "1"


@dataclass(frozen=True)
class Scenario:
    name: str
    path: str
    body: Path
    # Every request a different object (no two pods of one template): how the Lua script
    # rewrites the body's `"app": "embedder"` label, with COUNTER the request's number.
    unique: str = ""


SCENARIOS = (
    Scenario("pod", "/mutate/pods", DATA / "pod-from-deployment.mutating.json"),
    Scenario(
        "pod-unique",
        "/mutate/pods",
        DATA / "pod-from-deployment.mutating.json",
        unique='"app": "embedder-COUNTER"',
    ),
    Scenario(
        "pod-indexed",
        "/mutate/pods",
        DATA / "pod-from-deployment.mutating.json",
        unique='"app": "embedder", "batch.kubernetes.io/job-completion-index": "COUNTER"',
    ),
    Scenario("secret-opaque", "/validate/secrets", DATA / "secret-denied.validating.json"),
    Scenario("secret-gcp", "/validate/secrets", DATA / "secret-gcp-stringdata.validating.json"),
)

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb")
wrk.body = f:read("*a")
f:close()
local delay_ms = {delay_ms}
function delay()
  return delay_ms
end
"""


@dataclass
class Run:
    name: str
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    # The server's CPU time (user + system) per answered request: unlike req/s, blind to time
    # the machine's other tenants take from the server's CPU.
    cpu_us_per_request: float


def scenario_named(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pinned(cpu: str, command: list[str]) -> list[str]:
    taskset = shutil.which("taskset")
    if taskset is None or (os.cpu_count() or 1) < 2:
        return command
    return [taskset, "-c", cpu, *command]


def _check(port: int, ca: Path, scenario: Scenario, timeout: float = 20.0) -> dict:
    """Wait for the server, and return its answer to the scenario's review."""
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while True:
        try:
            request = urllib.request.Request(
                f"https://localhost:{port}{scenario.path}",
                data=scenario.body.read_bytes(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                return json.loads(response.read())["response"]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the server is starting; bounded by the deadline


def _to_ms(value: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", value)
    assert match, value
    return float(match[1]) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match[2]]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _wrk(
    name: str, url: str, script: Path, duration: int, connections: int, server_pid: int
) -> Run:
    command = _pinned(
        LOAD_CPU,
        ["wrk", "--latency", "-t1", f"-c{connections}", f"-d{duration}s", "-s", str(script), url],
    )
    cpu_before = _cpu_seconds(server_pid)
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    cpu = _cpu_seconds(server_pid) - cpu_before

    def find(pattern: str) -> str:
        match = re.search(pattern, output, re.MULTILINE)
        assert match, f"no {pattern!r} in wrk output:\n{output}"
        return match[1]

    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    total_errors = int(errors[1]) if errors else 0
    if socket_errors:
        total_errors += sum(int(g) for g in socket_errors.groups())
    return Run(
        name,
        float(find(r"Requests/sec:\s+([\d.]+)")),
        _to_ms(find(r"^\s+50%\s+(\S+)$")),
        _to_ms(find(r"^\s+99%\s+(\S+)$")),
        total_errors,
        cpu * 1e6 / max(1, int(find(r"(\d+) requests in"))),
    )


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# Each request a pod of its own (a label numbered: `pod-unique` changes a label's value, as any
# workload whose pods differ; `pod-indexed` adds the index label every Indexed Job pod carries):
# nothing one pod's review computed serves the next.
UNIQUE_SCRIPT = """
local counter = 0
function request()
  counter = counter + 1
  local label = string.gsub('{unique}', "COUNTER", tostring(counter))
  local body = string.gsub(wrk.body, '"app": "embedder"', label, 1)
  return wrk.format(nil, nil, nil, body)
end
"""


def _script(directory: Path, scenario: Scenario, delay_ms: float) -> Path:
    path = directory / f"{scenario.name}-{delay_ms:g}.lua"
    script = WRK_SCRIPT.format(body=scenario.body, delay_ms=delay_ms)
    unique = UNIQUE_SCRIPT.replace("{unique}", scenario.unique) if scenario.unique else ""
    path.write_text(script + unique)
    return path


@dataclass(frozen=True)
class Server:
    label: str
    port: int
    process: subprocess.Popen[bytes]

    def url(self, path: str) -> str:
        return f"https://localhost:{self.port}{path}"


@dataclass
class Comparison:
    """One scenario: each server's median run over the rounds, and the median of the rounds'
    ratios (project ÷ static)."""

    static: Run
    project: Run
    ratio: float
    ratios: list[float]
    cpu_ratio: float  # static CPU per request ÷ project CPU per request (median of rounds)


def _median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.requests_per_second)[len(runs) // 2]


def compare(
    servers: tuple[Server, Server],
    ca: Path,
    scenario: Scenario,
    delay_ms: float,
    connections: int,
    args: argparse.Namespace,
    tmp: Path,
) -> Comparison:
    """Alternate the two servers round by round, so drift in the machine's speed (other tenants,
    thermal limits) falls on both alike; each round gives one ratio."""
    script = _script(tmp, scenario, delay_ms)
    for server in servers:
        answer = _check(server.port, ca, scenario)
        assert answer.get("allowed") is not None, answer
        _wrk("warm-up", server.url(scenario.path), script, 2, connections, server.process.pid)
    runs: dict[str, list[Run]] = {server.label: [] for server in servers}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    for _ in range(args.rounds):
        for server in servers:
            runs[server.label].append(
                _wrk(
                    server.label,
                    server.url(scenario.path),
                    script,
                    args.duration,
                    connections,
                    server.process.pid,
                )
            )
        static, project = runs["static"][-1], runs["project"][-1]
        ratios.append(project.requests_per_second / static.requests_per_second)
        cpu_ratios.append(static.cpu_us_per_request / project.cpu_us_per_request)
    return Comparison(
        _median_run(runs["static"]),
        _median_run(runs["project"]),
        statistics.median(ratios),
        ratios,
        statistics.median(cpu_ratios),
    )


def _start(label: str, command: list[str], port: int) -> Server:
    process = subprocess.Popen(_pinned(SERVER_CPU, command), stdout=subprocess.DEVNULL)
    return Server(label, port, process)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=5, help="seconds per run")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per server and scenario, alternating"
    )
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate-connections", type=int, default=40)
    parser.add_argument(
        "--rate", type=int, default=2000, help="offered req/s for pod@rate; 0 skips that run"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=[s.name for s in SCENARIOS],
        help="run only this scenario (repeatable); default: all",
    )
    args = parser.parse_args(argv)
    chosen = set(args.scenario or [s.name for s in SCENARIOS])
    scenarios = [s for s in SCENARIOS if s.name in chosen]
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        bundle = issue_bundle(ServingSpec("bench", "bench", dns=["localhost"], ips=["127.0.0.1"]))
        (tmp / "ca.crt").write_bytes(bundle.ca_cert_pem)
        (tmp / "tls.crt").write_bytes(bundle.cert_pem)
        (tmp / "tls.key").write_bytes(bundle.key_pem)
        ca = tmp / "ca.crt"
        static_port, project_port = _free_port(), _free_port()
        static_command = [sys.executable, "-m", "bench.static_server", "--port", str(static_port)]
        static_command += ["--cert", str(tmp / "tls.crt"), "--key", str(tmp / "tls.key")]
        project_command = [sys.executable, "-m", "bench.project_server"]
        project_command += ["--port", str(project_port), "--cert-dir", str(tmp)]
        # Both servers share CPU 0; only the one under load uses it.
        servers = (
            _start("static", static_command, static_port),
            _start("project", project_command, project_port),
        )
        try:
            results: dict[str, Comparison] = {}
            for scenario in scenarios:
                results[scenario.name] = compare(
                    servers, ca, scenario, 0, args.connections, args, tmp
                )
            if args.rate:
                # Fixed offered rate: each connection waits so that all together offer `rate`.
                delay = 1000.0 * args.rate_connections / args.rate
                results[f"pod@{args.rate}"] = compare(
                    servers, ca, SCENARIOS[0], delay, args.rate_connections, args, tmp
                )
            static_rss, project_rss = (_rss_mib(server.process.pid) for server in servers)
        finally:
            for server in servers:
                server.process.terminate()
                server.process.wait(timeout=30)
    figures: dict[str, object] = {"static_rss_mib": static_rss, "project_rss_mib": project_rss}
    for key, result in results.items():
        base, ours = result.static, result.project
        figures[key] = asdict(result)
        spread = f"{min(result.ratios):.2f}-{max(result.ratios):.2f}"
        print(
            f"{key:16s} static {base.requests_per_second:7.0f} req/s p50 {base.p50_ms:6.2f} "
            f"p99 {base.p99_ms:6.2f} ms | project {ours.requests_per_second:7.0f} req/s "
            f"p50 {ours.p50_ms:6.2f} p99 {ours.p99_ms:6.2f} ms | ratio {result.ratio:4.2f} "
            f"({spread}) | CPU/request {base.cpu_us_per_request:.0f} vs "
            f"{ours.cpu_us_per_request:.0f} us, ratio {result.cpu_ratio:4.2f} "
            f"| errors {base.errors + ours.errors}"
        )
    print(f"RSS: project server {project_rss:.1f} MiB, static server {static_rss:.1f} MiB")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
