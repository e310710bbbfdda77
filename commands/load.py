"""`gpu-admission load`: what a loader Job runs. A thin wrapper around `rclone copy`.

rclone is configured only by environment (`RCLONE_CONFIG_SRC_*`, set by the Job from the PVC's
credentials Secret by reference); this wrapper adds what a Job needs around it: rclone's JSON log
streamed to stdout, and on exit a compact JSON summary (bytes, files, duration and, on failure,
the cause in plain words) written to the termination-message file, so the controller can report
it on the PVC without reading logs. rclone's exit code is the Job's exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpu_admission.datasource import DataSource, DataSourceError, parse_data_source
from gpu_admission.names import DATA_MOUNT_PATH

REMOTE = "src"  # the rclone remote the Job's environment defines (RCLONE_CONFIG_SRC_*)
TERMINATION_LOG = "/dev/termination-log"
MAX_SUMMARY_BYTES = 4096
MAX_ERRORS_KEPT = 20
USAGE_EXIT_CODE = 2
RCLONE_TYPE = {"s3": "s3", "gs": "gcs"}

# rclone error text -> what happened, in words a researcher can act on. First match wins.
CAUSES: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "invalid_grant",
            "ExpiredToken",
            "InvalidToken",
            "status code 401",
            "StatusCode: 401",
            "Unauthorized",
        ),
        "the storage service rejected the credentials; check the keys in the credentials Secret",
    ),
    (
        (
            "AccessDenied",
            "Access Denied",
            "StatusCode: 403",
            "status code 403",
            "Forbidden",
            "does not have storage.objects",
        ),
        "access denied: these credentials (or anonymous access) may not read the source; "
        "grant read access or name a credentials Secret that has it",
    ),
    (
        (
            "NoSuchBucket",
            "bucket does not exist",
            "directory not found",
            "notFound",
            "StatusCode: 404",
            "status code 404",
        ),
        "the source was not found: the bucket or prefix does not exist; check the data source",
    ),
    (
        (
            "no such host",
            "connection refused",
            "i/o timeout",
            "network is unreachable",
            "TLS handshake timeout",
            "context deadline exceeded",
        ),
        "the storage endpoint could not be reached; check the endpoint and the network",
    ),
    (
        ("no space left on device", "disk quota exceeded"),
        "the volume is full; request more storage for the PVC",
    ),
    (
        ("permission denied", "read-only file system"),
        "the loader cannot write to the volume; check the volume's permissions",
    ),
)


@dataclass
class RunLog:
    """What the wrapper keeps from rclone's JSON log while streaming it."""

    stats: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def take(self, line: str) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.strip():  # rclone prints plain text only for usage and panics
                self._error(line.strip())
            return
        if not isinstance(entry, dict):
            return
        if isinstance(entry.get("stats"), dict):
            self.stats = entry["stats"]
        if entry.get("level") in ("error", "critical", "fatal"):
            self._error(str(entry.get("msg", "")).strip())

    def _error(self, text: str) -> None:
        if text and len(self.errors) < MAX_ERRORS_KEPT and text not in self.errors:
            self.errors.append(text)


def plain_cause(errors: Iterable[str], exit_code: int) -> str:
    """The failure in plain words, with rclone's own first error line after it."""
    errors = list(errors)
    text = "\n".join(errors)
    detail = errors[0] if errors else f"rclone exited with code {exit_code}"
    for needles, words in CAUSES:
        if any(needle in text for needle in needles):
            return f"{words} (rclone: {detail})"
    return f"the copy failed (rclone: {detail})"


def summary(
    log: RunLog, exit_code: int, duration: float, source: str, interrupted: bool = False
) -> dict[str, Any]:
    stats = log.stats
    result: dict[str, Any] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "source": source,
        "bytes": int(stats.get("bytes", 0) or 0),
        "files": int(stats.get("transfers", 0) or 0),
        "checks": int(stats.get("checks", 0) or 0),
        "durationSeconds": round(duration, 3),
        "exitCode": exit_code,
    }
    if exit_code != 0:
        result["cause"] = (
            "the loader was stopped before the copy finished"
            if interrupted
            else plain_cause(log.errors, exit_code)
        )
    return result


def encode_summary(result: Mapping[str, Any]) -> bytes:
    """Compact JSON within the kubelet's 4 KiB termination-message limit (the cause is cut)."""
    data = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) <= MAX_SUMMARY_BYTES:
        return data
    trimmed = dict(result)
    cause = str(trimmed.get("cause", ""))
    overflow = len(data) - MAX_SUMMARY_BYTES + 3
    trimmed["cause"] = (
        cause.encode()[: max(0, len(cause.encode()) - overflow)].decode(errors="ignore") + "..."
    )
    return json.dumps(trimmed, separators=(",", ":"), ensure_ascii=False).encode()


def rclone_env(source: DataSource, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment rclone runs with: the Job's, plus the remote's type and, for S3, the
    provider (AWS, or a generic S3-compatible one with path-style access when the credentials
    Secret names an endpoint: the Job cannot know whether the optional key exists)."""
    env = dict(environ)
    prefix = f"RCLONE_CONFIG_{REMOTE.upper()}_"
    env.setdefault(prefix + "TYPE", RCLONE_TYPE[source.scheme])
    if source.scheme == "s3" and not env.get(prefix + "PROVIDER"):
        endpoint = env.get(prefix + "ENDPOINT") or env.get("RCLONE_S3_ENDPOINT")
        env[prefix + "PROVIDER"] = "Other" if endpoint else "AWS"
    # An empty value from an optional secretKeyRef means "not set", not "set to empty".
    return {k: v for k, v in env.items() if not (k.startswith(prefix) and v == "")}


def rclone_command(
    rclone: str, source: DataSource, dest: str, *, sync: bool, transfers: int, checkers: int
) -> list[str]:
    return [
        rclone,
        "sync" if sync else "copy",
        f"{REMOTE}:{source.remote_path}",
        dest,
        "--checksum",
        "--transfers",
        str(transfers),
        "--checkers",
        str(checkers),
        "--use-json-log",
        "--stats",
        "5s",
        "--stats-log-level",
        "NOTICE",
    ]


def _pump(stream: IO[str], log: RunLog, out: IO[str]) -> None:
    for line in stream:
        out.write(line)
        out.flush()
        log.take(line)


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
) -> int:
    """Run rclone, stream its log to `out`, write the summary; return rclone's exit code."""
    out = out or sys.stdout
    command = rclone_command(
        rclone, source, dest, sync=sync, transfers=transfers, checkers=checkers
    )
    log = RunLog()
    started = time.monotonic()
    interrupted = False
    try:
        process = subprocess.Popen(
            command,
            env=rclone_env(source, os.environ if environ is None else environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # rclone logs to stderr; one ordered stream
            text=True,
            errors="replace",
        )
    except OSError as exc:
        log.errors.append(f"cannot start {rclone}: {exc.strerror}")
        exit_code = 127
    else:

        def forward(signum: int, _frame: Any) -> None:
            nonlocal interrupted
            interrupted = True
            process.send_signal(signum)

        previous = signal.signal(signal.SIGTERM, forward)
        try:
            assert process.stdout is not None
            _pump(process.stdout, log, out)
            exit_code = process.wait()
        finally:
            signal.signal(signal.SIGTERM, previous)
    result = summary(log, exit_code, time.monotonic() - started, source.url, interrupted)
    out.write(json.dumps({"level": "notice", "msg": "load finished", "summary": result}) + "\n")
    out.flush()
    try:
        Path(termination_log).write_bytes(encode_summary(result))
    except OSError as exc:
        print(f"cannot write the termination message to {termination_log}: {exc}", file=sys.stderr)
    return exit_code


def add_load_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `load` on the CLI's sub-command parsers; the handler is in `args.func`."""
    parser = subparsers.add_parser(
        "load",
        help="copy a dataset from s3:// or gs:// into a directory (run by loader Jobs)",
        description="Copy a data source into a directory with rclone, configured by the "
        "RCLONE_CONFIG_SRC_* environment; write a JSON summary to the termination log.",
    )
    parser.add_argument(
        "--source", required=True, help="s3://bucket[/prefix] or gs://bucket[/prefix]"
    )
    parser.add_argument("--dest", default=DATA_MOUNT_PATH, help="directory to copy into")
    parser.add_argument(
        "--sync", action="store_true", help="mirror the source: delete files it does not have"
    )
    parser.add_argument("--transfers", type=int, default=8)
    parser.add_argument("--checkers", type=int, default=16)
    parser.add_argument("--rclone", default="rclone", help="the rclone executable")
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    parser.set_defaults(func=main_load)
    return parser


def main_load(args: argparse.Namespace) -> int:
    try:
        source = parse_data_source(args.source)
    except DataSourceError as exc:
        print(f"gpu-admission load: {exc}", file=sys.stderr)
        return USAGE_EXIT_CODE
    return run_load(
        source,
        args.dest,
        sync=args.sync,
        transfers=args.transfers,
        checkers=args.checkers,
        rclone=args.rclone,
        termination_log=args.termination_log,
    )


def main(argv: list[str] | None = None) -> int:
    """Run `load` on its own (`python -m commands.load --source ...`)."""
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_load_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["load", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
