"""`gpu-admission load` for hf:// sources: a Hugging Face Hub repository, fetched with
huggingface_hub's own `snapshot_download` into the volume.

The revision (a branch or tag) is resolved to its commit first, once, and everything after reads
that commit, so the files all come from one commit even if the branch moves during the load; the
commit goes into the summary and the controller records it on the PVC (and in the cache key).
`data-include` narrows the files with the same glob matching snapshot_download uses. A sharded
load lists the commit's tree (every shard lists the same immutable commit) and fetches its part
of the files, split as rclone listings are (loaders.shards); the listing fingerprint names
the commit, so shards that resolved a moving branch to different commits fail the load.

huggingface_hub is imported here only, when a loader runs: the webhook service never loads it.
Its files go straight into the volume (`local_dir`), with its bookkeeping under `.cache/huggingface`
there, so a later load of the same volume (a refresh, or a clone of a snapshot) fetches only files
that changed. Progress lines are the same as rclone loads print (gpu_admission.datasets.progress),
computed from the bytes on the volume.
"""

from __future__ import annotations

import glob
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from gpu_admission.datasets.progress import Progress
from gpu_admission.datasets.source import DEFAULT_REVISION, DataSource, include_patterns
from gpu_admission.names import HF_DEFAULT_ENDPOINT, HF_ENDPOINT, HF_TOKEN
from loaders.hub_errors import HubFailure, classified
from loaders.report import write_summary
from loaders.shards import ShardPlan, SourceObject, plan_shard
from loaders.source_digest import source_digest
from loaders.stop import STOPPED_CAUSE, STOPPED_EXIT_CODE, Stopped
from loaders.tuning import DEFAULT_TUNING, CopyTuning, hub_workers

PARTIAL_SUFFIX = ".incomplete"  # what huggingface_hub writes while a file downloads
BOOKKEEPING = ".cache/huggingface"  # huggingface_hub's metadata inside local_dir


@dataclass(frozen=True, slots=True)
class HubListing:
    commit: str
    objects: tuple[SourceObject, ...]  # after data-include


def hub_settings(environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(endpoint, token) from the loader's environment; an empty optional token is none."""
    endpoint = (environ.get(HF_ENDPOINT) or HF_DEFAULT_ENDPOINT).rstrip("/")
    return endpoint, environ.get(HF_TOKEN) or None


def list_hub(
    source: DataSource, endpoint: str, token: str | None, include: str | None
) -> HubListing:
    """Resolve the revision to its commit and list that commit's files (narrowed by include)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi(endpoint=endpoint, token=token)
    repo, kind = source.bucket, source.repo_type
    with classified(source, token):
        if source.pinned:
            commit = source.revision
        else:
            revision = source.revision or DEFAULT_REVISION
            info = api.repo_info(repo, repo_type=kind, revision=revision)
            commit = str(info.sha)
        files = [
            f
            for f in api.list_repo_tree(repo, repo_type=kind, revision=commit, recursive=True)
            if isinstance(f, RepoFile)
        ]
    patterns = include_patterns(include) or None
    wanted = set(filter_repo_objects([f.path for f in files], allow_patterns=patterns))
    objects = tuple(
        sorted(
            (SourceObject(f.path, int(f.size or 0)) for f in files if f.path in wanted),
            key=lambda o: o.path,
        )
    )
    if patterns and not objects:
        raise HubFailure(
            f"no file of {source.url} at commit {commit} matches data-include "
            f"{', '.join(patterns)}; fix the patterns",
            True,
        )
    return HubListing(commit, objects)


def shard_listing(listing: HubListing, index: int, count: int) -> ShardPlan:
    """This shard's files; the fingerprint covers the commit, so shards that resolved a branch
    to different commits are told apart by the controller."""
    plan = plan_shard(listing.objects, index, count)
    mark = hashlib.sha256(f"{listing.commit}\0{plan.fingerprint}".encode()).hexdigest()[:16]
    return replace(plan, fingerprint=mark)


def download_patterns(plan: ShardPlan, include: str | None) -> list[str] | None:
    """What snapshot_download is told to fetch: everything (None), the user's own patterns, or,
    for one shard of several, its files by exact name (glob.escape makes '[' literal for
    fnmatch). Exact names cost snapshot_download a pattern match per file and name, so they are
    used only where a shard needs them."""
    if plan.count == 1:
        return include_patterns(include) or None
    return [glob.escape(o.path) for o in plan.objects]


def fetch(
    source: DataSource,
    commit: str,
    patterns: list[str] | None,
    dest: str,
    *,
    endpoint: str,
    token: str | None,
    workers: int,
) -> None:
    """snapshot_download of this commit into `dest`, narrowed by `patterns`."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # the loader prints its own progress lines
    with classified(source, token):
        snapshot_download(
            source.bucket,
            repo_type=source.repo_type,
            revision=commit,
            local_dir=dest,
            allow_patterns=patterns,
            max_workers=workers,
            token=token,
            endpoint=endpoint,
        )


class ProgressTicker:
    """Prints a progress line every `seconds` from what is on the volume, until stopped."""

    def __init__(
        self,
        dest: Path,
        plan: ShardPlan,
        out: IO[str],
        seconds: float,
        lock: threading.Lock,
    ) -> None:
        self.dest, self.plan, self.out, self.seconds, self.lock = dest, plan, out, seconds, lock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="hub-progress")
        self._started = time.monotonic()

    def __enter__(self) -> ProgressTicker:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            line = self.progress().line()
            with self.lock:
                self.out.write(line + "\n")
                self.out.flush()

    def progress(self) -> Progress:
        done_files, done_bytes = on_volume(self.dest, self.plan.objects)
        elapsed = max(time.monotonic() - self._started, 1e-6)
        return Progress(
            bytesDone=done_bytes,
            bytesTotal=max(self.plan.bytes, done_bytes),
            filesDone=done_files,
            filesTotal=len(self.plan.objects),
            speed=round(done_bytes / elapsed, 1),
            shard=self.plan.index,
            shards=self.plan.count,
            listedBytes=self.plan.listed_bytes if self.plan.count > 1 else 0,
            listedFiles=self.plan.listed_objects if self.plan.count > 1 else 0,
        )


def on_volume(dest: Path, objects: Sequence[SourceObject]) -> tuple[int, int]:
    """(files complete, bytes written) of these objects: finished files at their full size,
    plus what huggingface_hub has written of the unfinished ones."""
    files = done = 0
    partial_dir = dest / BOOKKEEPING / "download"
    for obj in objects:
        try:
            size = (dest / obj.path).stat().st_size
        except OSError:
            size = -1
        if size == obj.size:
            files += 1
            done += size
            continue
        for partial in partial_dir.glob(glob.escape(obj.path) + "*" + PARTIAL_SUFFIX):
            done += min(partial.stat().st_size, obj.size)
    return files, done


def prune_outside(dest: Path, keep: Iterable[str]) -> int:
    """Delete files under `dest` that the commit does not have, but for huggingface_hub's
    bookkeeping (`.cache/huggingface`); how many were deleted."""
    wanted = set(keep)
    removed = 0
    for path in sorted(dest.rglob("*")):
        relative = path.relative_to(dest).as_posix()
        if not path.is_file() or relative in wanted or relative.startswith(BOOKKEEPING + "/"):
            continue
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def run_hub_load(
    source: DataSource,
    dest: str,
    *,
    include: str | None,
    shard_index: int,
    shard_count: int,
    tuning: CopyTuning = DEFAULT_TUNING,
    sync: bool = False,
    environ: dict[str, str],
    out: IO[str],
    termination_log: str,
    stats_seconds: float,
    permanent_exit_code: int,
) -> int:
    """List, fetch and summarise one (shard of a) hub load; the exit code the Job sees."""
    started = time.monotonic()
    endpoint, token = hub_settings(environ)
    result: dict[str, Any] = {"phase": "Failed", "source": source.url, "bytes": 0, "files": 0}
    result["checks"] = 0
    lock = threading.Lock()
    try:
        listing = list_hub(source, endpoint, token, include)
        plan = shard_listing(listing, shard_index, shard_count)
        result["commit"] = listing.commit
        if shard_count > 1:
            result.update(plan.summary_fields())
        if sync and plan.index == 0 and Path(dest).is_dir():
            # Mirror the commit: one shard deletes what it does not hold (huggingface_hub never
            # deletes), keeping huggingface_hub's own bookkeeping.
            removed = prune_outside(Path(dest), (o.path for o in listing.objects))
            with lock:
                out.write(json.dumps({"level": "notice", "msg": f"pruned {removed} files"}) + "\n")
        present, _ = on_volume(Path(dest), plan.objects)  # a refresh or a clone's files
        workers = hub_workers(plan.objects, tuning)
        with lock:
            note = f"download threads: {workers} for {len(plan.objects)} files"
            out.write(json.dumps({"level": "notice", "msg": note}) + "\n")
        with ProgressTicker(Path(dest), plan, out, stats_seconds, lock):
            fetch(
                source,
                listing.commit,
                download_patterns(plan, include),
                dest,
                endpoint=endpoint,
                token=token,
                workers=workers,
            )
        result.update(
            phase="Succeeded",
            bytes=plan.bytes,
            files=len(plan.objects) - present,
            checks=present,
            exitCode=0,
        )
        result.update(source_digest(listing.objects, listing.commit).summary_fields())
    except HubFailure as failure:
        code = permanent_exit_code if failure.permanent else 1
        result.update(exitCode=code, cause=failure.cause, permanent=failure.permanent)
    except (KeyboardInterrupt, Stopped):
        result.update(exitCode=STOPPED_EXIT_CODE, cause=STOPPED_CAUSE, permanent=False)
    result["durationSeconds"] = round(time.monotonic() - started, 3)
    with lock:
        write_summary(result, out, termination_log)
    return int(result["exitCode"])
