"""Admission latency while the dataset controller works: does a controller burst slow the
webhooks down?

Against the real kube-apiserver and etcd (KUBEBUILDER_ASSETS; seeded with
examples/cluster-state.yaml, behind the tests' fault proxy, as bench/controller.py starts them),
the webhook server answers `/mutate/pods` (the Deployment pod asking for a shared GPU, bench/data)
at a fixed offered rate, in alternate windows with the cluster idle and while 1,000 dataset PVCs
are written and the controller creates a loader Job for each (max_concurrent_loads raised so that
every PVC gets its Job: the heaviest case). The figure is the p99 of every request in a burst
window over that of every request in an idle window, pooled per run and over all runs: a single
window's p99 is decided by a few stalls of the host.

Layouts (`--layout`, repeatable; default `same-process` and `separate`, run in turn):
- `same-process`: the webhooks and the controller in one interpreter, as `serve` ran them before
  the controller became a process of its own (built here from AdmissionServer with the
  DatasetController as a background service).
- `separate`: `gpu-admission serve` and `gpu-admission controller` as two processes, each on a
  CPU of its own, as two Deployments with their own CPU requests run.
- `separate-shared-cpu`: the two processes on one CPU: what the split buys without more CPU.
- `no-controller`: `serve` alone; the burst reaches it only through its own informers.

The webhook server runs on CPU 0; the API server, the PVC writers, the load generator and (in
`separate`) the controller on CPU 1. The load generator is open-loop (requests go out on a fixed
schedule, latency counts from the scheduled time, so a stall is not hidden by requests that were
never sent), warms its connections before each window, and runs at a real-time priority where
allowed. Each run starts fresh processes, waits for the controller to lead, then does `--rounds`
idle/burst pairs, each idle window once the API requests of the last burst have stopped. Needs
no wrk.

Run: `python -m bench.isolation [--runs 3] [--rate 500] [--duration 10]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.controller import (
    NS,
    Child,
    JobWatch,
    child,
    cpu_seconds,
    pinned,
    settled_counts,
    write_burst,
)
from bench.controller_figures import percentile

ROOT = Path(__file__).resolve().parent.parent
REVIEW = ROOT / "bench/data/pod-from-deployment.mutating.json"
STATE = ROOT / "examples/cluster-state.yaml"
PREFIX = "gpu-admission.io/"
WEBHOOK_CPU, OTHER_CPU = "0", "1"
LOAD_CPU = "1"
LAYOUTS = ("same-process", "separate", "separate-shared-cpu", "no-controller")
DEFAULT_LAYOUTS = LAYOUTS[:2]
START_TIMEOUT = 60.0
WARMUP_SECONDS = 2.0
MEASURING = "measuring"  # the generator's word that its measured window opens


# -- child: the open-loop load generator ------------------------------------------------------


async def generate(
    url: str, ca: str, body: bytes, rate: float, duration: float, warmup: float = WARMUP_SECONDS
) -> dict[str, Any]:
    """POST `body` `rate` times a second on a fixed schedule: `warmup` seconds unmeasured (the
    connection pool grows to what the rate needs: each new connection is a TLS handshake), then
    `duration` seconds measured. Latencies count from each request's scheduled time."""
    import aiohttp

    context = ssl.create_default_context(cafile=ca)
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    lags: list[float] = []  # how late the generator itself sent: it must stay small
    errors = 0
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=512)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(at: float, measured: bool) -> None:
            nonlocal errors
            if measured:
                lags.append(loop.time() - at)
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, OSError):
                ok = False
            if measured and ok:
                latencies.append(loop.time() - at)
            elif measured:
                errors += 1

        unmeasured, count = int(rate * warmup), int(rate * duration)
        start = loop.time() + 0.05
        tasks = []
        for i in range(unmeasured + count):
            at = start + i / rate
            if (delay := at - loop.time()) > 0:
                await asyncio.sleep(delay)
            if i == unmeasured:
                print(MEASURING, flush=True)
            tasks.append(asyncio.create_task(one(at, i >= unmeasured)))
        await asyncio.gather(*tasks)
    millis = [1000 * v for v in latencies]
    return {
        "requests": count,
        "errors": errors,
        "p50_ms": percentile(millis, 0.50) if millis else None,
        "p99_ms": percentile(millis, 0.99) if millis else None,
        "max_ms": max(millis) if millis else None,
        "send_lag_p99_ms": percentile([1000 * v for v in lags], 0.99) if lags else None,
        "latencies_ms": [round(v, 3) for v in millis],  # pooled over windows by the parent
    }


def run_load(args: argparse.Namespace) -> int:
    figures = asyncio.run(
        generate(args.url, args.ca, Path(args.body).read_bytes(), args.rate, args.duration)
    )
    print(json.dumps(figures))
    return 0


def load_command(url: str, ca: Path, rate: float, duration: float) -> list[str]:
    command = [sys.executable, "-m", "bench.isolation", "child-load", "--url", url]
    command += ["--ca", str(ca), "--body", str(REVIEW), "--rate", str(rate)]
    command += ["--duration", str(duration)]
    if os.geteuid() == 0 and shutil.which("chrt"):
        # A real-time priority: the busy CPU 1 must not delay the measuring itself. (It sleeps
        # between sends and uses a small part of the CPU, so it cannot starve the rest.)
        command = ["chrt", "--fifo", "10", *command]
    return pinned(LOAD_CPU, command)


# -- child: the webhooks and the controller in one interpreter --------------------------------


async def same_process(config_overrides: dict[str, Any]) -> None:
    from commands.serve import AdmissionServer, cluster_client
    from controllers.dataset import DatasetController
    from gpu_admission.config.model import load_config
    from gpu_admission.process.metrics import Metrics

    config = load_config(overrides=config_overrides)
    api = cluster_client(config)
    assert api is not None
    metrics = Metrics()
    controller = DatasetController(api, config, metrics)
    server = AdmissionServer(config, api, metrics=metrics, extra_services=[controller])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await server.start()
    await stop.wait()
    await server.stop()
    api.close()


def run_same_process(args: argparse.Namespace) -> int:
    from gpu_admission.process.logging_setup import setup_logging

    setup_logging("warning", "text")
    overrides = {
        "kubeconfig": args.kubeconfig,
        "certs": {"cert_dir": args.cert_dir},
        "server": {"host": "127.0.0.1", "port": args.port, "metrics_port": args.metrics_port},
    }
    asyncio.run(same_process(overrides))
    return 0


# -- parent -----------------------------------------------------------------------------------


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_ADMISSION_")}
    env.update(
        {
            # Every PVC of the burst gets its Job at once: the most work for the controller.
            "GPU_ADMISSION_DATASET__MAX_CONCURRENT_LOADS": "5000",
            # No webhook configurations are installed: nothing to patch a CA bundle into.
            "GPU_ADMISSION_CERTS__MANAGE_CA_BUNDLE": "false",
            "GPU_ADMISSION_CERTS__EXTRA_DNS": "[localhost]",  # the name the benchmark calls
            "GPU_ADMISSION_SERVER__LOG_LEVEL": "warning",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Processes:
    webhook_port: int
    metrics_port: int
    ca: Path
    started: list[subprocess.Popen[bytes]]


def server_buckets(metrics_port: int) -> dict[float, float]:
    """The webhook's own /mutate/pods latency histogram: upper bound -> cumulative count."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("gpu_admission_admission_duration_seconds_bucket{") and (
            'webhook="/mutate/pods"' in line
        ):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(bound)] = float(line.rsplit(" ", 1)[1])
    return buckets


def server_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The histogram bucket bound under which 99% of the requests in between were answered,
    as the server timed them (from the handler's start: no queueing, no TLS)."""
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = counts[float("inf")]
    for bound, count in counts.items():
        if count >= 0.99 * total:
            return 1000 * bound
    return float("inf")


def wait_until(check: Any, what: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last: object = "not yet"
    while True:
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(map(str, process.args))} exited while {what}")
        try:
            if check():
                return
        except (OSError, ssl.SSLError, urllib.error.URLError) as exc:
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out while {what} (last: {last})")
        time.sleep(0.2)  # polling a condition, bounded by the deadline


def leading(metrics_port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as r:
        return "\ngpu_admission_leader 1.0" in r.read().decode()


def ready(url: str, context: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, context=context, timeout=2) as response:
        return bool(response.status == 200)


@contextlib.contextmanager
def start_layout(layout: str, kubeconfig: str, tmp: Path) -> Iterator[Processes]:
    """The webhook server (and the controller) for `layout`, ready to answer."""
    cert_dir = tmp / f"certs-{layout}"
    port, metrics_port, controller_port = free_port(), free_port(), free_port()
    env = environment()
    common = ["--kubeconfig", kubeconfig]
    serve_flags = [*common, "--cert-dir", str(cert_dir), "--host", "127.0.0.1"]
    serve_flags += ["--port", str(port), "--metrics-port", str(metrics_port)]
    commands: list[list[str]] = []
    if layout == "same-process":
        child_args = ["child-same-process", *serve_flags]
        commands.append(pinned(WEBHOOK_CPU, [sys.executable, "-m", "bench.isolation", *child_args]))
    else:
        controller_cpu = OTHER_CPU if layout == "separate" else WEBHOOK_CPU
        serve = [sys.executable, "-m", "commands", "serve", *serve_flags]
        controller = [sys.executable, "-m", "commands", "controller", *common]
        controller += ["--metrics-port", str(controller_port)]
        commands.append(pinned(WEBHOOK_CPU, serve))
        if layout != "no-controller":
            commands.append(pinned(controller_cpu, controller))
    started = [subprocess.Popen(c, env=env, cwd=ROOT, stdout=subprocess.DEVNULL) for c in commands]
    try:
        wait_until(lambda: (cert_dir / "ca.crt").exists(), "issuing certificates", started)
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        wait_until(
            lambda: ready(f"https://localhost:{port}/readyz", context), "starting serve", started
        )
        if layout != "no-controller":
            # Leading, its caches listed and its heap frozen: start-up is over.
            leader = metrics_port if layout == "same-process" else controller_port
            wait_until(lambda: leading(leader), "the controller takes the Lease", started)
        yield Processes(port, metrics_port, cert_dir / "ca.crt", started)
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def measure(
    processes: Processes,
    rate: float,
    duration: float,
    on_measuring: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The load generator's figures, and the share of a CPU the webhook process used, over the
    measured window; `on_measuring` runs as that window opens (after the generator's warm-up)."""
    url = f"https://localhost:{processes.webhook_port}/mutate/pods"
    webhook = processes.started[0].pid
    generator = subprocess.Popen(
        load_command(url, processes.ca, rate, duration),
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert generator.stdout is not None
    opened = generator.stdout.readline()
    if opened.strip() != MEASURING:
        raise RuntimeError(f"the load generator failed: {opened!r}")
    cpu, wall = cpu_seconds(webhook), time.monotonic()
    buckets = server_buckets(processes.metrics_port)
    on_measuring()
    output = generator.stdout.read()
    if generator.wait() != 0:
        raise RuntimeError(f"the load generator exited with {generator.returncode}")
    busy = (cpu_seconds(webhook) - cpu) / (time.monotonic() - wall)
    server_p99 = server_p99_ms(buckets, server_buckets(processes.metrics_port))
    figures = json.loads(output.strip().splitlines()[-1])
    return {**figures, "webhook_cpu": busy, "server_p99_ms_at_most": server_p99}


def one_round(
    processes: Processes,
    apiserver: Child,
    kubeconfig: str,
    namespace: str,
    layout: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """An idle window, then a window during which a burst of dataset PVCs is written into
    `namespace` (a fresh one each round) and the controller creates their Jobs."""
    from kubernetes import client

    with contextlib.closing(_client(kubeconfig)) as api:
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
    settled_counts(apiserver)  # idle means idle: the last round's writes and Events are done
    idle = measure(processes, args.rate, args.duration)
    watch = JobWatch(kubeconfig, namespace, args.pvcs)
    results: dict[str, Any] = {}

    def burst() -> None:
        _, start, end = write_burst(kubeconfig, namespace, args.pvcs, args.threads, True, PREFIX)
        if layout != "no-controller":
            watch.done.wait(args.timeout)
        results["jobs_seen"] = len(watch.seen)
        if watch.seen:
            results["last_job_after_burst_s"] = max(watch.seen.values()) - end
            results["burst_write_s"] = end - start

    writer = threading.Thread(target=burst)
    during = measure(processes, args.rate, args.duration, writer.start)
    writer.join()
    watch.close()
    return {"idle": idle, "burst": during, **results}


def _client(kubeconfig: str) -> Any:
    from kubernetes import config

    return config.new_client_from_config(kubeconfig)


def one_run(layout: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """A fresh API server and processes; `--rounds` idle/burst pairs, alternating, so that drift in
    the machine's speed falls on both windows alike."""
    apiserver_argv = ["child-cluster", "--prefix", PREFIX, "--state", str(STATE)]
    with tempfile.TemporaryDirectory() as tmpdir, child(apiserver_argv, OTHER_CPU) as apiserver:
        kubeconfig = apiserver.message()["kubeconfig"]
        with start_layout(layout, kubeconfig, Path(tmpdir)) as processes:
            return [
                one_round(processes, apiserver, kubeconfig, f"{NS}-{i}", layout, args)
                for i in range(args.rounds)
            ]


def pooled_p99(rounds: list[dict[str, Any]], window: str) -> float:
    return percentile([v for r in rounds for v in r[window]["latencies_ms"]], 0.99)


def print_runs(layout: str, runs: list[list[dict[str, Any]]]) -> None:
    """Each window, then the p99 of every idle and every burst request pooled, per run and over
    all runs: a few host stalls decide a single window's p99, pooling many windows does not."""
    for r in (r for run in runs for r in run):
        idle, burst = r["idle"], r["burst"]
        print(
            f"{layout:20s} idle p50 {idle['p50_ms']:6.2f} p99 {idle['p99_ms']:7.2f} ms | "
            f"burst p50 {burst['p50_ms']:6.2f} p99 {burst['p99_ms']:7.2f} "
            f"max {burst['max_ms']:7.1f} ms | webhook CPU "
            f"{idle['webhook_cpu']:.0%} -> {burst['webhook_cpu']:.0%} | server p99 <= "
            f"{burst['server_p99_ms_at_most']:g} ms | send lag p99 "
            f"{burst['send_lag_p99_ms']:.1f} ms | errors "
            f"{idle['errors'] + burst['errors']} | Jobs {r.get('jobs_seen', 0)}, last "
            f"{r.get('last_job_after_burst_s', float('nan')):.1f} s after the burst"
        )
    per_run = [pooled_p99(run, "burst") / pooled_p99(run, "idle") for run in runs]
    everything = [r for run in runs for r in run]
    idle_p99, burst_p99 = pooled_p99(everything, "idle"), pooled_p99(everything, "burst")
    print(
        f"{layout:20s} pooled p99: idle {idle_p99:.2f} ms, burst {burst_p99:.2f} ms, ratio "
        f"{burst_p99 / idle_p99:.2f}; per run: " + ", ".join(f"{x:.2f}" for x in per_run)
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.isolation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="the benchmark (default)")
    run.add_argument("--layout", action="append", choices=LAYOUTS)
    run.add_argument("--runs", type=int, default=3, help="fresh processes each")
    run.add_argument("--rounds", type=int, default=3, help="idle/burst pairs per run")
    run.add_argument("--rate", type=float, default=500, help="offered admission req/s")
    run.add_argument("--duration", type=float, default=10, help="seconds per measurement")
    run.add_argument("--pvcs", type=int, default=1000)
    run.add_argument("--threads", type=int, default=8, help="PVC writer threads")
    run.add_argument("--timeout", type=float, default=120.0)
    run.add_argument("--json", type=Path, help="also write the figures here")
    load = sub.add_parser("child-load")
    load.add_argument("--url", required=True)
    load.add_argument("--ca", required=True)
    load.add_argument("--body", required=True)
    load.add_argument("--rate", type=float, required=True)
    load.add_argument("--duration", type=float, required=True)
    same = sub.add_parser("child-same-process")
    same.add_argument("--kubeconfig", required=True)
    same.add_argument("--cert-dir", required=True)
    same.add_argument("--host", default="127.0.0.1")
    same.add_argument("--port", type=int, required=True)
    same.add_argument("--metrics-port", type=int, required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["run", *argv]
    args = parser().parse_args(argv)
    if args.command == "child-load":
        return run_load(args)
    if args.command == "child-same-process":
        return run_same_process(args)
    with contextlib.suppress(OSError, AttributeError):  # the parent writes PVCs: keep it off 0
        os.sched_setaffinity(0, {int(OTHER_CPU)})
    layouts = args.layout or DEFAULT_LAYOUTS
    figures: dict[str, list[list[dict[str, Any]]]] = {layout: [] for layout in layouts}
    for _ in range(args.runs):  # layouts in turn, so the machine's drift falls on all alike
        for layout in layouts:
            figures[layout].append(one_run(layout, args))
    for layout in layouts:
        print_runs(layout, figures[layout])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
