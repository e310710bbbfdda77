"""`gpu-admission audit --sources`: which loaded dataset PVCs' sources have changed since.

Every dataset PVC whose last load succeeded and recorded a digest (`data-digest`) gets a check
Job in its namespace (`build_check_job`, below): the loader, with the PVC's own
credentials, lists the source and writes the digest a load would record now. The audit compares
the two, and deletes its Jobs when it has read them. Optional, and off by default: it reads the
stores (one listing per PVC) and runs a pod per PVC, `parallel` at a time.

A PVC whose check cannot run or finish (a missing Secret, no node for the pod, a refusal by the
store) is a `could not check` finding that says why. Blocking (the kubernetes client): run it in
a thread.

The check Job is the PVC's loader Job (controllers.dataset.jobspec), with the same credentials,
ServiceAccount, trust bundle and image, told to list only (`gpu-admission load --digest-only`).
It differs from a load where a check must: it mounts an emptyDir where the load mounted the PVC
(a ReadWriteOnce volume in use elsewhere would keep the check from starting, and a check writes
nothing), it is labelled with the audit run's id instead of the loader label (the controller
never takes it for a load), it tries twice at most, and it goes 10 minutes after it ends even if
the audit that made it never comes back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.dataset.blocked import blockage
from controllers.dataset.jobspec import DATA_VOLUME, LoaderJobInputs, build_loader_job
from controllers.dataset.records import (
    JOB_NAME_LABEL,
    LoaderPod,
    PvcRecord,
    loader_pod,
    pvc_record,
)
from gpu_admission.admission.findings import COULD_NOT_CHECK, SOURCE_CHANGED, Finding
from gpu_admission.cluster.informer import describe_error
from gpu_admission.cluster.pages import Pages
from gpu_admission.config.model import Config
from gpu_admission.datasets.digests import short_digest
from gpu_admission.names import PHASE_SUCCEEDED

log = logging.getLogger(__name__)

POLICY = "dataset-source-version"
DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_PARALLEL = 8
POLL_SECONDS = 2.0
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
    names = config.names
    inputs = replace(
        LoaderJobInputs.of(pvc),
        job_name=check_job_name(pvc, run_id),
        sync=False,
        shards=1,
        cloned_from=None,
        cloned_digest=None,
    )
    job = build_loader_job(inputs, config)
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


@dataclass(frozen=True, slots=True)
class LoadedPvc:
    record: PvcRecord
    digest: str  # as the last load recorded it
    files: str
    bytes: str


def loaded_pvcs(objects: Iterable[dict[str, Any]], config: Config) -> Iterator[LoadedPvc]:
    """The dataset PVCs whose last load succeeded, from its current source, with a digest."""
    names = config.names
    for obj in objects:
        record = pvc_record(obj, names)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        digest = annotations.get(names.data_digest)
        if record is None or not record.loaded or record.deleting or not digest:
            continue
        if record.parsed_source is None:
            continue
        yield LoadedPvc(
            record,
            digest,
            annotations.get(names.data_digest_files, "?"),
            annotations.get(names.data_digest_bytes, "?"),
        )


def list_loaded(
    api: client.ApiClient, config: Config, namespace: str | None = None
) -> tuple[list[LoadedPvc], int]:
    """(the loaded dataset PVCs of one namespace or all, the list requests made): by the label
    admission gives every dataset PVC, page after page."""
    core, pages = client.CoreV1Api(api), Pages()
    selector = {"label_selector": f"{config.names.data_load_label}=true"}
    if namespace:
        objects = pages.items(
            core.list_namespaced_persistent_volume_claim, namespace=namespace, **selector
        )
    else:
        objects = pages.items(core.list_persistent_volume_claim_for_all_namespaces, **selector)
    return list(loaded_pvcs(objects, config)), pages.requests


def changed_finding(pvc: LoadedPvc, summary: dict[str, Any], retry_key: str) -> Finding | None:
    """The finding of one finished check (None: the source lists as it was loaded)."""
    record = pvc.record
    now = summary.get("digest")
    if summary.get("phase") != PHASE_SUCCEEDED or not isinstance(now, str):
        cause = summary.get("cause") or "the check ended without saying why"
        return _could_not(record, f"the source could not be listed: {cause}")
    if now == pvc.digest:
        return None
    return _finding(
        record,
        SOURCE_CHANGED,
        f"{record.source} changed since it was loaded: it lists {summary.get('digestFiles')} "
        f"files, {summary.get('digestBytes')} bytes now (digest {short_digest(now)}), the "
        f"load read {pvc.files} files, {pvc.bytes} bytes (digest {short_digest(pvc.digest)}); "
        f"load it again with `kubectl annotate pvc -n {record.namespace} {record.name} "
        f"{retry_key}=<any new value> --overwrite`",
    )


def _could_not(record: PvcRecord, why: str) -> Finding:
    return _finding(record, COULD_NOT_CHECK, why)


def _finding(record: PvcRecord, result: str, message: str) -> Finding:
    return Finding(
        policy=POLICY,
        result=result,
        kind="PersistentVolumeClaim",
        namespace=record.namespace,
        name=record.name,
        uid=record.uid,
        message=message,
    )


class SourceChecks:
    """Runs the checks of `pvcs`: creates their Jobs, `parallel` at a time, waits for each to
    end (at most `timeout` seconds from its creation), reads its pod's summary, deletes it."""

    def __init__(
        self,
        api: client.ApiClient,
        config: Config,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        parallel: int = DEFAULT_PARALLEL,
        poll_seconds: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.batch, self.core = client.BatchV1Api(api), client.CoreV1Api(api)
        self.config, self.timeout, self.parallel = config, timeout, max(1, parallel)
        self.poll_seconds, self.clock = poll_seconds, clock
        self.run_id = uuid.uuid4().hex[:12]

    def run(self, pvcs: Iterable[LoadedPvc]) -> list[Finding]:
        waiting = list(pvcs)
        running: dict[str, tuple[LoadedPvc, float]] = {}  # job key -> (pvc, created at)
        findings: list[Finding] = []
        try:
            while waiting or running:
                while waiting and len(running) < self.parallel:
                    pvc = waiting.pop(0)
                    started = self._create(pvc)
                    if isinstance(started, Finding):
                        findings.append(started)
                    else:
                        running[started] = (pvc, self.clock())
                for key, (pvc, created) in list(running.items()):
                    finding, done = self._read(key, pvc, self.clock() - created)
                    if done:
                        del running[key]
                        self._delete(key)
                        if finding is not None:
                            findings.append(finding)
                if running:
                    time.sleep(self.poll_seconds)  # the Jobs run in the cluster: poll them
        finally:
            for key in running:
                self._delete(key)
        return findings

    def _create(self, pvc: LoadedPvc) -> str | Finding:
        record = pvc.record
        deadline = max(1, int(self.timeout))
        body = build_check_job(record, self.config, self.run_id, deadline)
        name = body["metadata"]["name"]
        try:
            self.batch.create_namespaced_job(record.namespace, body)
        except ApiException as exc:
            return _could_not(record, f"cannot create the check Job {name}: {describe_error(exc)}")
        return f"{record.namespace}/{name}"

    def _read(self, key: str, pvc: LoadedPvc, age: float) -> tuple[Finding | None, bool]:
        """(the finding, whether the check is over)."""
        namespace, name = key.split("/", 1)
        record = pvc.record
        try:
            response = self.core.list_namespaced_pod(
                namespace, label_selector=f"{JOB_NAME_LABEL}={name}", _preload_content=False
            )
        except ApiException as exc:
            return _could_not(record, f"cannot read the check's pod: {describe_error(exc)}"), True
        items = json.loads(response.data).get("items") or []
        pods = [p for p in map(loader_pod, items) if p is not None]
        finished = sorted((p for p in pods if p.exit_code is not None), key=lambda p: p.finished_at)
        succeeded = [p for p in finished if p.exit_code == 0]
        last = (succeeded or finished or [None])[-1]
        retry_key = self.config.names.data_load_retry
        if last is not None and (
            last.exit_code == 0 or len(finished) > CHECK_BACKOFF_LIMIT or _gone(last)
        ):
            summary = last.summary() or {"cause": last.message}
            return changed_finding(pvc, summary, retry_key), True
        if age < self.timeout:
            return None, False
        words = f"the check Job {name} did not finish within {int(self.timeout)} s"
        credentials = self.config.names.data_credentials
        stuck = next((blockage(p, [], age, credentials) for p in pods), None)
        return _could_not(record, f"{words}: {stuck.message}" if stuck else words), True

    def _delete(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete the check Job %s: %s", key, describe_error(exc))


def _gone(pod: LoaderPod) -> bool:
    """A permanent failure ends the Job at once (its podFailurePolicy): no retry comes."""
    return bool((pod.summary() or {}).get("permanent"))
