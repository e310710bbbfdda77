"""Loads through rclone: `rclone copy` (or `sync`) of the source, configured only by environment
(`RCLONE_CONFIG_SRC_*`, set by the Job from the PVC's credentials Secret by reference).

Around rclone this adds what a Job needs: rclone's JSON log streamed to stdout with a progress
line after each stats tick (gpu_admission.datasets.progress), and on exit a compact JSON summary
(bytes, files, duration and, on failure, the cause in plain words) written to the
termination-message file, so the controller can report it on the PVC without reading logs.
rclone's exit code is the Job's exit code, except for failures that trying again cannot fix
(PERMANENT_EXIT_CODE), which the Job's podFailurePolicy turns into an immediate failure.

A sharded load lists the source, copies only its own part of the listing (loaders.shards) and
reports the listing's fingerprint so the controller can check that every shard split the same
listing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import IO, Any

from gpu_admission.datasets.progress import from_stats, human_bytes
from gpu_admission.datasets.source import DataSource
from gpu_admission.names import LOADER_PERMANENT_EXIT_CODE
from loaders.report import RunLog, summary, token_identity, write_summary
from loaders.reuse import CloneLoad, begin, decide, finish, marker_path, resume
from loaders.shards import (
    AFRESH_MARKER,
    ListingError,
    ShardPlan,
    SourceObject,
    list_source,
    plan_shard,
    prune,
    write_file_list,
)
from loaders.source_digest import content_pin, source_digest
from loaders.sources import REMOTE, rclone_env
from loaders.space import free_bytes, shortfall, still_to_fetch
from loaders.stop import STOPPED_EXIT_CODE, Stopped, stopped_by_sigterm
from loaders.tuning import DEFAULT_TUNING, CopySettings, CopyTuning, choose
from loaders.verify import verify_sha256
from loaders.watchdog import StallWatchdog

TERMINATION_LOG = "/dev/termination-log"
LISTING_FAILED_EXIT_CODE = 1
STALLED_EXIT_CODE = 1  # transient: the Job retries
DEFAULT_STALL_SECONDS = 600.0
PERMANENT_EXIT_CODE = LOADER_PERMANENT_EXIT_CODE


def rclone_command(
    rclone: str,
    source: DataSource,
    dest: str,
    *,
    sync: bool,
    settings: CopySettings,
    stats_seconds: float = 5.0,
    files_from: str | None = None,
    fetch_all: bool = False,
    keep: str | None = None,
) -> list[str]:
    """`rclone copy` (or `sync`) of the source; with `files_from`, only the listed objects (a
    shard's part: always `copy`, since a filtered `sync` deletes nothing outside its filter).
    `fetch_all`: every object is fetched, none skipped for matching what the volume holds;
    `keep`: a filter rule of the volume's own files, neither copied nor deleted; `settings`:
    how many files and streams at once (loaders.tuning)."""
    verb = "sync" if sync and files_from is None else "copy"
    command = [
        rclone,
        verb,
        f"{REMOTE}:{source.remote_path}",
        dest,
        "--checksum",
        *settings.flags(),
        "--use-json-log",
        "--stats",
        f"{stats_seconds:g}s",
        "--stats-log-level",
        "NOTICE",
    ]
    if files_from is not None:
        command += ["--files-from-raw", files_from]
    if fetch_all:
        command.append("--ignore-times")
    if keep is not None:
        command += ["--exclude", keep]
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
    tuning: CopyTuning = DEFAULT_TUNING,
    memory_limit: int | None = None,
    rclone: str = "rclone",
    termination_log: str = TERMINATION_LOG,
    environ: MutableMapping[str, str] | None = None,
    out: IO[str] | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    stats_seconds: float = 5.0,
    sha256: str | None = None,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    clone_of: str | None = None,
    clone_digest: str | None = None,
) -> int:
    """Run rclone, stream its log to `out`, write the summary; return rclone's exit code (or
    PERMANENT_EXIT_CODE). `sha256`: a single file's expected digest, checked after the copy.
    Before copying, what is still to fetch must fit the volume (loaders.space); while copying,
    `stall_seconds` without progress ends the load (loaders.watchdog; 0: never). `clone_of`:
    the snapshot the volume is a clone of, whose load read `clone_digest` (loaders.reuse).
    How many files and streams at once is chosen from the listing within `memory_limit` bytes,
    but for what `tuning` fixes (loaders.tuning)."""
    out = out or sys.stdout
    if stall_seconds > 0:  # ticks often enough that a moving transfer is seen moving
        stats_seconds = min(stats_seconds, stall_seconds / 4)
    env = rclone_env(source, os.environ if environ is None else environ)
    log = RunLog()
    started = time.monotonic()
    interrupted = False
    shard: ShardPlan | None = None
    failure: tuple[str, bool] | None = None
    try:
        with stopped_by_sigterm():
            objects, exit_code = _listing(rclone, source, env, log, out, shard_count > 1)
    except Stopped:  # the pod is being deleted: end now, saying so
        duration = time.monotonic() - started
        result = summary(log, STOPPED_EXIT_CODE, duration, source.url, interrupted=True)
        write_summary(result, out, termination_log)
        return STOPPED_EXIT_CODE
    pin = content_pin(source, sha256)
    digest = source_digest(objects, pin) if objects is not None else None
    clone = decide(clone_of, clone_digest, digest, pinned=bool(pin))
    marker = marker_path(Path(dest), shard_index, shard_count)
    clone = resume(clone, marker, digest)
    if clone.reason:
        out.write(json.dumps({"level": "notice", "msg": clone.reason}) + "\n")
    afresh = clone.action is CloneLoad.AFRESH
    mirror = sync or afresh  # afresh: what the source no longer has goes too
    with contextlib.ExitStack() as stack:  # a scratch directory only for a shard's file list
        files_from = None
        if objects is not None and shard_count > 1:
            shard = plan_shard(objects, shard_index, shard_count)
            label = f"shard {shard.index + 1} of {shard.count}: "
            refused = (
                _too_big(shard.objects, dest, out, label, clone.fetch_all) if clone.copies else None
            )
            if refused:  # nothing more: no file list, and above all no pruning
                exit_code, failure = PERMANENT_EXIT_CODE, (refused, True)
            elif clone.copies:
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="load-"))
                files_from = str(Path(scratch) / "files")
                write_file_list(shard, Path(files_from))
                if mirror and shard.index == 0 and Path(dest).is_dir():
                    # A filtered sync deletes nothing outside its part: one shard prunes.
                    removed = prune(Path(dest), (o.path for o in objects))
                    out.write(json.dumps({"level": "notice", "msg": f"pruned {removed} files"}))
                    out.write("\n")
        elif objects is not None and clone.copies:
            refused = _too_big(objects, dest, out, "", clone.fetch_all)
            if refused:
                exit_code, failure = PERMANENT_EXIT_CODE, (refused, True)
        if exit_code is None and not clone.copies:
            exit_code = 0
        elif exit_code is None:
            settings = choose(shard.objects if shard else objects, memory_limit, tuning)
            out.write(json.dumps({"level": "notice", "msg": settings.describe()}) + "\n")
            command = rclone_command(
                rclone,
                source,
                dest,
                sync=mirror,
                settings=settings,
                stats_seconds=stats_seconds,
                files_from=files_from,
                fetch_all=clone.fetch_all,
                keep=f"/{AFRESH_MARKER}*" if afresh else None,
            )
            with contextlib.suppress(OSError):  # a volume not writable: rclone says so
                begin(clone, marker, digest)
            exit_code, interrupted, stalled = _run_rclone(
                command, env, log, out, shard, shard_count, stall_seconds
            )
            if stalled:
                exit_code, failure = STALLED_EXIT_CODE, (stalled, False)
    # Who a web identity token says the loader is, to name it if the role refused it.
    identity = token_identity(env) if exit_code else {}
    if exit_code == 0 and pin:
        problem = verify_sha256(Path(dest) / source.remote_path, pin)
        if problem:
            exit_code, failure = PERMANENT_EXIT_CODE, (problem, True)
    duration = time.monotonic() - started
    result = summary(log, exit_code, duration, source.url, interrupted, shard, identity, failure)
    if digest is not None and exit_code == 0:
        result.update(digest.summary_fields())
    if exit_code == 0 and afresh:
        finish(marker)
    if clone.action is not CloneLoad.NONE:
        result["clone"] = clone.action.value
    write_summary(result, out, termination_log)
    return PERMANENT_EXIT_CODE if result.get("permanent") else exit_code


def _too_big(
    objects: Iterable[SourceObject],
    dest: str,
    out: IO[str],
    label: str = "",
    fetch_all: bool = False,
) -> str | None:
    """Why what is still to fetch cannot fit the volume, or None; says the figures either way."""
    needed = still_to_fetch(objects, Path(dest), fetch_all)
    free = free_bytes(Path(dest))
    note = f"{label}{human_bytes(needed.bytes)} in {needed.files} files to fetch"
    note += f", {human_bytes(free)} free"
    out.write(json.dumps({"level": "notice", "msg": f"size check: {note}"}) + "\n")
    return shortfall(needed, free, label)


def _listing(
    rclone: str,
    source: DataSource,
    env: Mapping[str, str],
    log: RunLog,
    out: IO[str],
    sharded: bool,
) -> tuple[list[SourceObject] | None, int | None]:
    """(the source's listing, the exit code when the load cannot go on without it). A shard
    cannot pick its part without one; an unsharded load goes on, said in the log, without the
    size check: the copy then meets the same cause and reports it as its own."""
    try:
        return list_source(rclone, f"{REMOTE}:{source.remote_path}", env), None
    except ListingError as exc:
        if sharded:
            log.errors.append(f"listing the source failed: {exc}")
            return None, LISTING_FAILED_EXIT_CODE
        message = f"size check skipped: listing the source failed ({str(exc)[:300]})"
        out.write(json.dumps({"level": "warning", "msg": message}) + "\n")
        return None, None


def _run_rclone(
    command: list[str],
    env: Mapping[str, str],
    log: RunLog,
    out: IO[str],
    shard: ShardPlan | None,
    shards: int,
    stall_seconds: float = 0,
) -> tuple[int, bool, str | None]:
    """Run rclone to the end, forwarding SIGTERM; (exit code, whether it was interrupted, the
    stall that ended it)."""
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
        return 127, False, None

    def forward(signum: int, _frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        process.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        assert process.stdout is not None
        with StallWatchdog(stall_seconds, lambda: log.stats, process.terminate) as watchdog:
            _pump(process.stdout, log, out, shard, shards)
            exit_code = process.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    return exit_code, interrupted, watchdog.stalled
