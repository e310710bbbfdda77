"""`gpu-admission load`: what a loader Job runs. A thin wrapper around `rclone copy`.

rclone is configured only by environment (`RCLONE_CONFIG_SRC_*`, set by the Job from the PVC's
credentials Secret by reference); this wrapper adds what a Job needs around it: rclone's JSON log
streamed to stdout with a progress line after each stats tick (gpu_admission.load_progress), and
on exit a compact JSON summary (bytes, files, duration and, on failure, the cause in plain words)
written to the termination-message file, so the controller can report it on the PVC without
reading logs. rclone's exit code is the Job's exit code, except for failures that trying again
cannot fix (PERMANENT_EXIT_CODE), which the Job's podFailurePolicy turns into an immediate
failure.

A sharded load (`--shard-count N`, the index from the Indexed Job's JOB_COMPLETION_INDEX) lists
the source, copies only its own part of the listing (commands.load_shards) and reports the
listing's fingerprint so the controller can check that every shard split the same listing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import IO, Any

from commands.load_hub import run_hub_load
from commands.load_report import RunLog, summary, token_identity, write_summary
from commands.load_shards import (
    ListingError,
    ShardPlan,
    list_source,
    plan_shard,
    prune,
    write_file_list,
)
from commands.load_sources import REMOTE, rclone_env
from commands.load_verify import verify_sha256
from gpu_admission.datasource import DataSource, DataSourceError, parse_data_source
from gpu_admission.load_progress import from_stats
from gpu_admission.names import (
    AWS_WEB_IDENTITY_TOKEN_FILE,
    AZURE_FEDERATED_TOKEN_FILE,
    DATA_MOUNT_PATH,
    LOADER_PERMANENT_EXIT_CODE,
)

TERMINATION_LOG = "/dev/termination-log"
USAGE_EXIT_CODE = 2
LISTING_FAILED_EXIT_CODE = 1
PERMANENT_EXIT_CODE = LOADER_PERMANENT_EXIT_CODE
INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by the Job controller in every Indexed Job pod


def rclone_command(
    rclone: str,
    source: DataSource,
    dest: str,
    *,
    sync: bool,
    transfers: int,
    checkers: int,
    stats_seconds: float = 5.0,
    files_from: str | None = None,
) -> list[str]:
    """`rclone copy` (or `sync`) of the source; with `files_from`, only the listed objects (a
    shard's part: always `copy`, since a filtered `sync` deletes nothing outside its filter)."""
    verb = "sync" if sync and files_from is None else "copy"
    command = [
        rclone,
        verb,
        f"{REMOTE}:{source.remote_path}",
        dest,
        "--checksum",
        "--transfers",
        str(transfers),
        "--checkers",
        str(checkers),
        "--use-json-log",
        "--stats",
        f"{stats_seconds:g}s",
        "--stats-log-level",
        "NOTICE",
    ]
    if files_from is not None:
        command += ["--files-from-raw", files_from]
    return command


def _pump(stream: IO[str], log: RunLog, out: IO[str], shard: ShardPlan | None, shards: int) -> None:
    for line in stream:
        out.write(line)
        before = log.stats
        log.take(line)
        if log.stats is not before:  # a stats tick: say how far the load has got
            if shard is None:
                progress = from_stats(log.stats)
            else:
                listed = (shard.listed_bytes, shard.listed_objects)
                planned = (len(shard.objects), shard.bytes)
                progress = from_stats(log.stats, shard.index, shards, *planned, listed=listed)
            out.write(progress.line() + "\n")
        out.flush()


def run_load(
    source: DataSource,
    dest: str,
    *,
    sync: bool = False,
    transfers: int = 8,
    checkers: int = 16,
    rclone: str = "rclone",
    termination_log: str = TERMINATION_LOG,
    environ: MutableMapping[str, str] | None = None,
    out: IO[str] | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    stats_seconds: float = 5.0,
    sha256: str | None = None,
) -> int:
    """Run rclone, stream its log to `out`, write the summary; return rclone's exit code (or
    PERMANENT_EXIT_CODE). `sha256`: a single file's expected digest, checked after the copy."""
    out = out or sys.stdout
    env = rclone_env(source, os.environ if environ is None else environ)
    log = RunLog()
    started = time.monotonic()
    interrupted = False
    shard: ShardPlan | None = None
    exit_code: int | None = None
    with contextlib.ExitStack() as stack:  # a scratch directory only for a shard's file list
        files_from = None
        if shard_count > 1:
            try:
                objects = list_source(rclone, f"{REMOTE}:{source.remote_path}", env)
            except ListingError as exc:
                log.errors.append(f"listing the source failed: {exc}")
                exit_code = LISTING_FAILED_EXIT_CODE
            else:
                shard = plan_shard(objects, shard_index, shard_count)
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="load-"))
                files_from = str(Path(scratch) / "files")
                write_file_list(shard, Path(files_from))
                if sync and shard.index == 0 and Path(dest).is_dir():
                    # A filtered sync deletes nothing outside its part: one shard prunes.
                    removed = prune(Path(dest), (o.path for o in objects))
                    out.write(json.dumps({"level": "notice", "msg": f"pruned {removed} files"}))
                    out.write("\n")
        if exit_code is None:
            command = rclone_command(
                rclone,
                source,
                dest,
                sync=sync,
                transfers=transfers,
                checkers=checkers,
                stats_seconds=stats_seconds,
                files_from=files_from,
            )
            exit_code, interrupted = _run_rclone(command, env, log, out, shard, shard_count)
    # Who a web identity token says the loader is, to name it if the role refused it.
    token_file = env.get(AWS_WEB_IDENTITY_TOKEN_FILE) or env.get(AZURE_FEDERATED_TOKEN_FILE)
    identity = token_identity(token_file) if exit_code else {}
    failure = None
    if exit_code == 0 and sha256 and source.single_file:
        problem = verify_sha256(Path(dest) / source.remote_path, sha256)
        if problem:
            exit_code, failure = PERMANENT_EXIT_CODE, (problem, True)
    duration = time.monotonic() - started
    result = summary(log, exit_code, duration, source.url, interrupted, shard, identity, failure)
    write_summary(result, out, termination_log)
    return PERMANENT_EXIT_CODE if result.get("permanent") else exit_code


def _run_rclone(
    command: list[str],
    env: Mapping[str, str],
    log: RunLog,
    out: IO[str],
    shard: ShardPlan | None,
    shards: int,
) -> tuple[int, bool]:
    """Run rclone to the end, forwarding SIGTERM; (exit code, whether it was interrupted)."""
    interrupted = False
    try:
        process = subprocess.Popen(
            command,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # rclone logs to stderr; one ordered stream
            text=True,
            errors="replace",
        )
    except OSError as exc:
        log.errors.append(f"cannot start {command[0]}: {exc.strerror}")
        return 127, False

    def forward(signum: int, _frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        process.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        assert process.stdout is not None
        _pump(process.stdout, log, out, shard, shards)
        exit_code = process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return exit_code, interrupted


def add_load_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `load` on the CLI's sub-command parsers; the handler is in `args.func`."""
    parser = subparsers.add_parser(
        "load",
        help="copy a dataset from s3://, gs://, az://, https:// or hf:// into a directory (run "
        "by loader Jobs)",
        description="Copy a data source into a directory with rclone, configured by the "
        "RCLONE_CONFIG_SRC_* environment; write a JSON summary to the termination log.",
    )
    parser.add_argument(
        "--source",
        required=True,
        help="s3://bucket[/prefix], gs://bucket[/prefix], az://container[/prefix], "
        "https://host/path/file, https://host/path/, hf://org/model[@revision] or "
        "hf://datasets/org/name[@revision]",
    )
    parser.add_argument(
        "--sha256", default=None, help="a single file's expected SHA-256, checked after the copy"
    )
    parser.add_argument(
        "--include",
        default=None,
        help="hf:// only: comma-separated glob patterns of the files to fetch",
    )
    parser.add_argument("--dest", default=DATA_MOUNT_PATH, help="directory to copy into")
    parser.add_argument(
        "--sync", action="store_true", help="mirror the source: delete files it does not have"
    )
    parser.add_argument("--transfers", type=int, default=8)
    parser.add_argument("--checkers", type=int, default=16)
    parser.add_argument(
        "--shard-count",
        type=int,
        default=1,
        help="split the source into this many disjoint parts and copy one of them",
    )
    parser.add_argument(
        "--shard-index",
        type=int,
        default=None,
        help=f"the part to copy, 0-based (default: ${INDEX_ENV}, set in Indexed Job pods)",
    )
    parser.add_argument(
        "--stats-seconds", type=float, default=5.0, help="how often to print progress"
    )
    parser.add_argument("--rclone", default="rclone", help="the rclone executable")
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    parser.set_defaults(func=main_load)
    return parser


def shard_of(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[int, int]:
    """(index, count) from the flags and the Job's environment; ValueError says what is wrong."""
    count = args.shard_count
    if count < 1:
        raise ValueError(f"--shard-count must be at least 1, not {count}")
    index = args.shard_index
    if index is None:
        raw = environ.get(INDEX_ENV, "0" if count == 1 else "")
        if not raw.strip().isdigit():
            raise ValueError(
                f"--shard-count {count} needs --shard-index or ${INDEX_ENV} (an Indexed Job "
                f"sets it); got {raw!r}"
            )
        index = int(raw)
    if not 0 <= index < count:
        raise ValueError(f"the shard index {index} is outside 0..{count - 1}")
    return index, count


def main_load(args: argparse.Namespace) -> int:
    try:
        source = parse_data_source(args.source)
        index, count = shard_of(args, os.environ)
        if args.sha256 is not None and not source.single_file:
            raise ValueError("--sha256 checks one file: the source must not end with /")
    except (DataSourceError, ValueError) as exc:
        print(f"gpu-admission load: {exc}", file=sys.stderr)
        return USAGE_EXIT_CODE
    if args.stats_seconds <= 0:
        print("gpu-admission load: --stats-seconds must be positive", file=sys.stderr)
        return USAGE_EXIT_CODE
    if source.scheme == "hf":
        return run_hub(source, args, index, count)
    if args.include:
        print("gpu-admission load: --include applies to hf:// sources only", file=sys.stderr)
        return USAGE_EXIT_CODE
    return run_load(
        source,
        args.dest,
        sync=args.sync,
        transfers=args.transfers,
        checkers=args.checkers,
        rclone=args.rclone,
        termination_log=args.termination_log,
        shard_index=index,
        shard_count=count,
        stats_seconds=args.stats_seconds,
        sha256=args.sha256,
    )


def run_hub(source: DataSource, args: argparse.Namespace, index: int, count: int) -> int:
    """An hf:// load, in this process with huggingface_hub; SIGTERM stops it with a summary."""

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return run_hub_load(
            source,
            args.dest,
            include=args.include,
            shard_index=index,
            shard_count=count,
            transfers=args.transfers,
            sync=args.sync,
            environ=dict(os.environ),
            out=sys.stdout,
            termination_log=args.termination_log,
            stats_seconds=args.stats_seconds,
            permanent_exit_code=PERMANENT_EXIT_CODE,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run `load` on its own (`python -m commands.load --source ...`)."""
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_load_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["load", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
