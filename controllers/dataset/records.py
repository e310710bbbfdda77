"""The small records the controller's informers keep (never whole objects), and their converters."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_admission.datasets.load import DatasetContent, DatasetLoad, dataset_load
from gpu_admission.datasets.parallelism import load_parallelism
from gpu_admission.datasets.source import DataSource, parse_data_source
from gpu_admission.keyless import TokenRequest, path_problem
from gpu_admission.names import LOADING_CONDITION, Names

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class Condition:
    """The PVC's `Loading` condition as last seen: what the next status write compares with."""

    status: str
    reason: str
    message: str
    last_transition: str


@dataclass(frozen=True, slots=True)
class PvcRecord:
    namespace: str
    # Its name and uid, what it holds, the Job that loads it, its phase
    # (gpu_admission.datasets.load).
    load: DatasetLoad
    sync: bool = False
    deleting: bool = False
    condition: Condition | None = None
    shards: int = 1
    shards_error: str | None = None  # the parallelism annotation cannot be honoured: why
    progress_label: str | None = None  # as last written
    storage_class: str | None = None
    cache: bool = True  # may be cloned from / kept as a snapshot (data-cache is not "false")
    cloned_from: str | None = None  # the snapshot admission cloned it from
    cloned_digest: str | None = None  # the digest that snapshot's load read (loaders.reuse)
    token: TokenRequest | None = None  # a keyless Google credential's token, as the webhook saw it
    # Which version of the PVC this is: tells an informer that lags behind our own status write
    # from one that caught up. Not compared: a new version alone is no change to act on.
    resource_version: str = field(default="", compare=False)
    # The source parsed (or why it cannot be), once, when the record is made (the informer's
    # transform), not on every read.
    parsed_source: DataSource | None = field(init=False, compare=False, repr=False)
    source_error: str | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parsed, error = _parsed(self.load.source)
        object.__setattr__(self, "parsed_source", parsed)
        object.__setattr__(self, "source_error", error)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    # What the load says, under the names the controller's modules read.

    @property
    def name(self) -> str:
        return self.load.pvc_name

    @property
    def uid(self) -> str:
        return self.load.pvc_uid

    @property
    def source(self) -> str:
        return self.load.source

    @property
    def content(self) -> DatasetContent:
        return self.load.content

    @property
    def credentials(self) -> str | None:
        return self.load.content.credentials

    @property
    def sha256(self) -> str | None:
        return self.load.content.sha256

    @property
    def include(self) -> str | None:
        return self.load.content.include

    @property
    def retry(self) -> str:
        return self.load.retry

    @property
    def phase(self) -> str | None:
        """The data-load-phase annotation as written (for any Job): `load.phase` is the current
        content's."""
        return self.load.recorded_phase

    @property
    def job(self) -> str | None:
        """The data-load-job annotation: which load `phase` is about."""
        return self.load.recorded_job

    @property
    def current_job(self) -> str:
        return self.load.job

    @property
    def loaded(self) -> bool:
        """Loaded from its current content (a success for an older one does not count)."""
        return self.load.loaded


@dataclass(frozen=True, slots=True)
class JobRecord:
    namespace: str
    name: str
    pvc_name: str
    pvc_uid: str
    active: int
    succeeded: int
    failed: int
    complete: bool
    failed_for_good: bool
    failure_reason: str
    failure_message: str
    started: bool
    deleting: bool = False
    completions: int = 1
    completed_indexes: int = 0  # Indexed Jobs: how many indexes have succeeded

    @property
    def finished(self) -> bool:
        return self.complete or self.failed_for_good

    @property
    def pvc_key(self) -> str:
        return f"{self.namespace}/{self.pvc_name}"


@dataclass(frozen=True, slots=True)
class WaitingPod:
    namespace: str
    name: str
    uid: str
    claims: tuple[str, ...]
    gates: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@functools.lru_cache(maxsize=1024)
def _parsed(source: str) -> tuple[DataSource | None, str | None]:
    """The source parsed, or why it cannot be. Kept for the last sources seen: the informer
    makes a record for every version of a PVC, most of them (status writes, progress) with the
    same source."""
    try:
        return parse_data_source(source), None
    except ValueError as exc:  # DataSourceError, with what to do
        return None, str(exc)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pvc_record(
    obj: Mapping[str, Any], names: Names, default_shards: int = 1, max_shards: int = 1
) -> PvcRecord | None:
    meta = _meta(obj)
    annotations = meta.get("annotations") or {}
    load = dataset_load(meta.get("name", ""), meta.get("uid", ""), annotations, names)
    if load is None:
        return None
    modes = (obj.get("spec") or {}).get("accessModes") or []
    parallelism = load_parallelism(
        annotations, modes, names.data_load_parallelism, default_shards, max_shards
    )
    return PvcRecord(
        namespace=meta.get("namespace", ""),
        load=load,
        sync=annotations.get(names.data_load_sync) == "true",
        deleting=bool(meta.get("deletionTimestamp")),
        condition=_loading_condition(obj.get("status") or {}),
        shards=parallelism.shards,
        shards_error=parallelism.error,
        progress_label=(meta.get("labels") or {}).get(names.data_load_progress),
        storage_class=(obj.get("spec") or {}).get("storageClassName"),
        cache=(annotations.get(names.data_cache) or "").strip().lower() != "false",
        cloned_from=_cloned_from(obj, annotations.get(names.data_cloned_from)),
        cloned_digest=(annotations.get(names.data_cloned_digest) or "").strip() or None,
        token=_token(annotations, names),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _cloned_from(obj: Mapping[str, Any], recorded: str | None) -> str | None:
    """The snapshot the PVC was cloned from: the one admission recorded, if the volume really
    starts from it (a clone's loader may copy nothing, so the annotation alone does not do)."""
    spec = obj.get("spec") or {}
    ref = spec.get("dataSourceRef") or spec.get("dataSource") or {}
    if recorded and ref.get("kind") == "VolumeSnapshot" and ref.get("name") == recorded:
        return recorded
    return None


def _token(annotations: Mapping[str, str], names: Names) -> TokenRequest | None:
    path = annotations.get(names.data_token_path)
    audience = annotations.get(names.data_token_audience)
    if not path or not audience or path_problem(path) is not None:
        return None
    return TokenRequest(path, audience)


def _loading_condition(status: Mapping[str, Any]) -> Condition | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == LOADING_CONDITION:
            return Condition(
                str(condition.get("status") or ""),
                str(condition.get("reason") or ""),
                str(condition.get("message") or ""),
                str(condition.get("lastTransitionTime") or ""),
            )
    return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def job_record(obj: Mapping[str, Any]) -> JobRecord | None:
    meta = _meta(obj)
    owner = next(
        (o for o in meta.get("ownerReferences") or [] if o.get("kind") == "PersistentVolumeClaim"),
        None,
    )
    if owner is None:
        return None
    status = obj.get("status") or {}
    failed = _condition(status, "Failed")
    return JobRecord(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        pvc_name=owner.get("name", ""),
        pvc_uid=owner.get("uid", ""),
        active=int(status.get("active") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        complete=_condition(status, "Complete") is not None,
        failed_for_good=failed is not None,
        failure_reason=(failed or {}).get("reason", ""),
        failure_message=(failed or {}).get("message", ""),
        started=bool(status.get("startTime")) or bool(status.get("active")),
        deleting=bool(meta.get("deletionTimestamp")),
        completions=int((obj.get("spec") or {}).get("completions") or 1),
        completed_indexes=count_indexes(str(status.get("completedIndexes") or "")),
    )


def count_indexes(intervals: str) -> int:
    """How many indexes "0-2,4" names (the Job controller's interval notation)."""
    total = 0
    for part in filter(None, intervals.split(",")):
        first, _, last = part.partition("-")
        try:
            total += int(last or first) - int(first) + 1
        except ValueError:
            continue
    return total


def waiting_pod(obj: Mapping[str, Any]) -> WaitingPod:
    meta, spec = _meta(obj), obj.get("spec") or {}
    claims = tuple(
        v["persistentVolumeClaim"]["claimName"]
        for v in spec.get("volumes") or []
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    )
    return WaitingPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        claims=claims,
        gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or []),
    )


@dataclass(frozen=True, slots=True)
class LoaderPod:
    """A loader Job's pod, as far as its outcome goes: the loader's summary is its
    termination message."""

    namespace: str
    name: str
    job: str
    exit_code: int | None  # None while it runs
    finished_at: str
    message: str
    index: int | None = None  # its Indexed Job index (shard)
    running: bool = False  # phase Running: it has a log to read
    # What it is waiting for, when no container has started (`blocked.py` reads these).
    created_at: str = ""
    started: bool = False  # a container ran or runs
    waiting: tuple[str, str] | None = None  # (reason, message) of a waiting container
    unschedulable: str | None = None  # the scheduler's message, when it found no node
    image: str = ""

    @property
    def shard(self) -> int:
        return self.index or 0

    def summary(self) -> dict[str, Any] | None:
        """The loader's JSON summary from the termination message; None when it is not one."""
        try:
            parsed = json.loads(self.message)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None

    @property
    def job_key(self) -> str:
        return f"{self.namespace}/{self.job}"


def loader_pod(obj: Mapping[str, Any]) -> LoaderPod | None:
    meta = _meta(obj)
    job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
    if not job:
        return None
    terminated: Mapping[str, Any] = {}
    for status in (obj.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated:
            break
    exit_code = terminated.get("exitCode")
    index = str((meta.get("labels") or {}).get(COMPLETION_INDEX_LABEL) or "")
    status = obj.get("status") or {}
    states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
    waiting = next((s["waiting"] for s in states if s.get("waiting")), None)
    unschedulable = next(
        (
            str(c.get("message") or "")
            for c in status.get("conditions") or []
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ),
        None,
    )
    containers = (obj.get("spec") or {}).get("containers") or [{}]
    return LoaderPod(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        job=job,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        finished_at=str(terminated.get("finishedAt") or ""),
        message=str(terminated.get("message") or ""),
        index=int(index) if index.isdigit() else None,
        running=status.get("phase") == "Running" and not terminated,
        created_at=str(meta.get("creationTimestamp") or ""),
        started=any("running" in s or "terminated" in s for s in states),
        waiting=(str(waiting.get("reason") or ""), str(waiting.get("message") or ""))
        if waiting
        else None,
        unschedulable=unschedulable,
        image=str(containers[0].get("image") or ""),
    )
