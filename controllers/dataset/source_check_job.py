"""The Job that reads a loaded dataset PVC's source again, for `gpu-admission audit --sources`:
the PVC's loader Job (controllers.dataset.jobspec), with the same credentials, ServiceAccount,
trust bundle and image, told to list only (`gpu-admission load --digest-only`). Pure.

It differs from a load where a check must: it mounts an emptyDir where the load mounted the PVC
(a ReadWriteOnce volume in use elsewhere would keep the check from starting, and a check writes
nothing), it is labelled with the audit run's id instead of the loader label (the controller
never takes it for a load), it tries twice at most, and it goes 10 minutes after it ends even if
the audit that made it never comes back.
"""

from __future__ import annotations

import hashlib
from typing import Any

from controllers.dataset.jobspec import DATA_VOLUME, build_loader_job
from controllers.dataset.records import PvcRecord
from gpu_admission.config import Config

CHECK_BACKOFF_LIMIT = 1
CHECK_TTL_SECONDS = 600
NAME_PREFIX = "dv-"


def check_job_name(pvc: PvcRecord, run_id: str) -> str:
    """`dv-<pvc name>-<hash of run and PVC>`, at most 63 characters."""
    mark = hashlib.sha256(f"{run_id}\0{pvc.uid}".encode()).hexdigest()[:10]
    stem = pvc.name.replace(".", "-")[: 63 - len(NAME_PREFIX) - 11].rstrip("-")
    return f"{NAME_PREFIX}{stem}-{mark}"


def build_check_job(pvc: PvcRecord, config: Config, run_id: str, deadline: int) -> dict[str, Any]:
    """The check Job of one loaded PVC (its source must parse: it was loaded)."""
    assert pvc.parsed_source is not None, pvc.source_error
    names = config.names
    job = build_loader_job(
        job_name=check_job_name(pvc, run_id),
        pvc_namespace=pvc.namespace,
        pvc_name=pvc.name,
        pvc_uid=pvc.uid,
        source=pvc.parsed_source,
        secret=pvc.credentials,
        sync=False,
        config=config,
        token=pvc.token,
        sha256=pvc.sha256,
        include=pvc.include,
    )
    template = job["spec"]["template"]
    for meta in (job["metadata"], template["metadata"]):
        labels = meta["labels"]
        labels.pop(names.data_load_label, None)
        labels[names.source_check_label] = run_id
    template["metadata"]["annotations"].pop(names.dataset_writable, None)
    pod = template["spec"]
    pod["containers"][0]["command"].append("--digest-only")
    pod["volumes"] = [
        {"name": DATA_VOLUME, "emptyDir": {}} if v["name"] == DATA_VOLUME else v
        for v in pod["volumes"]
    ]
    job["metadata"]["ownerReferences"][0]["controller"] = False  # the PVC's loader Job is its own
    job["spec"].update(
        backoffLimit=CHECK_BACKOFF_LIMIT,
        activeDeadlineSeconds=deadline,
        ttlSecondsAfterFinished=CHECK_TTL_SECONDS,
    )
    return job
