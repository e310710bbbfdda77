"""The version a load read: one digest of the source's listing (every object's path, size and
version), with how many files and bytes it covers. The controller records it on the PVC and on
the snapshot kept of it, and a clone of that snapshot is reused only while the source still
lists to the same digest (loaders.reuse).

An object's version is what the store's listing says of it, read by `rclone lsjson --hash
--use-server-modtime` without a request per object:
- S3: the ETag (rclone gives it as the MD5 of an object uploaded in one part; a multipart one has
  none in the listing, and rclone's one HEAD gives its MD5 where the uploader stored it) and
  LastModified, which every write changes, a new version ID with it;
- GCS: the md5Hash and the modification time (the object's own, else `updated`);
- Azure Blob: the Content-MD5 and the modification time;
- HTTPS: Last-Modified (and the SHA-256 checked, where the PVC names one);
- hf://: the commit (the Hub's files at one commit never change).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_admission.datasets.digests import DIGEST_PREFIX
from gpu_admission.datasets.source import DataSource
from loaders.shards import SourceObject


@dataclass(frozen=True, slots=True)
class SourceDigest:
    digest: str  # "sha256:<64 hex>"
    files: int
    bytes: int

    def summary_fields(self) -> dict[str, int | str]:
        return {"digest": self.digest, "digestFiles": self.files, "digestBytes": self.bytes}


def source_digest(objects: Iterable[SourceObject], pinned: str = "") -> SourceDigest:
    """The digest of a listing, whatever order it came in. `pinned`: what fixes the content
    beside the listing (a hub commit, an expected SHA-256), part of the digest."""
    ordered = sorted(objects, key=lambda o: o.path)
    hasher = hashlib.sha256(f"{pinned}\n".encode())
    for obj in ordered:
        hasher.update(f"{obj.path}\0{obj.size}\0{obj.version}\n".encode())
    return SourceDigest(
        DIGEST_PREFIX + hasher.hexdigest(), len(ordered), sum(o.size for o in ordered)
    )


def content_pin(source: DataSource, sha256: str | None) -> str:
    """What fixes an rclone source's content beside its listing: the SHA-256 a single file must
    have ("" when nothing does)."""
    return sha256 if sha256 and source.single_file else ""
