"""Loader overhead for Azure Blob, HTTPS and Hugging Face Hub sources, each against its bare
tool on the same data in the same run:

- `az`: Azurite (Microsoft's emulator, account key) — `gpu-admission load --source az://...`
  against `rclone copy` with exactly the command line and environment the loader gives rclone;
- `https`: a local HTTPS server with a private CA, serving a directory listing — the same pair;
- `hf`: the Hub stand-in of the test world — `gpu-admission load --source hf://...` against a
  bare `huggingface_hub.snapshot_download(repo, local_dir=...)` in its own process.

The dataset is the same for each: small files under nested folders and a few large ones. Each
round runs both contenders into fresh directories, in alternating order; round 0 warms up and is
not counted. Every copy is checked (files and bytes). Reported per backend: the medians, the
ratio of the medians (target at most 1.1), and the per-round ratios' spread.

Run: `python -m bench.loader_sources [--backend az|https|hf|all] [--rounds 3] [--json FILE]`.
Azurite comes from `make test`'s npm install (`.venv/node`) or `$GPU_ADMISSION_AZURITE`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loader import MIB, job_memory_limit, loader_settings, timed, tree_size
from gpu_admission.datasets.source import parse_data_source
from gpu_admission.names import LOADER_MEMORY_LIMIT_ENV
from loaders.rclone import rclone_command
from loaders.shards import SourceObject
from loaders.sources import rclone_env
from loaders.tuning import hub_workers
from tests.world.stand_ins.azurite import ACCOUNT, KEY, azurite
from tests.world.stand_ins.hf_hub import hub_stand_in
from tests.world.stand_ins.objectstores import dataset_files
from tests.world.stand_ins.web_files import web_files

BACKENDS = ("az", "https", "hf")
HUB_BOOKKEEPING = ".cache"  # huggingface_hub's metadata in local_dir, not part of the data
BARE_SNAPSHOT = (
    "import sys\n"
    "from huggingface_hub import snapshot_download\n"
    "from huggingface_hub.utils import disable_progress_bars\n"
    "disable_progress_bars()\n"
    "snapshot_download(sys.argv[1], local_dir=sys.argv[2], max_workers=int(sys.argv[3]))\n"
)


@dataclass
class Contenders:
    """One backend: the source, the environment both run with, and the two copies."""

    source: str
    env: dict[str, str]
    bare: Callable[[Path], float]
    ignore: str = ""  # a top-level folder in the copy that is bookkeeping, not data


def dataset(small: int, large: int, large_bytes: int) -> dict[str, bytes]:
    files = dataset_files(files=small, large_bytes=0)
    for i in range(large):
        files[f"large/shard-{i:02d}.bin"] = os.urandom(large_bytes)
    return files


def base_env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCLONE_", "AZURE_", "HF_"))}
    env.update(
        HOME=str(scratch),
        RCLONE_CONFIG=str(scratch / "rclone.conf"),
        RCLONE_CACHE_DIR=str(scratch / "cache"),
        # The loader runs `rclone` from PATH, as in its image: this environment's, first.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env[LOADER_MEMORY_LIMIT_ENV] = str(job_memory_limit())  # the Job's Downward API
    return env


def bare_rclone(source: str, env: Mapping[str, str]) -> Callable[[Path], float]:
    parsed = parse_data_source(source)
    rclone = shutil.which("rclone", path=env["PATH"]) or "rclone"

    def copy(dest: Path) -> float:
        settings = loader_settings(rclone, parsed, env)
        command = rclone_command(rclone, parsed, str(dest), sync=False, settings=settings)
        return timed(command, rclone_env(parsed, env))

    return copy


def prepare(backend: str, files: dict[str, bytes], scratch: Path, stack: ExitStack) -> Contenders:
    env = base_env(scratch)
    if backend == "az":
        store = stack.enter_context(azurite())
        store.put("bench", files, prefix="train/")
        env.update(
            RCLONE_CONFIG_SRC_TYPE="azureblob",
            RCLONE_CONFIG_SRC_ACCOUNT=ACCOUNT,
            RCLONE_CONFIG_SRC_KEY=KEY,
            RCLONE_AZUREBLOB_ENDPOINT=store.endpoint,
        )
        source = "az://bench/train"
        return Contenders(source, env, bare_rclone(source, env))
    if backend == "https":
        server = stack.enter_context(web_files())
        server.put(files, prefix="train/")
        env.update(SSL_CERT_FILE=str(server.ca_path), RCLONE_CONFIG_SRC_TYPE="http")
        source = server.url("train/")
        return Contenders(source, env, bare_rclone(source, env))
    hub = stack.enter_context(hub_stand_in())
    hub.repo("bench/train", "dataset").commit(files)
    env.update(
        SSL_CERT_FILE=str(hub.ca_path),
        HF_ENDPOINT=hub.endpoint,
        HF_HOME=str(scratch / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )

    def bare(dest: Path) -> float:
        # snapshot_download of a dataset repository: repo_type as a keyword.
        script = BARE_SNAPSHOT.replace(
            "snapshot_download(sys.argv[1],", "snapshot_download(sys.argv[1], repo_type='dataset',"
        )
        # The loader's download threads for these files (loaders.tuning).
        workers = hub_workers([SourceObject(name, len(data)) for name, data in files.items()])
        command = [sys.executable, "-c", script, "bench/train", str(dest), str(workers)]
        return timed(command, env)

    return Contenders("hf://datasets/bench/train", env, bare, ignore=HUB_BOOKKEEPING)


def data_size(root: Path, ignore: str) -> tuple[int, int]:
    if ignore and (root / ignore).exists():
        shutil.rmtree(root / ignore)
    return tree_size(root)


def measure(
    name: str, contenders: Contenders, expected: tuple[int, int], rounds: int, work: Path
) -> dict[str, Any]:
    def loader(dest: Path) -> float:
        summary_file = dest.parent / f"{dest.name}.summary"
        command = [sys.executable, "-m", "commands", "load", "--source", contenders.source]
        command += ["--dest", str(dest), "--termination-log", str(summary_file)]
        seconds = timed(command, contenders.env)
        summary = json.loads(summary_file.read_text())
        if summary.get("phase") != "Succeeded":
            raise RuntimeError(f"the loader failed: {summary}")
        return seconds

    pair: list[tuple[str, Callable[[Path], float]]] = [("bare", contenders.bare), ("load", loader)]
    runs: dict[str, list[float]] = {"bare": [], "load": []}
    for round_number in range(rounds + 1):  # round 0 warms up
        order = pair if round_number % 2 else pair[::-1]
        for who, copy in order:
            dest = work / f"{name}-{who}-{round_number}"
            seconds = copy(dest)
            copied = data_size(dest, contenders.ignore)
            if copied != expected:
                raise RuntimeError(f"{name} {who} copied {copied}, expected {expected}")
            shutil.rmtree(dest)
            if round_number:
                runs[who].append(seconds)
            label = "warm-up" if round_number == 0 else f"round {round_number}"
            print(f"{name:5s} {label:8s} {who:4s} {seconds:6.2f} s", flush=True)
    medians = {who: statistics.median(values) for who, values in runs.items()}
    per_round = [load / bare for load, bare in zip(runs["load"], runs["bare"], strict=True)]
    return {
        "seconds": runs,
        "median_seconds": medians,
        "ratio": medians["load"] / medians["bare"],
        "round_ratios": per_round,
        "mib_per_second_bare": expected[1] / MIB / medians["bare"],
    }


def run(backends: Iterator[str] | tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    files = dataset(args.small_files, args.large_files, args.large_mib * MIB)
    expected = (len(files), sum(map(len, files.values())))
    print(f"dataset: {expected[0]} files, {expected[1] / MIB:.1f} MiB")
    figures: dict[str, Any] = {
        "files": expected[0],
        "mib": expected[1] / MIB,
        "rounds": args.rounds,
    }
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as tmp:
        work = Path(tmp)
        for name in backends:
            scratch = work / f"scratch-{name}"
            scratch.mkdir()
            with ExitStack() as stack:
                started = time.monotonic()
                contenders = prepare(name, files, scratch, stack)
                print(f"{name}: source ready in {time.monotonic() - started:.1f} s", flush=True)
                figures[name] = measure(name, contenders, expected, args.rounds, work)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loader_sources",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--backend", choices=(*BACKENDS, "all"), default="all")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (median)")
    parser.add_argument("--small-files", type=int, default=300)
    parser.add_argument("--large-files", type=int, default=6)
    parser.add_argument("--large-mib", type=int, default=128, help="size of each large file")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    figures = run(backends, args)
    for name in backends:
        result = figures[name]
        ratios = result["round_ratios"]
        print(
            f"{name:5s} median of {args.rounds}: bare {result['median_seconds']['bare']:.2f} s, "
            f"loader {result['median_seconds']['load']:.2f} s, ratio {result['ratio']:.3f} "
            f"(rounds {min(ratios):.3f}-{max(ratios):.3f}; target <= 1.1)"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
