"""`gpu-admission load --digest-only`: the version a load of the source would read now, without
copying anything. Lists the source as a load does (rclone for object stores and the web; the Hub
for hf://, its revision resolved to a commit) and writes the digest (loaders.source_digest) in
the summary, so that `gpu-admission audit --sources` can tell the dataset PVCs whose source
changed since they were loaded. Run in a Job of the loader's own shape, with the same
credentials, trust bundle and network as the load had.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import IO, Any

from gpu_admission.datasets.source import DataSource
from loaders.hub import hub_settings, list_hub
from loaders.hub_errors import HubFailure
from loaders.report import classify, token_identity, write_summary
from loaders.shards import ListingError, list_source
from loaders.source_digest import SourceDigest, content_pin, source_digest
from loaders.sources import REMOTE, rclone_env
from loaders.stop import STOPPED_EXIT_CODE, Stopped, stopped_by_sigterm

FAILED_EXIT_CODE = 1


def current_digest(
    source: DataSource,
    environ: Mapping[str, str],
    *,
    rclone: str = "rclone",
    sha256: str | None = None,
    include: str | None = None,
) -> SourceDigest:
    """The digest a load of `source` would record now; HubFailure or ListingError if the
    source cannot be listed."""
    if source.scheme == "hf":
        endpoint, token = hub_settings(environ)
        listing = list_hub(source, endpoint, token, include)
        return source_digest(listing.objects, listing.commit)
    env = rclone_env(source, environ)
    objects = list_source(rclone, f"{REMOTE}:{source.remote_path}", env)
    return source_digest(objects, content_pin(source, sha256))


def run_digest_only(
    source: DataSource,
    *,
    environ: Mapping[str, str],
    out: IO[str],
    termination_log: str,
    permanent_exit_code: int,
    rclone: str = "rclone",
    sha256: str | None = None,
    include: str | None = None,
) -> int:
    """List, write the summary with the digest (or the cause), return the exit code."""
    started = time.monotonic()
    result: dict[str, Any] = {"phase": "Failed", "source": source.url}
    try:
        with stopped_by_sigterm():  # the audit deletes its Jobs: end at once when it does
            digest = current_digest(source, environ, rclone=rclone, sha256=sha256, include=include)
    except Stopped:
        result.update(exitCode=STOPPED_EXIT_CODE, cause="the check was stopped", permanent=False)
    except HubFailure as failure:
        code = permanent_exit_code if failure.permanent else FAILED_EXIT_CODE
        result.update(exitCode=code, cause=failure.cause, permanent=failure.permanent)
    except ListingError as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        cause, permanent = classify(lines, FAILED_EXIT_CODE, token_identity(environ))
        code = permanent_exit_code if permanent else FAILED_EXIT_CODE
        result.update(exitCode=code, cause=f"listing the source failed: {cause}")
        result["permanent"] = permanent
    else:
        result.update(phase="Succeeded", exitCode=0, **digest.summary_fields())
    result["durationSeconds"] = round(time.monotonic() - started, 3)
    write_summary(result, out, termination_log)
    return int(result["exitCode"])
