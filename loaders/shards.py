"""Sharded loads: which objects of the source one index of an Indexed loader Job copies.

Every shard lists the source itself (`rclone lsjson`) and runs the same pure partition over the
listing, so the shards agree without talking to each other: every object lands in exactly one
shard. The partition balances bytes plus a per-object cost (small objects cost requests, not
bandwidth): objects are taken largest first and each goes to the shard with the least work so
far, ties to the lower index (greedy longest-processing-time). One huge object next to many small
ones thus gets a shard to itself while the small ones spread over the others; inside its shard
rclone's multi-thread download still splits the huge one into ranges.

The listing's fingerprint goes into each shard's summary: shards that listed a source which
changed between their listings may have split it differently, and the controller compares the
fingerprints before it calls the load a success.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What one object costs beyond its bytes, in byte-equivalents: a request round trip is worth
# roughly this much transfer on a data-centre link.
PER_OBJECT_COST = 256 * 1024
# rclone's local backend writes into "<name>.<random>.partial" and renames when done.
PARTIAL_SUFFIX = ".partial"
# A load afresh's own marker at the volume's root (loaders.reuse): never pruned.
AFRESH_MARKER = ".gpu-admission-afresh"


class ListingError(Exception):
    """The source could not be listed; the message is rclone's own error output."""


@dataclass(frozen=True, slots=True)
class SourceObject:
    path: str  # relative to the source's prefix, as rclone copies it
    size: int
    version: str = ""  # what the listing says of this version of it (loaders.source_digest)


@dataclass(frozen=True, slots=True)
class ShardPlan:
    index: int
    count: int
    objects: tuple[SourceObject, ...]  # this shard's part, sorted by path
    listed_objects: int  # in the whole source
    listed_bytes: int
    fingerprint: str  # of the whole listing

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def summary_fields(self) -> dict[str, int | str]:
        """What a shard's summary says of its part and of the listing it split."""
        return {
            "shard": self.index,
            "shards": self.count,
            "plannedFiles": len(self.objects),
            "plannedBytes": self.bytes,
            "listedFiles": self.listed_objects,
            "listedBytes": self.listed_bytes,
            "listing": self.fingerprint,
        }


def parse_listing(text: str) -> list[SourceObject]:
    """`rclone lsjson -R --files-only` output -> objects (directories and markers skipped)."""
    entries = json.loads(text or "[]")
    if not isinstance(entries, list):
        raise ListingError("rclone lsjson did not return a list")
    objects = [
        SourceObject(str(e["Path"]), max(int(e.get("Size") or 0), 0), _version(e))
        for e in entries
        if isinstance(e, dict) and not e.get("IsDir") and e.get("Path")
    ]
    return sorted(objects, key=lambda o: o.path)


def _version(entry: dict[str, Any]) -> str:
    """An object's version as the listing gives it: its MD5 (an S3 ETag of one part) where the
    store has one, and the server's modification time."""
    hashes = entry.get("Hashes")
    md5 = hashes.get("md5", "") if isinstance(hashes, dict) else ""
    return f"{md5}|{entry.get('ModTime') or ''}"


def fingerprint(objects: Iterable[SourceObject]) -> str:
    digest = hashlib.sha256()
    for obj in sorted(objects, key=lambda o: o.path):
        digest.update(f"{obj.path}\0{obj.size}\n".encode())
    return digest.hexdigest()[:16]


def partition(objects: Sequence[SourceObject], count: int) -> list[list[SourceObject]]:
    """Split `objects` into `count` disjoint parts with balanced work. Pure and deterministic:
    the same listing always gives the same parts, whatever order it came in."""
    if count < 1:
        raise ValueError("the shard count must be at least 1")
    parts: list[list[SourceObject]] = [[] for _ in range(count)]
    load = [0] * count
    for obj in sorted(objects, key=lambda o: (-o.size, o.path)):
        target = min(range(count), key=lambda i: (load[i], i))
        parts[target].append(obj)
        load[target] += obj.size + PER_OBJECT_COST
    return [sorted(part, key=lambda o: o.path) for part in parts]


def plan_shard(objects: Sequence[SourceObject], index: int, count: int) -> ShardPlan:
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return ShardPlan(
        index=index,
        count=count,
        objects=tuple(partition(objects, count)[index]),
        listed_objects=len(objects),
        listed_bytes=sum(o.size for o in objects),
        fingerprint=fingerprint(objects),
    )


def list_source(
    rclone: str, remote_path: str, env: Mapping[str, str], timeout: float | None = None
) -> list[SourceObject]:
    """List every object under the source with rclone: sizes, and the versions the listing
    itself gives. `--use-server-modtime`: the object's own modification time (metadata) would
    cost a HEAD per object on S3; LastModified comes with the listing. `--hash`: free where the
    listing has it (an S3 ETag of one part, a GCS md5Hash, an Azure Content-MD5); rclone makes
    one HEAD per multipart S3 object for it."""
    command = [
        rclone,
        "lsjson",
        remote_path,
        "--recursive",
        "--files-only",
        "--use-server-modtime",
        "--hash",
        "--hash-type",
        "md5",
        "--no-mimetype",
        "--fast-list",
    ]
    try:
        done = subprocess.run(
            command, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
        )
    except OSError as exc:
        raise ListingError(f"cannot start {rclone}: {exc.strerror}") from exc
    if done.returncode != 0:
        raise ListingError(done.stderr.strip() or f"rclone lsjson exited with {done.returncode}")
    try:
        return parse_listing(done.stdout)
    except (ValueError, KeyError, TypeError) as exc:
        raise ListingError(f"cannot read rclone's listing: {exc}") from exc


def write_file_list(plan: ShardPlan, path: Path) -> None:
    """The shard's objects for `rclone --files-from-raw` (one path per line, taken as is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{o.path}\n" for o in plan.objects))


def prune(dest: Path, keep: Iterable[str]) -> int:
    """Delete files under `dest` that the source does not have (what `rclone sync` does for an
    unsharded load); another shard's in-flight `.partial` files are left alone. Returns how many
    files were deleted."""
    wanted = set(keep)
    removed = 0
    for root, _dirs, files in os.walk(dest):
        for name in files:
            path = Path(root) / name
            relative = path.relative_to(dest).as_posix()
            if relative in wanted or name.endswith(PARTIAL_SUFFIX):
                continue
            if root == str(dest) and name.startswith(AFRESH_MARKER):
                continue
            path.unlink(missing_ok=True)
            removed += 1
    return removed
