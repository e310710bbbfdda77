"""`gpu-admission load`: what a loader Job runs. The command line; the loads themselves are in
loaders/ (rclone for object stores and the web, huggingface_hub for hf://).

A sharded load (`--shard-count N`) takes its index from the flags or from the Indexed Job's
JOB_COMPLETION_INDEX.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from gpu_admission.datasets.source import DataSource, DataSourceError, parse_data_source
from gpu_admission.names import DATA_MOUNT_PATH, LOADER_MEMORY_LIMIT_ENV
from loaders.digest_only import run_digest_only
from loaders.hub import run_hub_load
from loaders.rclone import DEFAULT_STALL_SECONDS, PERMANENT_EXIT_CODE, TERMINATION_LOG, run_load
from loaders.stop import stopped_by_sigterm
from loaders.tuning import CopyTuning

USAGE_EXIT_CODE = 2
INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by the Job controller in every Indexed Job pod


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
    parser.add_argument(
        "--transfers",
        type=_positive,
        default=None,
        help="files copied at once (default: chosen from the listing, loaders.tuning)",
    )
    parser.add_argument(
        "--checkers",
        type=_positive,
        default=None,
        help="rclone's comparisons at once (default: as many as transfers, at least 16)",
    )
    parser.add_argument(
        "--multi-thread-streams",
        type=_positive,
        default=None,
        help="ranged streams per large file (default: chosen from the listing)",
    )
    parser.add_argument(
        "--no-fast-list",
        dest="fast_list",
        action="store_false",
        help="list the source directory by directory (rclone sources)",
    )
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="do not check each copied file against the store's MD5 (rclone sources)",
    )
    parser.add_argument(
        "--memory-limit",
        type=_positive,
        default=None,
        help=f"the container's memory limit in bytes, which the read-ahead buffers stay within "
        f"(default: ${LOADER_MEMORY_LIMIT_ENV}, set by the loader Job from its own limit)",
    )
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
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=DEFAULT_STALL_SECONDS,
        help="give up when no data arrives (and nothing is listed or checked) for this many "
        "seconds; 0: never (rclone sources)",
    )
    parser.add_argument(
        "--clone-of",
        default=None,
        help="the VolumeSnapshot the destination was cloned from: it is reused when the source "
        "still lists to --clone-digest, else loaded afresh (rclone sources)",
    )
    parser.add_argument(
        "--clone-digest",
        default=None,
        help="the digest (sha256:...) of the source as that snapshot's load read it",
    )
    parser.add_argument(
        "--digest-only",
        action="store_true",
        help="copy nothing: list the source and write the digest a load would record now",
    )
    parser.add_argument("--rclone", default="rclone", help="the rclone executable")
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    parser.set_defaults(func=main_load)
    return parser


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def memory_limit_of(args: argparse.Namespace, environ: Mapping[str, str]) -> int | None:
    """The flag's, else the Job's (a resourceFieldRef: whole bytes); None if neither says."""
    if args.memory_limit is not None:
        return int(args.memory_limit)
    raw = environ.get(LOADER_MEMORY_LIMIT_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def tuning_of(args: argparse.Namespace) -> CopyTuning:
    return CopyTuning(
        transfers=args.transfers,
        checkers=args.checkers,
        multi_thread_streams=args.multi_thread_streams,
        fast_list=args.fast_list,
        verify=args.verify,
    )


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
    if args.stall_timeout < 0:
        print("gpu-admission load: --stall-timeout must be 0 (never) or more", file=sys.stderr)
        return USAGE_EXIT_CODE
    if args.digest_only:
        return run_digest_only(
            source,
            environ=dict(os.environ),
            out=sys.stdout,
            termination_log=args.termination_log,
            permanent_exit_code=PERMANENT_EXIT_CODE,
            rclone=args.rclone,
            sha256=args.sha256,
            include=args.include,
        )
    if source.scheme == "hf":
        return run_hub(source, args, index, count)
    if args.include:
        print("gpu-admission load: --include applies to hf:// sources only", file=sys.stderr)
        return USAGE_EXIT_CODE
    return run_load(
        source,
        args.dest,
        sync=args.sync,
        tuning=tuning_of(args),
        memory_limit=memory_limit_of(args, os.environ),
        rclone=args.rclone,
        termination_log=args.termination_log,
        shard_index=index,
        shard_count=count,
        stats_seconds=args.stats_seconds,
        sha256=args.sha256,
        stall_seconds=args.stall_timeout,
        clone_of=args.clone_of,
        clone_digest=args.clone_digest,
    )


def run_hub(source: DataSource, args: argparse.Namespace, index: int, count: int) -> int:
    """An hf:// load, in this process with huggingface_hub; SIGTERM stops it with a summary."""

    with stopped_by_sigterm():
        return run_hub_load(
            source,
            args.dest,
            include=args.include,
            shard_index=index,
            shard_count=count,
            tuning=tuning_of(args),
            sync=args.sync,
            environ=dict(os.environ),
            out=sys.stdout,
            termination_log=args.termination_log,
            stats_seconds=args.stats_seconds,
            permanent_exit_code=PERMANENT_EXIT_CODE,
        )


def main(argv: list[str] | None = None) -> int:
    """Run `load` on its own (`python -m commands.load --source ...`)."""
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_load_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["load", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
