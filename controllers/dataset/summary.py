"""What a finished load did, from its loader pods' termination messages. Pure.

A sharded load (an Indexed Job) has one summary per index: the last attempt of each index (its
success, if it had one) counts, and the figures are summed. Every shard's summary names the
fingerprint of the listing it split; shards that saw different listings (the source changed
between their listings) may have missed or doubled objects, so such a load is not a success.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controllers.dataset.records import JobRecord, LoaderPod
from gpu_admission.datasets.digests import short_digest

CLONE_LOADS = ("afresh", "refreshed", "reused")  # loaders.reuse.CloneLoad, strongest first
SOURCE_CHANGED = (
    "the source changed while the loader shards were listing it, so they may not have split "
    "it the same way; load again once the source is stable"
)


def _parse(pod: LoaderPod) -> dict[str, Any]:
    """The summary, or the message itself as the cause (the kubelet's log tail, say)."""
    parsed = pod.summary()
    if parsed is not None:
        return parsed
    message = pod.message.strip()
    return {"cause": message[-1024:]} if message else {}


def _last_attempts(pods: Iterable[LoaderPod], complete: bool) -> dict[int, LoaderPod]:
    """Per shard, the attempt that counts: its success if any, else its latest failure."""
    attempts = sorted((p for p in pods if p.exit_code is not None), key=lambda p: p.finished_at)
    chosen: dict[int, LoaderPod] = {}
    for pod in attempts:
        best = chosen.get(pod.shard)
        if best is None or best.exit_code != 0 or not complete:
            chosen[pod.shard] = pod
    if complete:
        return {i: p for i, p in chosen.items() if p.exit_code == 0} or chosen
    return chosen


def summary_from_pods(
    pods: Iterable[LoaderPod], job: JobRecord, deadline_seconds: int
) -> dict[str, Any]:
    """The summary of the load's last finished attempts, read from termination messages."""
    chosen = _last_attempts(pods, job.complete)
    parts = {index: _parse(pod) for index, pod in sorted(chosen.items())}
    sharded = job.completions > 1
    summary = _combine(parts, job) if sharded else dict(next(iter(parts.values()), {}))
    if not job.complete and not summary.get("cause"):
        if job.failure_reason == "DeadlineExceeded":
            summary["cause"] = (
                f"the load ran longer than its deadline ({deadline_seconds} s); "
                "ask for a longer activeDeadlineSeconds or load less data"
            )
        else:
            summary["cause"] = job.failure_message or "the loader Job failed"
    return summary


def _combine(parts: Mapping[int, Mapping[str, Any]], job: JobRecord) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(p.get(key) or 0) for p in parts.values())

    summary: dict[str, Any] = {
        "bytes": total("bytes"),
        "files": total("files"),
        "checks": total("checks"),
        "durationSeconds": max(
            (float(p.get("durationSeconds") or 0) for p in parts.values()), default=0.0
        ),
        "shards": job.completions,
        "shardFiles": [
            int(parts[i].get("files") or 0) if i in parts else None for i in range(job.completions)
        ],
    }
    commits = {p.get("commit") for p in parts.values() if p.get("commit")}
    if len(commits) == 1:  # a hub load: every shard read the same commit (else: the listings)
        summary["commit"] = commits.pop()
    digests = {p.get("digest") for p in parts.values()}
    if len(digests) == 1 and None not in digests:  # every shard listed the same versions
        first = next(iter(parts.values()))
        summary.update({k: first.get(k) for k in ("digest", "digestFiles", "digestBytes")})
    clones = {p.get("clone") for p in parts.values()} - {None}
    for kind in CLONE_LOADS:  # one shard loading afresh makes the load one afresh
        if kind in clones:
            summary["clone"] = kind
            break
    failed = [(i, p) for i, p in parts.items() if p.get("phase") == "Failed" or p.get("cause")]
    if failed and not job.complete:
        index, part = failed[0]
        others = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        summary["cause"] = (
            f"shard {index} of {job.completions} failed{others}: {part.get('cause', 'no cause')}"
        )
    elif job.complete and (
        len({p.get("listing") for p in parts.values()}) > 1 or len(digests - {None}) > 1
    ):
        summary["cause"] = SOURCE_CHANGED
    return summary


def success_message(
    source: str,
    summary: Mapping[str, Any] | None,
    cloned_from: str | None = None,
    cloned_digest: str | None = None,
) -> str:
    summary = summary or {}
    files, size = summary.get("files"), summary.get("bytes")
    duration = summary.get("durationSeconds")
    if files is None:
        return f"loaded {source}"
    shards = summary.get("shards")
    by = f" by {shards} shards" if isinstance(shards, int) and shards > 1 else ""
    clone = summary.get("clone")
    if cloned_from and clone == "reused":
        return (
            f"reused VolumeSnapshot {cloned_from}: {source} lists as it did when the snapshot "
            f"was taken ({summary.get('digestFiles')} files, {summary.get('digestBytes')} bytes, "
            f"digest {short_digest(str(summary.get('digest') or ''))}); nothing copied"
        )
    if cloned_from and clone == "afresh":
        now = str(summary.get("digest") or "")
        if not cloned_digest:
            why = "the snapshot recorded no digest to compare with"
        elif now and now != cloned_digest:
            then, current = short_digest(cloned_digest), short_digest(now)
            why = "the source changed since the snapshot was taken "
            why += f"(digest {then} then, {current} now)"
        else:
            why = "the source could not be listed to compare it with the snapshot"
        return (
            f"loaded {source} afresh into a clone of VolumeSnapshot {cloned_from}, since {why}: "
            f"{files} files, {size} bytes in {duration} s{by}"
        )
    if cloned_from:
        return (
            f"refreshed {source} from VolumeSnapshot {cloned_from}: {files} new or changed "
            f"files ({size} bytes) copied, {summary.get('checks', 0)} compared with the clone, "
            f"in {duration} s{by}"
        )
    return f"loaded {source}: {files} files, {size} bytes in {duration} s{by}"


def failure_message(
    source: str, pvc_name: str, job: JobRecord, summary: Mapping[str, Any], retry_key: str
) -> str:
    """Why the load failed, whether it was retried, and how to load again."""
    again = (
        f"once fixed, load again with `kubectl annotate pvc {pvc_name} {retry_key}=<any new value>`"
    )
    if job.complete:  # every shard copied its part, but they split different listings
        retried = "no loader failed, so nothing was retried"
    elif job.failure_reason == "PodFailurePolicy" or summary.get("permanent"):
        retried = "trying again cannot fix this, so it was not retried"
    elif job.failure_reason == "DeadlineExceeded":
        retried = "it was stopped at its deadline"
    else:
        attempts = job.failed or 1
        retried = f"it failed {attempts} time{'s' if attempts > 1 else ''}: transient failures "
        retried += "are retried automatically, this one did not go away"
    return f"loading {source} failed: {summary.get('cause', '')}; {retried}; {again}"


def last_failure_cause(pods: Iterable[LoaderPod], job: str) -> str | None:
    """The cause the newest failed attempt of `job` left in its summary (None: none yet)."""
    failed = [p for p in pods if p.job == job and p.exit_code not in (None, 0)]
    for pod in sorted(failed, key=lambda p: p.finished_at, reverse=True):
        cause = (pod.summary() or {}).get("cause")
        if isinstance(cause, str) and cause:
            return cause
    return None
