"""What a finished load did, from its loader pods' termination messages. Pure."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from controllers.dataset.records import JobRecord, LoaderPod


def summary_from_pods(
    pods: Iterable[LoaderPod], job: JobRecord, deadline_seconds: int
) -> dict[str, Any]:
    """The summary of the loader's last finished attempt, read from its termination message."""
    attempts = sorted((p for p in pods if p.exit_code is not None), key=lambda p: p.finished_at)
    if job.complete:
        attempts = [p for p in attempts if p.exit_code == 0] or attempts
    summary: dict[str, Any] = {}
    if attempts:
        message = attempts[-1].message.strip()
        try:
            parsed = json.loads(message)
            summary = parsed if isinstance(parsed, dict) else {"cause": message}
        except ValueError:
            summary = {"cause": message[-1024:]} if message else {}
    if not job.complete and not summary.get("cause"):
        if job.failure_reason == "DeadlineExceeded":
            summary["cause"] = (
                f"the load ran longer than its deadline ({deadline_seconds} s); "
                "ask for a longer activeDeadlineSeconds or load less data"
            )
        else:
            summary["cause"] = job.failure_message or "the loader Job failed"
    return summary


def success_message(source: str, summary: Mapping[str, Any] | None) -> str:
    summary = summary or {}
    files, size = summary.get("files"), summary.get("bytes")
    duration = summary.get("durationSeconds")
    if files is None:
        return f"loaded {source}"
    return f"loaded {source}: {files} files, {size} bytes in {duration} s"
