"""Dataset controller benchmarks against the real kube-apiserver and etcd (KUBEBUILDER_ASSETS, as
the tests' real control plane: `tests/world/control_plane.py`), behind the tests' fault proxy,
which counts the requests.

Three processes, so that no two of them share a GIL: the API child (which starts etcd and
kube-apiserver and runs the proxy), the controller (DatasetController, leader election off),
and this one, which writes PVCs and watches Jobs.

- `burst`: once the controller has synced, 1,000 dataset PVCs are written as fast as several
  client threads can. For each PVC: (Job seen on a watch) - (its create call returned), and
  (Job seen) - (the last create returned), all on this process's monotonic clock. Jobs are only
  created, never run (no kubelet, no controller-manager). Baseline in the same run: the same
  writers creating 1,000 PVCs that the controller does not select (label value `false`), with
  the controller running.
- `memory`: the API server is seeded with 10,000 dataset PVCs (through the API, before the
  controller starts), each already loaded (phase Succeeded, its Job cleaned up: the steady
  state) or, with `--with-jobs`, each with an unfinished loader Job (both caches full). The
  controller's RSS: after imports, after its informers synced, after every PVC was reconciled;
  and an idle process with the same imports and an API client. A full reconcile pass writes
  nothing here, which the proxy's request counts confirm.

Run: `KUBEBUILDER_ASSETS=$(../shared/kube/unpack.sh) python -m bench.controller [burst|memory]
[--json FILE]` (both by default). The figures vary with the machine's load; the baseline is
there to tell the controller's share from the API server's.

To judge a change to the controller, compare two checkouts round by round on the same machine:
`git worktree add /tmp/before REV`, then `python -m bench.controller burst --pvcs 500 --rounds 7
--compare /tmp/before`. Each round is a pair, this checkout's controller and the other's, each
on a fresh API server, first one then the other in turn; the report gives both sides' medians
and spreads and in how many pairs this side was the lower. Runs alternated by run cannot
separate a change of a fifth: the machine's load drifts more than that over their minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from bench.bare_jobs import in_threads, job_burst, loader_job, loader_jobs
from bench.controller_figures import (
    paired,
    print_burst,
    print_memory,
    print_paired,
    print_rounds,
    summary_ms,
)

NS = "datasets"
BASELINE_NS = "baseline"
BARE_NS = "bare-jobs"
SOURCE = "s3://bench-data/{i}"
LEASE_NS = "gpu-admission"
CHILD_TIMEOUT = 60.0
HERE = Path(__file__).resolve().parent.parent  # this checkout


# -- shared helpers ---------------------------------------------------------------------------


def rss_mib(pid: int | str = "self") -> dict[str, float]:
    """Resident set size now and at its peak, in MiB."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        field, _, rest = line.partition(":")
        if field in ("VmRSS", "VmHWM"):
            values["rss" if field == "VmRSS" else "peak"] = int(rest.split()[0]) / 1024
    return values


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pinned(cpu: str | None, command: list[str]) -> list[str]:
    """`command` run on CPU `cpu` (taskset), where it can be; as it is otherwise."""
    taskset = shutil.which("taskset")
    if cpu is None or taskset is None or (os.cpu_count() or 1) < 2:
        return command
    return [taskset, "-c", cpu, *command]


def pvc_body(name: str, source: str, loadable: bool, prefix: str) -> dict[str, Any]:
    """A dataset PVC as the PVC webhook leaves it (labelled); `loadable=False`: not selected."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "labels": {f"{prefix}data-load": "true" if loadable else "false"},
            "annotations": {f"{prefix}data-source": source},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def bench_config(max_loads: int, workers: int, prefix: str) -> Any:
    from gpu_admission.config.model import Config

    return Config.model_validate(
        {
            "annotation_prefix": prefix,
            "dataset": {"max_concurrent_loads": max_loads, "reconcile_workers": workers},
            "leader_election": {"enabled": False, "namespace": LEASE_NS},
        }
    )


class Child:
    """A child process speaking JSON lines on stdout; closing its stdin asks it to stop."""

    def __init__(self, argv: list[str], cpu: str | None = None, tree: Path | None = None) -> None:
        """`tree`: the checkout whose `bench.controller` (and product code) the child runs;
        this one by default."""
        self.name = " ".join(argv[:1])
        self.process = subprocess.Popen(
            pinned(cpu, [sys.executable, "-m", "bench.controller", *argv]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tree or HERE,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def message(self, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer from {self.name} in {timeout:g} s") from None
        if line is None:
            raise RuntimeError(f"{self.name} exited with {self.process.wait()}")
        return json.loads(line)

    def ask(self, command: str, timeout: float = CHILD_TIMEOUT) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.message(timeout)

    def stop(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def child(argv: list[str], cpu: str | None = None, tree: Path | None = None) -> Iterator[Child]:
    process = Child(argv, cpu, tree)
    try:
        yield process
    finally:
        process.stop()


def say(out: IO[str], **message: Any) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


# -- child: the API server ------------------------------------------------------------------


def _create_all(api: Any, calls: list[Callable[[], Any]], threads: int = 16) -> None:
    """Setup writes, from several threads (the API server takes them in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(call) for call in calls]:
            done.result()


def seed(api: Any, count: int, with_jobs: bool, prefix: str) -> None:
    """Write `count` dataset PVCs (setup only, nothing is measured here), each already loaded
    or, `with_jobs`, with its unfinished loader Job."""
    from kubernetes import client

    from gpu_admission.datasets.load import dataset_load
    from gpu_admission.names import PHASE_PENDING, PHASE_SUCCEEDED

    config = bench_config(max_loads=10, workers=1, prefix=prefix)
    names = config.names
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    phase = PHASE_PENDING if with_jobs else PHASE_SUCCEEDED

    def one(i: int) -> None:
        name, source = f"data-{i:05d}", SOURCE.format(i=i)
        body = pvc_body(name, source, True, prefix)
        body["metadata"]["annotations"][names.data_load_phase] = phase
        created = json.loads(
            core.create_namespaced_persistent_volume_claim(NS, body, _preload_content=False).data
        )
        uid = created["metadata"]["uid"]
        load = dataset_load(name, uid, created["metadata"]["annotations"], names)
        assert load is not None
        job_name = load.job
        core.patch_namespaced_persistent_volume_claim(
            name,
            NS,
            {"metadata": {"annotations": {names.data_load_job: job_name}}},
            _preload_content=False,
        )
        if with_jobs:
            job = loader_job(name, uid, source, NS, config)
            batch.create_namespaced_job(NS, job, _preload_content=False)

    _create_all(api, [functools.partial(one, i) for i in range(count)])


def seed_state(api: Any, path: Path) -> int:
    """Create the objects of a cluster-state file (as `gpu-admission review --cluster-state`
    reads it); those already there are skipped. Returns how many were created."""
    import yaml
    from kubernetes import utils

    created = 0
    for obj in yaml.safe_load(path.read_text()) or []:
        with contextlib.suppress(Exception):  # already there (the namespaces made above)
            utils.create_from_dict(api, obj, namespace=obj["metadata"].get("namespace"))
            created += 1
    return created


def run_cluster(args: argparse.Namespace) -> int:
    """etcd and the real kube-apiserver (from KUBEBUILDER_ASSETS), behind the fault proxy that
    counts requests. No controller-manager: no kubelet runs the Jobs here, and nothing is
    deleted."""
    from kubernetes import client, config

    from tests.world import control_plane
    from tests.world.fault_proxy import FaultProxy, kubeconfig_through

    plane = control_plane.start()
    certs = plane.folder / "certs"
    proxy = FaultProxy(plane.url, certs / "apiserver.crt", certs / "apiserver.key").start()
    try:
        kubeconfig = kubeconfig_through(proxy, plane.kubeconfig)
        api = config.new_client_from_config(str(plane.kubeconfig))
        core: Any = client.CoreV1Api(api)  # raw responses: the client's stubs do not say so
        for namespace in (NS, BASELINE_NS, BARE_NS, LEASE_NS):
            core.create_namespace({"metadata": {"name": namespace}}, _preload_content=False)
        started = time.monotonic()
        if args.state:
            seed_state(api, args.state)
        if args.seed:
            seed(api, args.seed, args.with_jobs, args.prefix)
        api.close()
        say(
            sys.stdout,
            kubeconfig=str(kubeconfig),
            seeded=args.seed,
            seed_seconds=time.monotonic() - started,
        )
        servers = [p.pid for p in plane.processes]  # etcd and kube-apiserver

        def server_cpu() -> float:
            return sum(cpu_seconds(pid) for pid in servers)

        faults = proxy.faults
        cpu_at_reset = server_cpu()
        for line in sys.stdin:  # commands until the parent closes stdin
            if line.strip() == "reset":
                faults.reset_counts()
                cpu_at_reset = server_cpu()
                say(sys.stdout, ok=True)
            elif line.strip() == "counts":
                sizes = [rss_mib(pid) for pid in servers]
                say(
                    sys.stdout,
                    **{m: faults.request_count(m) for m in ("GET", "POST", "PATCH", "DELETE")},
                    rss={k: sum(s[k] for s in sizes) for k in ("rss", "peak")},
                    cpu_seconds=server_cpu() - cpu_at_reset,
                )
    finally:
        proxy.stop()
        plane.stop()
    return 0


# -- child: the controller --------------------------------------------------------------------


async def controller_main(args: argparse.Namespace) -> None:
    # What the deployed `gpu-admission controller` process imports: its entry point and the
    # whole command line, then the command's own modules (its probe and metrics server with
    # them), so that its RSS is the one measured.
    import commands.cli
    import commands.controller  # noqa: F401
    from commands.parser import build_parser

    build_parser()
    from controllers.dataset import DatasetController
    from gpu_admission.cluster.kube import api_client
    from gpu_admission.process.heap import freeze_long_lived

    api = api_client(Path(args.kubeconfig))  # as `gpu-admission controller` builds it
    controller = DatasetController(
        api, bench_config(args.max_loads, args.workers, args.prefix), identity="bench"
    )
    say(sys.stdout, stage="imported", tree=str(HERE), **rss_mib())
    if args.idle:
        return
    reconciled = 0
    all_reconciled = asyncio.Event()
    from controllers.dataset.reconciler import Reconciler

    reconcile = Reconciler.reconcile_pvc

    async def counting(self: Reconciler, key: str) -> None:  # counts finished PVC reconciles
        nonlocal reconciled
        await reconcile(self, key)
        reconciled += 1
        if args.expect and reconciled >= args.expect:
            all_reconciled.set()

    Reconciler.reconcile_pvc = counting  # type: ignore[method-assign]
    started = time.monotonic()
    await controller.start()
    freeze_long_lived("started")  # where `gpu-admission controller` freezes its heap
    await controller.leading.wait()  # informers synced, every cached PVC queued
    freeze_long_lived("caches synced")
    term = controller.reconciler
    assert term is not None
    say(
        sys.stdout,
        stage="synced",
        seconds=time.monotonic() - started,
        pvcs=len(term.pvcs),
        jobs=len(term.jobs),
        **rss_mib(),
    )
    if args.expect:
        with contextlib.suppress(TimeoutError):  # reported: how far it got is a figure too
            await asyncio.wait_for(all_reconciled.wait(), args.timeout)
        say(
            sys.stdout,
            stage="reconciled",
            seconds=time.monotonic() - started,
            reconciled=reconciled,
            timed_out=not all_reconciled.is_set(),
            **rss_mib(),
        )
    await asyncio.to_thread(sys.stdin.read)  # until the parent closes stdin
    await controller.stop()
    # stop() waits a bounded while for the informer threads; one may still be handing its
    # initial list to the handlers, which need this loop open.
    await asyncio.to_thread(lambda: [i.join(CHILD_TIMEOUT) for i in term.informers])
    api.close()


def run_controller(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from gpu_admission.process import event_loop  # the deployed process's loop

    if args.profile is None:
        event_loop.run(controller_main(args))
        return 0
    import cProfile
    import pstats

    # Every thread's own profile (the informers' and the API writers' threads too), merged.
    profiles: list[cProfile.Profile] = []
    thread_run = threading.Thread.run

    def profiled_run(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)  # CPU, not waiting
        profiles.append(profile)
        profile.runcall(thread_run, self)

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main_profile = cProfile.Profile(time.thread_time)
    main_profile.runcall(event_loop.run, controller_main(args))
    merged = pstats.Stats(main_profile)
    for profile in profiles:
        with contextlib.suppress(TypeError):  # a thread that never ran anything
            merged.add(profile)
    merged.dump_stats(args.profile)
    return 0


# -- parent: burst ----------------------------------------------------------------------------


def _api(kubeconfig: str) -> Any:
    from kubernetes import config

    return config.new_client_from_config(kubeconfig)


def write_burst(
    kubeconfig: str, namespace: str, count: int, threads: int, loadable: bool, prefix: str
) -> tuple[dict[str, float], float, float]:
    """Create `count` PVCs from `threads` threads (one API client each). Returns when each create
    returned (by name), and the burst's start and end on the monotonic clock."""
    from kubernetes import client

    clients: list[Any] = [client.CoreV1Api(_api(kubeconfig)) for _ in range(threads)]
    for core in clients:  # open each keep-alive connection before the clock starts
        core.list_namespaced_persistent_volume_claim(namespace, limit=1, _preload_content=False)
    created: dict[str, float] = {}

    def write(index: int) -> None:
        for i in range(index, count, threads):
            name = f"data-{i:05d}"
            body = pvc_body(name, SOURCE.format(i=i), loadable, prefix)
            clients[index].create_namespaced_persistent_volume_claim(
                namespace, body, _preload_content=False
            )
            created[name] = time.monotonic()

    try:
        started, _ = in_threads(write, threads)
    finally:
        for core in clients:
            core.api_client.close()
    return created, started, max(created.values())


class JobWatch:
    """A raw watch on the namespace's Jobs, recording when each PVC's first Job arrives."""

    def __init__(self, kubeconfig: str, namespace: str, expected: int) -> None:
        from kubernetes import client

        self._api = _api(kubeconfig)
        batch: Any = client.BatchV1Api(self._api)
        listed = batch.list_namespaced_job(namespace, limit=1, _preload_content=False)
        version = json.loads(listed.data)["metadata"]["resourceVersion"]
        # Returns once the response headers arrived: the server has registered the watch.
        self._response = batch.list_namespaced_job(
            namespace,
            watch=True,
            resource_version=version,
            timeout_seconds=3600,
            _preload_content=False,
        )
        self.seen: dict[str, float] = {}
        self.expected = expected
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        import urllib3
        from kubernetes.watch.watch import iter_resp_lines

        try:
            for line in iter_resp_lines(self._response):
                arrived = time.monotonic()
                event = json.loads(line)
                if event.get("type") != "ADDED":
                    continue
                owners = event["object"]["metadata"].get("ownerReferences") or []
                for owner in owners:
                    if owner.get("kind") == "PersistentVolumeClaim":
                        self.seen.setdefault(owner["name"], arrived)
                if len(self.seen) >= self.expected:
                    break
        except urllib3.exceptions.ProtocolError:
            pass  # the API server went away at the end of the run: what was seen stands
        self.done.set()
        self._response.release_conn()

    def close(self) -> None:
        self._api.close()


def settled_counts(apiserver: Child, quiet: float = 1.0, limit: float = 60.0) -> dict[str, Any]:
    """The apiserver's request counts once they stop moving for `quiet` seconds."""
    counts = apiserver.ask("counts")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(quiet)  # a benchmark measuring a quiet period, not a test synchronising
        again = apiserver.ask("counts")
        if all(again[m] == counts[m] for m in ("GET", "POST", "PATCH", "DELETE")):
            return again
        counts = again
    return counts


def burst(args: argparse.Namespace, tree: Path | None = None) -> dict[str, Any]:
    """One burst on a fresh API server; the controller is `tree`'s (this checkout's by
    default)."""
    with child(["child-cluster", "--prefix", args.prefix]) as apiserver:
        kubeconfig = apiserver.message()["kubeconfig"]
        controller_argv = ["child-controller", "--kubeconfig", kubeconfig, "--prefix", args.prefix]
        controller_argv += ["--max-loads", str(args.max_loads), "--workers", str(args.workers)]
        if args.profile is not None:
            controller_argv += ["--profile", str(args.profile)]
        with child(controller_argv, tree=tree) as controller:
            imported = controller.message()
            synced = controller.message()
            print(f"controller synced in {synced['seconds']:.2f} s; writing the baseline burst")
            base, base_start, base_end = write_burst(
                kubeconfig, BASELINE_NS, args.pvcs, args.threads, False, args.prefix
            )
            del base
            watch = JobWatch(kubeconfig, NS, args.pvcs)
            apiserver.ask("reset")
            controller_cpu = cpu_seconds(controller.process.pid)
            print(f"writing {args.pvcs} dataset PVCs from {args.threads} threads")
            created, start, end = write_burst(
                kubeconfig, NS, args.pvcs, args.threads, True, args.prefix
            )
            all_seen = watch.done.wait(args.timeout)
            last_job = time.monotonic()
            counts = settled_counts(apiserver)  # the status writes and Events after the Jobs
            controller_cpu = cpu_seconds(controller.process.pid) - controller_cpu
            watch.close()
            controller_rss = rss_mib(controller.process.pid)
            print(f"bare client: {args.pvcs} loader Jobs from {args.threads} threads")
            bodies = loader_jobs(args.pvcs, BARE_NS, bench_config(1, 1, args.prefix))
            bare_seconds = job_burst(kubeconfig, BARE_NS, bodies, args.threads)
    seen = watch.seen
    missing = sorted(set(created) - set(seen))
    latencies = [seen[name] - created[name] for name in created if name in seen]
    after_burst = [seen[name] - end for name in created if name in seen]
    figures: dict[str, Any] = {
        "pvcs": args.pvcs,
        "writer_threads": args.threads,
        "reconcile_workers": args.workers,
        "baseline_burst_seconds": base_end - base_start,
        "baseline_creates_per_second": args.pvcs / (base_end - base_start),
        "burst_seconds": end - start,
        "burst_creates_per_second": args.pvcs / (end - start),
        "jobs_seen": len(seen),
        "jobs_missing": len(missing),
        "all_jobs_seen_seconds_after_burst": (max(seen.values()) - end) if seen else None,
        "bare_client_jobs_seconds": bare_seconds,
        "last_job_over_bare_client": ((max(seen.values()) - end) / bare_seconds) if seen else None,
        "jobs_before_burst_end": sum(1 for v in after_burst if v < 0),
        "job_minus_pvc_created": summary_ms(latencies) if latencies else None,
        "job_minus_burst_end": summary_ms(after_burst) if after_burst else None,
        "api_requests_during_burst": {k: counts[k] for k in ("GET", "POST", "PATCH", "DELETE")},
        "wall_seconds": last_job - start,
        "apiserver_cpu_seconds": counts["cpu_seconds"],
        "controller_cpu_seconds": controller_cpu,
        "apiserver_rss_mib": counts["rss"]["rss"],
        "controller_rss_mib": controller_rss.get("rss"),
        "controller_tree": imported.get("tree"),  # the checkout whose controller ran
    }
    if not all_seen:
        figures["timed_out_after_seconds"] = last_job - end
    return figures


def compare_rounds(
    args: argparse.Namespace,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`--rounds` pairs of bursts: one with this checkout's controller, one with the compared
    checkout's, each on a fresh API server. Which goes first alternates, so that a drift in the
    machine's load over the minutes a run takes favours neither."""
    here: list[dict[str, Any]] = []
    there: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = [(here, None, "this checkout"), (there, args.compare, str(args.compare))]
        if number % 2:
            order.reverse()
        for rounds, tree, label in order:
            print(f"-- pair {number + 1} of {args.rounds}: {label}")
            rounds.append(burst(args, tree))
            print_burst(rounds[-1])
    return here, there


# -- parent: memory ---------------------------------------------------------------------------


def memory(args: argparse.Namespace) -> dict[str, Any]:
    apiserver_argv = ["child-cluster", "--prefix", args.prefix, "--seed", str(args.watched)]
    if args.with_jobs:
        apiserver_argv.append("--with-jobs")
    with child(apiserver_argv) as apiserver:
        ready = apiserver.message(timeout=args.timeout)
        kubeconfig = ready["kubeconfig"]
        seconds = ready["seed_seconds"]
        print(f"kube-apiserver seeded with {args.watched} dataset PVCs in {seconds:.1f} s")
        common = ["child-controller", "--kubeconfig", kubeconfig, "--prefix", args.prefix]
        common += ["--max-loads", str(args.max_loads), "--workers", str(args.workers)]
        with child([*common, "--idle"]) as idle:
            idle_rss = idle.message()
        apiserver.ask("reset")
        argv = [*common, "--expect", str(args.watched)]
        argv += ["--timeout", str(args.timeout)]
        with child(argv) as controller:
            imported = controller.message()
            synced = controller.message(timeout=args.timeout)
            reconciled = controller.message(timeout=args.timeout + CHILD_TIMEOUT)
        counts = apiserver.ask("counts")
    return {
        "watched_pvcs": args.watched,
        "cached": "PVCs and Jobs" if args.with_jobs else "PVCs (loaded; Jobs cleaned up)",
        "idle_rss_mib": idle_rss["rss"],
        "rss_before_start_mib": imported["rss"],
        "rss_after_sync_mib": synced["rss"],
        "rss_after_reconcile_mib": reconciled["rss"],
        "peak_rss_mib": reconciled["peak"],
        "cached_pvcs": synced["pvcs"],
        "cached_jobs": synced["jobs"],
        "sync_seconds": synced["seconds"],
        "reconcile_all_seconds": reconciled["seconds"],
        "reconciles": reconciled["reconciled"],
        "reconcile_timed_out": reconciled["timed_out"],
        "writes_during_run": counts["POST"] + counts["PATCH"] + counts["DELETE"],
        "reads_during_run": counts["GET"],
    }


# -- command line -----------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.controller",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--prefix", default="gpu-admission.io/", help="the annotation prefix")
    controller = argparse.ArgumentParser(add_help=False, parents=[shared])
    controller.add_argument("--workers", type=int, default=4, help="controller reconcile workers")
    controller.add_argument("--max-loads", type=int, default=2000, help="max_concurrent_loads")
    controller.add_argument(
        "--profile", type=Path, help="write the controller's cProfile statistics here"
    )
    run = argparse.ArgumentParser(add_help=False, parents=[controller])
    run.add_argument("--json", type=Path, help="also write the figures here")
    run.add_argument("--timeout", type=float, default=120.0, help="seconds to wait at most")
    burst_options = argparse.ArgumentParser(add_help=False)
    burst_options.add_argument("--pvcs", type=int, default=1000)
    burst_options.add_argument("--threads", type=int, default=8, help="client threads writing")
    burst_options.add_argument(
        "--rounds", type=int, default=1, help="bursts (pairs with --compare), each on a new server"
    )
    memory_options = argparse.ArgumentParser(add_help=False)
    memory_options.add_argument("--watched", type=int, default=10_000)
    memory_options.add_argument(
        "--with-jobs", action="store_true", help="an unfinished loader Job for each PVC"
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "all", parents=[run, burst_options, memory_options], help="burst, then memory (default)"
    )
    burst_parser = sub.add_parser(
        "burst", parents=[run, burst_options], help="Job latency after a PVC burst"
    )
    burst_parser.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="another checkout (git worktree add DIR REV): each round runs its controller and "
        "this one's, in alternating order, and the figures are reported pair by pair",
    )
    sub.add_parser("memory", parents=[run, memory_options], help="controller RSS, many PVCs")
    # Internal: the child processes the benchmarks start.
    e = sub.add_parser("child-cluster", parents=[shared])
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--with-jobs", action="store_true")
    e.add_argument("--state", type=Path, help="a cluster-state file to create first")
    c = sub.add_parser("child-controller", parents=[controller])
    c.add_argument("--kubeconfig", required=True)
    c.add_argument("--idle", action="store_true", help="report RSS after imports, then exit")
    c.add_argument("--expect", type=int, default=0, help="report once this many reconciled")
    c.add_argument("--timeout", type=float, default=120.0)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["all", *argv]
    args = parser().parse_args(argv)
    compared = getattr(args, "compare", None)
    if compared is not None and not (compared / "bench" / "controller.py").is_file():
        parser().error(f"--compare {compared}: no bench/controller.py there; give a checkout")
    children: dict[str, Callable[[argparse.Namespace], int]] = {
        "child-cluster": run_cluster,
        "child-controller": run_controller,
    }
    if args.command in children:
        return children[args.command](args)
    figures: dict[str, Any] = {}
    if args.command == "burst" and args.compare is not None:
        here, there = compare_rounds(args)
        summary = paired(here, there)
        figures["burst"] = {
            "this": here,
            "compared": {"tree": str(args.compare), "rounds": there},
            "paired": summary,
        }
        print_paired(summary, args.compare)
    elif args.command in ("all", "burst"):
        rounds = []
        for number in range(args.rounds):
            if args.rounds > 1:
                print(f"-- round {number + 1} of {args.rounds}")
            rounds.append(burst(args))
            print_burst(rounds[-1])
        figures["burst"] = rounds[0] if len(rounds) == 1 else rounds
        if len(rounds) > 1:
            print_rounds(rounds)
    if args.command in ("all", "memory"):
        figures["memory"] = memory(args)
        print_memory(figures["memory"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
