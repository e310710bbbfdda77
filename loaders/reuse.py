"""What a load into a clone of a dataset snapshot does: reuse it, refresh it, or load afresh.

Admission clones a new dataset PVC from the newest snapshot of the same source and records the
digest that snapshot's load read (loaders.source_digest). Its loader lists the source first, as
every load does, and then:
- reuses the clone, copying nothing, when the source lists to that same digest;
- refreshes it (copies what differs, as any load does) when the content is pinned beside the
  listing: an HTTPS file with the SHA-256 it must have, checked after the copy;
- otherwise loads afresh, as if the clone held nothing: every object is fetched again, and
  whatever the source no longer has is deleted. That is the case when the digest differs (an
  object changed, even to one of the same size), when the snapshot recorded none, and when the
  source could not be listed.

A load afresh that fails part-way is retried by its Job; the retry must not fetch again what
the first attempt already fetched anew. So a load afresh first leaves a marker file at the
volume's root naming the digest it loads (one per shard), and an attempt that finds the marker
of the same digest goes on as an ordinary load (copies what is missing or differs). The marker
is never copied from or pruned by a load, and goes when the load succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from gpu_admission.datasets.digests import short_digest as short
from loaders.shards import AFRESH_MARKER
from loaders.source_digest import SourceDigest


class CloneLoad(Enum):
    NONE = "none"  # not a clone: an ordinary load
    REUSED = "reused"
    REFRESHED = "refreshed"
    AFRESH = "afresh"


@dataclass(frozen=True, slots=True)
class CloneDecision:
    action: CloneLoad
    reason: str  # in words, for the log and the PVC
    resumed: bool = False  # a load afresh that an earlier attempt began

    @property
    def copies(self) -> bool:
        return self.action is not CloneLoad.REUSED

    @property
    def fetch_all(self) -> bool:
        return self.action is CloneLoad.AFRESH and not self.resumed


def decide(
    clone_of: str | None, expected: str | None, now: SourceDigest | None, pinned: bool
) -> CloneDecision:
    """`clone_of`: the snapshot the volume was cloned from (None: not a clone); `expected`: the
    digest its load recorded; `now`: the source's digest now (None: it could not be listed);
    `pinned`: the content is fixed beside the listing."""
    if not clone_of:
        return CloneDecision(CloneLoad.NONE, "")
    if now is not None and expected and now.digest == expected:
        return CloneDecision(
            CloneLoad.REUSED,
            f"the source lists as it did when VolumeSnapshot {clone_of} was taken (digest "
            f"{short(now.digest)}): nothing to copy",
        )
    if pinned:
        return CloneDecision(
            CloneLoad.REFRESHED,
            f"the content is pinned by its SHA-256: the clone of VolumeSnapshot {clone_of} is "
            "refreshed and checked",
        )
    if now is None:
        why = "the source could not be listed to compare it"
    elif not expected:
        why = f"VolumeSnapshot {clone_of} recorded no digest of what it holds"
    else:
        why = (
            f"the source changed since VolumeSnapshot {clone_of} was taken (digest "
            f"{short(expected)} then, {short(now.digest)} now)"
        )
    return CloneDecision(CloneLoad.AFRESH, f"{why}: loading afresh")


def marker_path(dest: Path, shard_index: int, shard_count: int) -> Path:
    return dest / (AFRESH_MARKER if shard_count == 1 else f"{AFRESH_MARKER}-{shard_index}")


def resume(decision: CloneDecision, marker: Path, digest: SourceDigest | None) -> CloneDecision:
    """The decision, resumed when an earlier attempt began this very load afresh."""
    if decision.action is not CloneLoad.AFRESH or digest is None:
        return decision
    try:
        began = marker.read_text().strip()
    except OSError:
        return decision
    if began != digest.digest:
        return decision
    reason = decision.reason + " (resumed: an earlier attempt began it; only what is missing)"
    return replace(decision, reason=reason, resumed=True)


def begin(decision: CloneDecision, marker: Path, digest: SourceDigest | None) -> None:
    """Leave the marker of a load afresh about to fetch everything (nothing without a digest to
    name: such a load starts afresh at every attempt)."""
    if decision.fetch_all and digest is not None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(digest.digest + "\n")


def finish(marker: Path) -> None:
    marker.unlink(missing_ok=True)
