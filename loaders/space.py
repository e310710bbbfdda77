"""Whether a load fits its volume, decided before anything is written.

What counts is what is still to fetch: objects of the listing that the volume does not already
hold at the same size (a retry keeps what an earlier attempt copied; a refresh of a cloned
snapshot holds most of it already). rclone's `--checksum` copy skips exactly those, so the size
test here is the same one it makes, less the checksum. The margin covers what the copy needs
beside the data: 1 % of it plus 256 KiB (directory blocks; rclone writes each file under a
temporary name and renames it, so no file is held twice). The room is the volume's free space
as a non-root writer sees it (statvfs `f_bavail`), read from the mount the loader writes to.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpu_admission.datasets.progress import human_bytes
from loaders.shards import SourceObject

MARGIN_FRACTION = 0.01
MARGIN_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Needed:
    bytes: int  # still to fetch
    files: int
    source_bytes: int  # the whole listing, for the message
    room: int = -1  # the free space the fetch takes (-1: `bytes`)

    @property
    def space(self) -> int:
        return self.bytes if self.room < 0 else self.room


def still_to_fetch(objects: Iterable[SourceObject], dest: Path, fetch_all: bool = False) -> Needed:
    """The objects the volume does not hold yet at their listed size. `fetch_all` (a load
    afresh over a clone): every object is fetched again, and each replaces the file of its name,
    so the room it takes is only what it adds to the file it replaces."""
    needed = files = total = room = 0
    for item in objects:
        total += item.size
        try:
            held = (dest / item.path).stat().st_size
        except OSError:
            held = -1  # absent (or unreadable): to fetch
        if fetch_all:
            room += max(0, item.size - max(held, 0))
        elif held == item.size:
            continue
        needed += item.size
        files += 1
    return Needed(needed, files, total, room if fetch_all else -1)


def free_bytes(dest: Path) -> int:
    """Free space of the filesystem `dest` is on, as an unprivileged writer may use it."""
    stats = os.statvfs(dest if dest.exists() else dest.parent)
    return stats.f_bavail * stats.f_frsize


def with_margin(size: int) -> int:
    return size + int(size * MARGIN_FRACTION) + MARGIN_BYTES


def shortfall(needed: Needed, free: int, shard: str = "") -> str | None:
    """The refusal when `needed` does not fit in `free` bytes (None when it fits): both figures
    and what to do. `shard` names a shard's part ("shard 2 of 4: ")."""
    if with_margin(needed.space) <= free:
        return None
    held = human_bytes(needed.bytes)
    if needed.bytes < needed.source_bytes:
        held += f" still to fetch (of {human_bytes(needed.source_bytes)})"
    return (
        f"{shard}the source holds {held}; the volume has {human_bytes(free)} free: request a "
        "larger PVC (the copy needs the data plus 1 % and 256 KiB)"
    )
