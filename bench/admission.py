"""Admission load benchmark: the project's /mutate/pods against a static-response baseline.

Both servers run over TLS on CPU 0, one after the other; wrk (Debian package `wrk`) drives them
from CPU 1 with keep-alive connections, posting a real ~7 KB AdmissionReview of a
Deployment-created pod that asks for a shared GPU (so every pod policy has work to do).

Reports, for each server: max throughput (req/s) with p50/p99 latency, and p50/p99 at a fixed
offered rate (default 2,000 req/s); then the throughput ratio and the project server's RSS.
Run: `make bench` or `python -m bench.admission [--duration 10] [--rate 2000]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from certs.issue import ServingSpec, issue_bundle

ROOT = Path(__file__).resolve().parent.parent
REVIEW = ROOT / "bench" / "data" / "pod-from-deployment.mutating.json"
SERVER_CPU, LOAD_CPU = "0", "1"

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pinned(cpu: str, command: list[str]) -> list[str]:
    taskset = shutil.which("taskset")
    return (
        [taskset, "-c", cpu, *command]
        if taskset and os.cpu_count() and os.cpu_count() > 1
        else command
    )  # type: ignore[list-item]


def _wait_ready(port: int, ca: Path, timeout: float = 20.0) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    body = REVIEW.read_bytes()
    while True:
        try:
            request = urllib.request.Request(
                f"https://localhost:{port}/mutate/pods",
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, context=context, timeout=2) as response:
                json.loads(response.read())
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _to_ms(value: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", value).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _wrk(name: str, port: int, script: Path, duration: int, connections: int) -> Run:
    command = _pinned(
        LOAD_CPU,
        [
            "wrk",
            "--latency",
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "-s",
            str(script),
            f"https://localhost:{port}/mutate/pods",
        ],
    )
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p50 = _to_ms(re.search(r"50%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    p99 = _to_ms(re.search(r"99%\s+(\S+)", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    total_errors = int(errors.group(1)) if errors else 0
    if socket_errors:
        total_errors += sum(int(g) for g in socket_errors.groups())
    return Run(name, rps, p50, p99, total_errors)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _script(directory: Path, name: str, delay_ms: float) -> Path:
    path = directory / f"{name}.lua"
    path.write_text(WRK_SCRIPT.format(body=REVIEW, delay_ms=delay_ms))
    return path


def measure(server_command: list[str], name: str, port: int, ca: Path, args, tmp: Path):
    process = subprocess.Popen(_pinned(SERVER_CPU, server_command), stdout=subprocess.DEVNULL)
    try:
        _wait_ready(port, ca)
        _wrk(f"{name}-warmup", port, _script(tmp, "max", 0), 2, args.connections)
        best = _wrk(name, port, _script(tmp, "max", 0), args.duration, args.connections)
        # Fixed offered rate: each connection waits so that all together offer `rate` req/s.
        delay = 1000.0 * args.rate_connections / args.rate
        paced = _wrk(
            f"{name}@{args.rate}",
            port,
            _script(tmp, "paced", delay),
            args.duration,
            args.rate_connections,
        )
        rss = _rss_mib(process.pid)
        return best, paced, rss
    finally:
        process.terminate()
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--rate-connections", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
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
        static = measure(
            [
                sys.executable,
                "-m",
                "bench.static_server",
                "--port",
                str(static_port),
                "--cert",
                str(tmp / "tls.crt"),
                "--key",
                str(tmp / "tls.key"),
            ],
            "static",
            static_port,
            ca,
            args,
            tmp,
        )
        project = measure(
            [
                sys.executable,
                "-m",
                "bench.project_server",
                "--port",
                str(project_port),
                "--cert-dir",
                str(tmp),
            ],
            "project",
            project_port,
            ca,
            args,
            tmp,
        )
    figures = {
        "static": {"max": asdict(static[0]), "paced": asdict(static[1]), "rss_mib": static[2]},
        "project": {"max": asdict(project[0]), "paced": asdict(project[1]), "rss_mib": project[2]},
        "throughput_ratio": project[0].requests_per_second / static[0].requests_per_second,
    }
    for label, (best, paced, rss) in (("static", static), ("project", project)):
        print(
            f"{label:8s} max {best.requests_per_second:8.0f} req/s  p50 {best.p50_ms:6.2f} ms  "
            f"p99 {best.p99_ms:6.2f} ms | at {args.rate} req/s: "
            f"{paced.requests_per_second:6.0f} req/s p50 {paced.p50_ms:5.2f} ms "
            f"p99 {paced.p99_ms:5.2f} ms | RSS {rss:5.1f} MiB | errors {best.errors + paced.errors}"
        )
    print(f"throughput ratio project/static: {figures['throughput_ratio']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
