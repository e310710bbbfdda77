"""How many files and streams a load keeps in flight, chosen from the listing the loader already
made, within the loader container's memory limit.

rclone's defaults suit a desktop, not a data-centre link to an object store: 4 to 8 files in
flight (a 100 KiB object is bound by the store's first-byte latency, so 8 transfers at 20 ms reach
400 files/s at most), 4 ranged streams per large file (a per-connection cap of 64 MiB/s holds a
1 GiB file to 256 MiB/s), a 16 MiB read-ahead per transfer. Measured against s5cmd on a fast S3
server (`python -m bench.loader_limit`, docs/performance.md):

- many small files: 64 files in flight (and as many checkers feeding them) is where rclone's own
  CPU per file becomes the limit; more adds nothing but memory;
- large files: about 16 ranged connections in all (with 4, a 1 GiB file capped at 64 MiB/s
  per connection came at 138 MiB/s; with 16, at 250), split over the files in flight, each
  stream with at least four chunks so none sits idle while the last chunk of a file drains;
- `--fast-list`: one recursive listing (a request per 1,000 objects) instead of a request per
  directory, as the loader's own listing already does.

The configuration's overrides (datasets.transfers, checkers, multi_thread_streams) win over every
choice made here. What is never chosen here: `--checksum` comparisons and the verification of each
downloaded file against the store's MD5 (`verify`; turning it off is the user's call).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_admission.datasets.progress import human_bytes
from loaders.shards import SourceObject

MIB = 1024 * 1024
SMALL_FILE_TRANSFERS = 64  # files in flight when the load is mostly small files
LARGE_FILE_CONNECTIONS = 16  # ranged GETs in flight over the large files
LARGE_FILES_AT_ONCE = 4  # large files in flight; their streams share the connections
MULTI_THREAD_CUTOFF = 64 * MIB  # from this size a file is fetched in ranges (s5cmd: 50 MiB parts)
MIN_CHUNK, MAX_CHUNK = 8 * MIB, 64 * MIB
CHUNKS_PER_STREAM = 4
MAX_BUFFER = 16 * MIB  # rclone's default read-ahead per transfer
MIN_BUFFER = 1 * MIB  # rclone's read-ahead works in 1 MiB blocks
BUFFER_SHARE = 0.5  # of the memory limit, for the read-ahead of all transfers together
UNLISTED_TRANSFERS = 16  # when the listing failed: a middle way, sizes unknown
RCLONE_DEFAULT_STREAMS = 4
HUB_WORKERS = 32  # huggingface_hub's download threads at most: Python threads, one GIL


@dataclass(frozen=True)
class CopyTuning:
    """What the configuration fixes; None: chosen from the listing."""

    transfers: int | None = None
    checkers: int | None = None
    multi_thread_streams: int | None = None
    fast_list: bool = True
    verify: bool = True  # check each file's MD5 against the store's after the copy


DEFAULT_TUNING = CopyTuning()


@dataclass(frozen=True)
class CopySettings:
    transfers: int
    checkers: int
    multi_thread_streams: int
    multi_thread_cutoff: int
    multi_thread_chunk_size: int
    buffer_size: int
    fast_list: bool
    verify: bool
    why: str  # what the choice was made from, for the log

    def flags(self) -> list[str]:
        flags = [
            "--transfers",
            str(self.transfers),
            "--checkers",
            str(self.checkers),
            "--multi-thread-streams",
            str(self.multi_thread_streams),
            "--multi-thread-cutoff",
            _size(self.multi_thread_cutoff),
            "--multi-thread-chunk-size",
            _size(self.multi_thread_chunk_size),
            "--buffer-size",
            _size(self.buffer_size),
        ]
        if self.fast_list:
            flags.append("--fast-list")
        if not self.verify:
            flags.append("--ignore-checksum")
        return flags

    def describe(self) -> str:
        return f"copy settings: {' '.join(self.flags())} ({self.why})"


def _size(size: int) -> str:
    """A size as rclone's SizeSuffix reads it (binary units)."""
    return f"{size // MIB}Mi" if size % MIB == 0 else str(size)


def _power_of_two_at_least(value: float) -> int:
    power = 1
    while power < value:
        power *= 2
    return power


def choose(
    objects: Sequence[SourceObject] | None,
    memory_limit: int | None,
    tuning: CopyTuning = DEFAULT_TUNING,
) -> CopySettings:
    """The settings for copying `objects` (a load's, or its shard's, part of the listing; None
    when the source could not be listed) within `memory_limit` bytes (None: unknown)."""
    if objects is None:
        transfers, streams, largest = UNLISTED_TRANSFERS, RCLONE_DEFAULT_STREAMS, 0
        why = "the listing failed: sizes unknown"
    else:
        large = [o.size for o in objects if o.size >= MULTI_THREAD_CUTOFF]
        small = len(objects) - len(large)
        largest = max(large, default=0)
        if small >= len(large):  # mostly small files: latency-bound, many in flight
            transfers = max(1, min(SMALL_FILE_TRANSFERS, small))
            at_once = min(len(large), transfers)
        else:  # mostly large files: a few at once, each in several ranges
            transfers = at_once = min(LARGE_FILES_AT_ONCE, len(large))
        streams = RCLONE_DEFAULT_STREAMS  # none is large: rclone's own, never used
        if at_once:
            streams = max(RCLONE_DEFAULT_STREAMS, LARGE_FILE_CONNECTIONS // at_once)
        sizes = [o.size for o in objects]
        median = human_bytes(int(statistics.median(sizes))) if sizes else "-"
        why = f"{len(objects)} files, {len(large)} of them from {human_bytes(MULTI_THREAD_CUTOFF)}"
        why += f", median {median}"
    transfers = tuning.transfers or transfers
    streams = tuning.multi_thread_streams or streams
    checkers = tuning.checkers or max(16, transfers)
    # Each stream fetches at least CHUNKS_PER_STREAM chunks of the largest file.
    chunk = _power_of_two_at_least(largest / (streams * CHUNKS_PER_STREAM)) if largest else 0
    chunk = min(MAX_CHUNK, max(MIN_CHUNK, chunk))
    buffer = MAX_BUFFER
    if memory_limit:  # every transfer's read-ahead full at once must stay within its share
        share = int(memory_limit * BUFFER_SHARE) // transfers
        buffer = max(MIN_BUFFER, min(MAX_BUFFER, share // MIB * MIB))
        why += f"; memory limit {human_bytes(memory_limit)}"
    return CopySettings(
        transfers=transfers,
        checkers=checkers,
        multi_thread_streams=streams,
        multi_thread_cutoff=MULTI_THREAD_CUTOFF,
        multi_thread_chunk_size=chunk,
        buffer_size=buffer,
        fast_list=tuning.fast_list,
        verify=tuning.verify,
        why=why,
    )


def hub_workers(objects: Sequence[SourceObject], tuning: CopyTuning = DEFAULT_TUNING) -> int:
    """huggingface_hub's download threads (a file each) for a hub load's part: as many files at
    once as rclone would fetch, at most HUB_WORKERS."""
    if tuning.transfers:
        return tuning.transfers
    return max(1, min(HUB_WORKERS, choose(objects, None).transfers))
