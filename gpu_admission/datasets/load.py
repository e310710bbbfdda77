"""What a dataset PVC's load is, decided in one place for every reader.

The webhooks (the dataset gate, the PVC's snapshot cache), the controller, `audit`, `review` and
the PolicyReports all take a PVC's load from here: the content it holds (the source, the digest
it must have, the files it is narrowed to), the loader Job that loads that content, the cache key
of what it holds, and its phase for that content. No other code derives a Job name or a content
key. (Two readers that each worked them out once drifted apart: a `data-sha256` or
`data-include` PVC counted as loaded by the controller counted as pending at admission, and its
pods were gated or refused.)

All of it comes from the PVC's annotations, read here once: `dataset_load(...)`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpu_admission.datasets.source import DataSourceError, include_patterns, parse_data_source
from gpu_admission.names import PHASE_FAILED, PHASE_PENDING, PHASE_SUCCEEDED, Names

ANONYMOUS = ""
JOB_PREFIX = "dl-"
MAX_NAME = 63  # a Job name must also fit a label value
LOAD_ID_LENGTH = 10


@dataclass(frozen=True, slots=True)
class DatasetContent:
    """What a load copies: the source, read with these credentials, checked against this digest
    (one https file), narrowed to these files (hf://). A new digest or another set of files is
    new content: a new load, and another entry in the snapshot cache."""

    source: str
    sha256: str | None = None  # lower-case hex
    include: str | None = None  # data-include as written, stripped
    credentials: str | None = None  # a Secret name; None: anonymous

    @property
    def key(self) -> str:
        """The content as one string: what load ids and cache keys are made from."""
        return _content_key(self.source, self.sha256, self.include)

    @property
    def cache_key(self) -> str:
        """The `dataset-key` label of a snapshot that holds this content: a hash of the content
        and the credentials, so a PVC naming other credentials never gets this one's data."""
        return _cache_key(self.key, self.credentials)

    def kept_key(self, commit: str | None = None) -> str | None:
        """The cache key of this content as a loaded volume holds it: a Hub source at the
        commit its load resolved (`commit`, else the commit the source names), anything else
        as named. None when that cannot be known: a source that does not parse, or a Hub
        branch or tag whose commit is not known (the branch may have moved since)."""
        try:
            parsed = parse_data_source(self.source)
        except DataSourceError:
            return None
        if parsed.scheme != "hf":
            return self.cache_key
        pinned = commit or (parsed.revision if parsed.pinned else None)
        if pinned is None:
            return None
        at_commit = replace(self, source=parsed.at_commit(pinned).url, sha256=None)
        return at_commit.cache_key


@dataclass(frozen=True, slots=True)
class DatasetLoad:
    """One PVC's current load: its content, the Job that loads it, and what the controller last
    recorded on the PVC (`data-load-phase`, `data-load-job`)."""

    pvc_name: str
    pvc_uid: str
    content: DatasetContent
    retry: str = ""  # data-load-retry: a new value is a new load of the same content
    recorded_phase: str | None = None
    recorded_job: str | None = None

    @property
    def source(self) -> str:
        return self.content.source

    @property
    def job(self) -> str:
        """The loader Job of this content: `dl-<pvc name>-<load id>`, at most 63 characters."""
        return _job_name(self.pvc_name, self.pvc_uid, self.content.key, self.retry)

    @property
    def phase(self) -> str:
        """The phase of the CURRENT content: a phase recorded for another Job (an older source
        or digest, before the controller caught up with an edit) counts as Pending."""
        if self.recorded_job != self.job:
            return PHASE_PENDING
        return self.recorded_phase or PHASE_PENDING

    @property
    def loaded(self) -> bool:
        return self.phase == PHASE_SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.phase == PHASE_FAILED


def content_of(annotations: Mapping[str, str], names: Names) -> DatasetContent | None:
    """The content a PVC's annotations name; None when it has no data source."""
    source = annotations.get(names.data_source)
    if not source:
        return None
    return DatasetContent(
        source=source,
        sha256=(annotations.get(names.data_sha256) or "").strip().lower() or None,
        include=(annotations.get(names.data_include) or "").strip() or None,
        credentials=(annotations.get(names.data_credentials) or "").strip() or None,
    )


def dataset_load(
    pvc_name: str, pvc_uid: str, annotations: Mapping[str, str], names: Names
) -> DatasetLoad | None:
    """The PVC's current load, from its name, uid and annotations; None for a PVC that is not
    a dataset (no data source)."""
    content = content_of(annotations, names)
    if content is None:
        return None
    return DatasetLoad(
        pvc_name=pvc_name,
        pvc_uid=pvc_uid,
        content=content,
        retry=(annotations.get(names.data_load_retry) or "").strip(),
        recorded_phase=annotations.get(names.data_load_phase),
        recorded_job=annotations.get(names.data_load_job),
    )


# -- the derivations, private: everything above goes through them ---------------------------


def _content_key(source: str, sha256: str | None, include: str | None) -> str:
    key = source
    if sha256:
        key += f"\x00sha256:{sha256.lower()}"
    patterns = include_patterns(include)
    if patterns:
        key += "\x00include:" + ",".join(sorted(set(patterns)))
    return key


def _cache_key(content: str, credentials: str | None) -> str:
    material = f"{content.strip()}\x00{(credentials or ANONYMOUS).strip()}"
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=4096)
def _job_name(pvc_name: str, pvc_uid: str, content: str, retry: str) -> str:
    """Stable: the same PVC, content and retry value always give the same name; new content, a
    new retry value (or a PVC re-created under the same name) gives another. Cached: every
    admission of a dataset's pod and every version of a PVC the controller sees asks."""
    key = f"{pvc_uid}\x00{content}" + (f"\x00{retry}" if retry else "")
    load_id = hashlib.sha256(key.encode()).hexdigest()[:LOAD_ID_LENGTH]
    # Dots become hyphens so the name is also a DNS label (pod hostnames derive from it).
    room = MAX_NAME - len(JOB_PREFIX) - len("-") - LOAD_ID_LENGTH
    stem = pvc_name.replace(".", "-")[:room].rstrip("-")
    return f"{JOB_PREFIX}{stem}-{load_id}"
