"""Dataset PVCs: the data-source annotation must parse, its credential Secret must exist with the
type the scheme needs (web sources take none), a data-sha256 must be a digest on a single-file
web source, and the loader shards it asks for must be a whole number within the configured
maximum on a ReadWriteMany volume; and every dataset PVC carries the label the loader controller
selects by.

The label mirrors the annotation: it is added when a data source is set (and put back if a user
removes it), and removed when the data source is removed, so the controller's label-selected watch
sees exactly the dataset PVCs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config
from gpu_admission.datasets.parallelism import load_parallelism
from gpu_admission.datasets.source import (
    CLOUD_NAME,
    DataSource,
    DataSourceError,
    include_patterns,
    parse_data_source,
)
from gpu_admission.names import Names
from webhooks.core.patch import Patch, escape
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.interface import MutatingPolicy, Scope, ValidatingPolicy

PVC_KIND = "PersistentVolumeClaim"
SCOPE = Scope(PVC_KIND, operations=frozenset({"CREATE", "UPDATE"}))
LABEL_VALUE = "true"
SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def _annotations(obj: dict | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def _dataset_settings_changed(request: AdmissionRequest, names: Names) -> bool:
    """On UPDATE only a change to the source or credentials needs checking again: the controller
    writes its state into annotations, and a Secret deleted after the PVC was admitted must not
    lock the PVC against those writes (the load itself reports the missing Secret)."""
    if request.operation != "UPDATE" or request.old_object is None:
        return True
    new, old = _annotations(request.object), _annotations(request.old_object)
    keys = (
        names.data_source,
        names.data_credentials,
        names.data_load_parallelism,
        names.data_sha256,
        names.data_include,
    )
    return any(new.get(k) != old.get(k) for k in keys)


def credentials_ref(request: AdmissionRequest, names: Names) -> Iterable[ObjectRef]:
    secret = _annotations(request.object).get(names.data_credentials, "").strip()
    if secret and _annotations(request.object).get(names.data_source):
        return (ObjectRef("Secret", request.namespace, secret),)
    return ()


def validate_dataset_pvc(request: AdmissionRequest, view: ClusterView, config: Config) -> Verdict:
    names = config.names
    annotations = _annotations(request.object)
    source_value = annotations.get(names.data_source)
    secret_name = annotations.get(names.data_credentials, "").strip()
    if source_value is None:
        if secret_name:
            return Verdict.allow(
                f"{names.data_credentials} has no effect without {names.data_source}; "
                "add a data source or remove the annotation"
            )
        return Verdict.allow()
    if not _dataset_settings_changed(request, names):
        return Verdict.allow()
    try:
        source = parse_data_source(source_value, allow_http=config.dataset.allow_http)
    except DataSourceError as exc:
        return Verdict.deny(f"{names.data_source}: {exc}")
    include = annotations.get(names.data_include)
    if include is not None:
        problem = include_problem(include, source)
        if problem:
            return Verdict.deny(f"{names.data_include}: {problem}")
    digest = annotations.get(names.data_sha256)
    if digest is not None:
        problem = sha256_problem(digest, source)
        if problem:
            return Verdict.deny(f"{names.data_sha256}: {problem}")
    spec = (request.object or {}).get("spec") or {}
    parallelism = load_parallelism(
        annotations,
        spec.get("accessModes") or [],
        names.data_load_parallelism,
        config.dataset.default_parallelism,
        config.dataset.max_parallelism,
    )
    if parallelism.error:
        return Verdict.deny(parallelism.error)
    if not secret_name:
        if source.scheme == "az":
            return Verdict.deny(
                f"{names.data_source}: az:// data needs {names.data_credentials} naming an "
                "azure-credential Secret: it names the storage account (and the key, SAS token or "
                "identity to read it with)"
            )
        return Verdict.allow()  # anonymous access to a public bucket
    needed = source.credential_type
    if needed is None:
        return Verdict.deny(
            f"{names.data_credentials}: {source.scheme}:// sources are read without credentials; "
            "remove the annotation (for private data, use a bucket or container with a "
            "credentials Secret)"
        )
    secret = view.secret(request.namespace, secret_name)
    if secret is None:
        return Verdict.deny(
            f"{names.data_credentials}: Secret {secret_name!r} was not found in namespace "
            f"{request.namespace!r}; create it (type {needed}) before the PVC, fix the name, or "
            "remove the annotation to read a public bucket anonymously"
        )
    if secret.type != needed:
        return Verdict.deny(
            f"{names.data_credentials}: Secret {secret_name!r} has type {secret.type!r}, but "
            f"{source.scheme}:// ({CLOUD_NAME[source.scheme]}) data needs a Secret of type "
            f"{needed!r}; name a {needed} Secret instead"
        )
    return Verdict.allow()


def sha256_problem(digest: str, source: DataSource) -> str | None:
    """Why a data-sha256 value cannot be checked for this source (None when it can)."""
    if not source.single_file:
        return (
            "a digest can be checked only for one file from an https:// source (a URL not "
            "ending in /); remove the annotation"
        )
    if not SHA256_HEX.fullmatch(digest):
        return (
            "must be the file's SHA-256 as 64 hexadecimal digits (what sha256sum prints), "
            f"not a value of {len(digest)} characters"
        )
    return None


def include_problem(value: str, source: DataSource) -> str | None:
    """Why data-include cannot narrow this source's files (None when it can)."""
    if source.scheme != "hf":
        return "file patterns apply to hf:// sources only; remove the annotation"
    patterns = include_patterns(value)
    if not patterns:
        return (
            "give at least one glob pattern of the files to fetch, like "
            "'*.safetensors,config.json' (or remove the annotation to fetch every file)"
        )
    for pattern in patterns:
        if pattern.startswith("/") or ".." in pattern.split("/"):
            return (
                f"the pattern {pattern!r} must be relative to the repository's root, without '..'"
            )
    return None


def label_dataset_pvc(
    request: AdmissionRequest, patch: Patch, view: ClusterView, names: Names
) -> None:
    metadata = patch.obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    is_dataset = names.data_source in annotations
    labels = metadata.get("labels") or {}
    if is_dataset:
        patch.set_label(names.data_load_label, LABEL_VALUE)
    elif names.data_load_label in labels:
        patch.remove(f"/metadata/labels/{escape(names.data_load_label)}")
    _record_token(patch, view, names, request.namespace, annotations if is_dataset else {})


def _record_token(
    patch: Patch, view: ClusterView, names: Names, namespace: str, annotations: dict[str, str]
) -> None:
    """A keyless Google credentials Secret: record on the PVC the token its loader needs (its
    path and audience, not secret), since the controller reads no Secret."""
    secret_name = annotations.get(names.data_credentials, "").strip()
    secret = view.secret(namespace, secret_name) if secret_name else None
    token = secret.token if secret is not None else None
    wanted = {
        names.data_token_audience: token.audience if token else None,
        names.data_token_path: token.path if token else None,
    }
    current = (patch.obj.get("metadata") or {}).get("annotations") or {}
    for key, value in wanted.items():
        if value is not None:
            patch.set_annotation(key, value)
        elif key in current:
            patch.remove(f"/metadata/annotations/{escape(key)}")


def policies(config: Config) -> list[MutatingPolicy | ValidatingPolicy]:
    names = config.names
    return [
        MutatingPolicy(
            name="dataset-pvc-label",
            scope=SCOPE,
            mutate=lambda request, patch, view: label_dataset_pvc(request, patch, view, names),
            references=lambda request, view=None: credentials_ref(request, names),
        ),
        ValidatingPolicy(
            name="dataset-pvc",
            scope=SCOPE,
            validate=lambda request, view: validate_dataset_pvc(request, view, config),
            references=lambda request, view=None: credentials_ref(request, names),
        ),
    ]
