"""The dataset informers decode only the fields their records read
(`controllers.dataset.watched_fields`): the records made that way equal the records made from whole
objects, for objects the real kube-apiserver wrote and answered, in a list and in a watch event, and
for a Job in each state its status can take."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
from controllers.dataset.records import job_record, pvc_record
from controllers.dataset.watched_fields import DatasetPvc, LoaderJob
from gpu_admission.cluster.informer import meta_namespace_key, shaped_decoders
from gpu_admission.datasets.source import parse_data_source
from tests.controllers.test_dataset_units import CONFIG, NAMES
from tests.world.namespaces import namespace_ready

NS = "informer-shapes"
WHOLE = shaped_decoders(None)


def _dataset_pvc(core: client.CoreV1Api) -> dict[str, Any]:
    body = {
        "metadata": {
            "name": "imagenet",
            "labels": {NAMES.data_load_label: "true", NAMES.data_load_progress: "40-percent"},
            "annotations": {
                NAMES.data_source: "s3://datasets/imagenet/",
                NAMES.data_credentials: "s3-reader",
                NAMES.data_load_sync: "true",
                NAMES.data_load_phase: "Running",
                NAMES.data_load_job: "dl-imagenet-0123456789",
                NAMES.data_load_parallelism: "4",
                NAMES.data_load_retry: "2",
                NAMES.data_cache: "false",
                NAMES.data_sha256: "AB" * 32,
                NAMES.data_include: "*.tar",
            },
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "fast",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    made = core.create_namespaced_persistent_volume_claim(NS, body)
    condition = {
        "type": "Loading",
        "status": "True",
        "reason": "LoadRunning",
        "message": "loading s3://datasets/imagenet/",
        "lastTransitionTime": "2026-11-26T10:00:00Z",
    }
    core.patch_namespaced_persistent_volume_claim_status(
        made.metadata.name, NS, {"status": {"conditions": [condition]}}
    )
    return {"uid": made.metadata.uid}


def _loader_job(batch: client.BatchV1Api, pvc_uid: str) -> None:
    source = parse_data_source("s3://datasets/imagenet/")
    inputs = LoaderJobInputs(
        "dl-imagenet-0123456789", NS, "imagenet", pvc_uid, source, secret="s3-reader", shards=4
    )
    body = build_loader_job(inputs, CONFIG)
    body["spec"]["suspend"] = True  # nothing runs it here; the object is what is read
    batch.create_namespaced_job(NS, body)


def _listed(call: Any) -> bytes:
    return call(label_selector=f"{NAMES.data_load_label}=true", _preload_content=False).data


def _records(decoders: Any, listed: bytes, transform: Any) -> tuple[list[Any], list[Any]]:
    """The records of a list answer, and of each of its items as a MODIFIED watch event."""
    decode_list, decode_event = decoders
    items = decode_list(listed)["items"]
    from_list = [(meta_namespace_key(o), transform(o)) for o in items]
    from_events = []
    for item in json.loads(listed)["items"]:
        event = decode_event(json.dumps({"type": "MODIFIED", "object": item}).encode())
        from_events.append((meta_namespace_key(event["object"]), transform(event["object"])))
    return from_list, from_events


def test_shaped_records_equal_whole_ones_for_what_the_real_server_wrote(kube_client) -> None:
    namespace_ready(kube_client, NS)
    core, batch = client.CoreV1Api(kube_client), client.BatchV1Api(kube_client)
    _loader_job(batch, _dataset_pvc(core)["uid"])

    pvcs = _listed(core.list_persistent_volume_claim_for_all_namespaces)
    assert b'"managedFields"' in pvcs  # what the shape leaves out is there to leave out
    record = lambda o: pvc_record(o, NAMES, 1, 16)  # noqa: E731
    whole = _records(WHOLE, pvcs, record)
    shaped = _records(shaped_decoders(DatasetPvc), pvcs, record)
    assert shaped == whole and whole[0] == whole[1]
    (key, found), *_ = whole[0]
    assert key == f"{NS}/imagenet" and found is not None
    assert (found.credentials, found.sync, found.shards, found.retry) == ("s3-reader", True, 4, "2")
    assert found.condition is not None and found.condition.reason == "LoadRunning"
    assert found.progress_label == "40-percent" and found.storage_class == "fast"
    assert found.resource_version and not found.cache and found.include == "*.tar"

    jobs = _listed(batch.list_job_for_all_namespaces)
    assert b'"template"' in jobs and b'"managedFields"' in jobs
    whole_jobs = _records(WHOLE, jobs, job_record)
    assert _records(shaped_decoders(LoaderJob), jobs, job_record) == whole_jobs
    (key, job), *_ = whole_jobs[0]
    assert key == f"{NS}/dl-imagenet-0123456789"
    assert job is not None and (job.pvc_name, job.completions) == ("imagenet", 4)

    # Each state a Job's status can report, on the real object.
    item = json.loads(jobs)["items"][0]
    states = [
        {"active": 2, "startTime": "2026-11-26T10:00:00Z", "completedIndexes": "0-1"},
        {
            "failed": 4,
            "completedIndexes": "0-2",
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "FailedIndexes",
                    "message": "Job has failed indexes",
                },
            ],
        },
        {"succeeded": 4, "completedIndexes": "0-3", "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"},
        ]},
    ]  # fmt: skip
    made = []
    for status in states:
        item["status"] = status
        item["metadata"]["deletionTimestamp"] = "2026-11-26T11:00:00Z"
        listed = json.dumps({"kind": "JobList", "metadata": {}, "items": [item]}).encode()
        whole_state = _records(WHOLE, listed, job_record)
        assert _records(shaped_decoders(LoaderJob), listed, job_record) == whole_state
        made.append(whole_state[0][0][1])
    assert [(j.active, j.started, j.completed_indexes) for j in made] == [
        (2, True, 2),
        (0, False, 3),
        (0, False, 4),
    ]
    assert made[1].failed_for_good and made[1].failure_reason == "FailedIndexes"
    assert made[2].complete and all(j.deleting for j in made)


def test_a_watch_error_and_a_bookmark_keep_what_the_informer_reads() -> None:
    _, decode_event = shaped_decoders(LoaderJob)
    expired = decode_event(
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},'
        b'"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired",'
        b'"code":410}}'
    )
    assert expired["object"]["code"] == 410 and expired["object"]["reason"] == "Expired"
    assert expired["object"]["message"] == "too old resource version: 1 (2)"
    bookmark = decode_event(
        b'{"type":"BOOKMARK","object":{"kind":"Job","apiVersion":"batch/v1","metadata":'
        b'{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}'
    )
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "metadata": {
                "resourceVersion": "12",
                "annotations": {"k8s.io/initial-events-end": "true"},
            }
        },
    }
