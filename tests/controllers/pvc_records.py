"""Dataset PVC records for the controller's unit tests, made as the informer makes them: from a
PVC's annotations, through `gpu_admission.datasets.load`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from controllers.dataset.records import PvcRecord
from gpu_admission.datasets.load import dataset_load
from gpu_admission.names import Names

NAMES = Names()
# The load's own fields, by the annotation each comes from.
LOAD_ANNOTATIONS = {
    "source": NAMES.data_source,
    "credentials": NAMES.data_credentials,
    "sha256": NAMES.data_sha256,
    "include": NAMES.data_include,
    "retry": NAMES.data_load_retry,
    "phase": NAMES.data_load_phase,
    "job": NAMES.data_load_job,
}


def dataset_pvc(
    name: str = "imagenet",
    source: str = "s3://data-1/x",
    *,
    namespace: str = "ml",
    uid: str | None = None,
    **fields: Any,
) -> PvcRecord:
    """A record of the PVC `name`; `fields` are the load's (source, credentials, sha256,
    include, retry, phase, job: the annotations) or the record's own."""
    annotations = {NAMES.data_source: source}
    own = {}
    for key, value in fields.items():
        if key in LOAD_ANNOTATIONS:
            if value is not None:
                annotations[LOAD_ANNOTATIONS[key]] = value
        else:
            own[key] = value
    load = dataset_load(
        name, uid or ("uid-1" if name == "imagenet" else f"uid-{name}"), annotations, NAMES
    )
    assert load is not None
    return PvcRecord(namespace, load, **own)


def changed(pvc: PvcRecord, **fields: Any) -> PvcRecord:
    """`pvc` with some fields changed: the load's (name, uid and the annotations' above), as a
    new version of the PVC would have them, and the record's own."""
    load = {k: v for k, v in fields.items() if k in LOAD_ANNOTATIONS or k in ("name", "uid")}
    own = {k: v for k, v in fields.items() if k not in load}
    if load:
        annotations = {
            annotation: value
            for key, annotation in LOAD_ANNOTATIONS.items()
            if (value := _current(pvc, key)) is not None
        }
        for key, value in load.items():
            if key in LOAD_ANNOTATIONS:
                annotations.pop(LOAD_ANNOTATIONS[key], None)
                if value is not None:
                    annotations[LOAD_ANNOTATIONS[key]] = value
        made = dataset_load(
            load.get("name", pvc.name), load.get("uid", pvc.uid), annotations, NAMES
        )
        assert made is not None
        pvc = replace(pvc, load=made)
    return replace(pvc, **own)


def _current(pvc: PvcRecord, key: str) -> str | None:
    value = getattr(pvc, key)
    return value or None
