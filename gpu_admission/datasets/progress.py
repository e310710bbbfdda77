"""How far a load has got: the line the loader prints and the controller reads from its log.

The loader (`gpu-admission load`) prints one JSON line per rclone stats tick:

    {"level": "notice", "msg": "progress", "progress": {"bytesDone": ..., "bytesTotal": ..., ...}}

The controller reads the tail of each running loader pod's log (`pods/log`, tailLines) and sums
the shards. Both sides use this module, so the format has one definition.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

PROGRESS_MSG = "progress"
_UNITS = ("B", "Ki", "Mi", "Gi", "Ti", "Pi")


@dataclass(frozen=True, slots=True)
class Progress:
    """One loader pod's progress; the field names are the JSON keys of its log line."""

    bytesDone: int = 0
    bytesTotal: int = 0
    filesDone: int = 0
    filesTotal: int = 0
    speed: float = 0.0  # bytes per second, rclone's running average
    shard: int = 0
    shards: int = 1
    listedBytes: int = 0  # a sharded load's whole source (0: not known)
    listedFiles: int = 0

    def line(self) -> str:
        return json.dumps({"level": "notice", "msg": PROGRESS_MSG, "progress": asdict(self)})


def from_stats(
    stats: Mapping[str, Any],
    shard: int = 0,
    shards: int = 1,
    planned_files: int | None = None,
    planned_bytes: int | None = None,
    listed: tuple[int, int] = (0, 0),
) -> Progress:
    """A progress record from rclone's `stats` object. rclone's totals grow while it is still
    discovering what to copy; a sharded load knows its totals from its listing up front."""
    done_bytes = _int(stats.get("bytes"))
    done_files = _int(stats.get("transfers")) + _int(stats.get("checks"))
    total_bytes = max(_int(stats.get("totalBytes")), done_bytes)
    total_files = max(
        _int(stats.get("totalTransfers")) + _int(stats.get("totalChecks")), done_files
    )
    if planned_bytes is not None:
        total_bytes = max(planned_bytes, done_bytes)
    if planned_files is not None:
        total_files = max(planned_files, done_files)
    speed = stats.get("speed")
    return Progress(
        bytesDone=done_bytes,
        bytesTotal=total_bytes,
        filesDone=done_files,
        filesTotal=total_files,
        speed=round(float(speed), 1) if isinstance(speed, int | float) and speed > 0 else 0.0,
        shard=shard,
        shards=shards,
        listedBytes=listed[0],
        listedFiles=listed[1],
    )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def last_progress(log_lines: Iterable[str]) -> Progress | None:
    """The newest progress record among these log lines (None when there is none yet)."""
    found: Progress | None = None
    for line in log_lines:
        if f'"{PROGRESS_MSG}"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut by limitBytes
        fields = entry.get("progress") if isinstance(entry, dict) else None
        if entry.get("msg") == PROGRESS_MSG and isinstance(fields, dict) and "bytesDone" in fields:
            known = {k: v for k, v in fields.items() if k in Progress.__slots__}
            try:
                found = Progress(**known)
            except TypeError:
                continue
    return found


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """A whole load's progress: the shards' records summed."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    speed: float
    shards: int
    shards_done: int

    @property
    def percent(self) -> int:
        if self.bytes_total <= 0:
            return 0
        return min(100, math.floor(100 * self.bytes_done / self.bytes_total))

    @property
    def eta_seconds(self) -> int | None:
        left = self.bytes_total - self.bytes_done
        if left <= 0:
            return 0
        return math.ceil(left / self.speed) if self.speed > 0 else None

    def message(self) -> str:
        """For people: the condition message and the annotation."""
        text = (
            f"{human_bytes(self.bytes_done)} of {human_bytes(self.bytes_total)} "
            f"({self.percent}%), {self.files_done} of {self.files_total} files"
        )
        if self.shards > 1:
            text += f", {self.shards_done} of {self.shards} shards done"
        eta = self.eta_seconds
        if self.speed > 0:
            text += f", {human_bytes(int(self.speed))}/s"
        if eta is not None:
            text += f", about {human_duration(eta)} left"
        return text

    def label(self) -> str:
        """For `kubectl get pvc -L`: a label value (at most 63 characters of [A-Za-z0-9_.-],
        starting and ending alphanumeric), e.g. `37pct_1.2Gi-of-3.3Gi_eta-12m`."""
        text = (
            f"{self.percent}pct_{human_bytes(self.bytes_done, sep='')}-of-"
            f"{human_bytes(self.bytes_total, sep='')}"
        )
        eta = self.eta_seconds
        if eta is not None:
            text += f"_eta-{human_duration(eta).replace(' ', '')}"
        if self.shards > 1:
            text += f"_{self.shards_done}of{self.shards}-shards"
        return text[:63].rstrip("_.-")


def combine(records: Iterable[Progress], shards: int, shards_done: int) -> LoadProgress:
    """The shards' records summed; the totals are the whole source's once any shard has listed
    it (shards not started yet have no record of their own)."""
    records = list(records)
    done_bytes = sum(r.bytesDone for r in records)
    done_files = sum(r.filesDone for r in records)
    listed_bytes = max((r.listedBytes for r in records), default=0)
    listed_files = max((r.listedFiles for r in records), default=0)
    return LoadProgress(
        bytes_done=done_bytes,
        bytes_total=max(sum(r.bytesTotal for r in records), listed_bytes, done_bytes),
        files_done=done_files,
        files_total=max(sum(r.filesTotal for r in records), listed_files, done_files),
        speed=sum(r.speed for r in records),
        shards=shards,
        shards_done=shards_done,
    )


def human_bytes(count: int, sep: str = " ") -> str:
    """1536 -> "1.5 KiB"; with sep="" -> "1.5Ki" (label-safe)."""
    value = float(max(count, 0))
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            break
        value /= 1024
    number = f"{value:.0f}" if unit == "B" or value >= 100 else f"{value:.1f}"
    if sep:
        return f"{number} {unit if unit == 'B' else unit + 'B'}"
    return f"{number}{unit}"


def human_duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)}m"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m"
