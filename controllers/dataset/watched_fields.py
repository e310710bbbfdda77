"""What the dataset controller's informers read of the objects they watch (see
`gpu_admission.cluster.informer.shaped_decoders`): the fields `pvc_record` and `job_record` read,
and the metadata the store's key is made of. The decoder skips the rest: every managedFields
entry, and a loader Job's whole pod template. A field these records start to read must be named
here too; `tests/controllers/test_informer_shapes.py` compares the records made both ways from
objects the real API server wrote."""

from __future__ import annotations

from typing import Any, TypedDict


class _Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    deletionTimestamp: Any


class DatasetPvc(TypedDict, total=False):
    metadata: _Metadata
    spec: Any
    status: Any


class _JobSpec(TypedDict, total=False):
    completions: Any


class LoaderJob(TypedDict, total=False):
    metadata: _Metadata
    spec: _JobSpec
    status: Any
