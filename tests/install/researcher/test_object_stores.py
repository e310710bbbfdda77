"""S3 and GCS loads on a real node, through the installed product: public buckets read
anonymously, a private bucket read with keys, and keys the store rejects failing for good, each
said on the PVC, in its Events and to the pod waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.datasets.load import DatasetContent, DatasetLoad
from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    NS,
    PREFIX,
    consumer,
    credential_secret,
    dataset_pvc,
    jobs_of,
    load_finished,
    volume_of,
    waiting,
)
from tests.install.researcher.conftest import Stores
from tests.world.node import network
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree

PHASE = f"{PREFIX}data-load-phase"


def anonymous_pvc(name: str, source: str) -> dict[str, Any]:
    claim = dataset_pvc(name, source, credentials="")
    claim["metadata"]["annotations"].pop(f"{PREFIX}data-credentials")
    return claim


def events_of(cluster: InstallCluster, name: str) -> list[client.CoreV1Event]:
    found = cluster.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}")
    return list(found.items)


def loading_condition(
    cluster: InstallCluster, name: str
) -> client.V1PersistentVolumeClaimCondition:
    claim = cluster.core.read_namespaced_persistent_volume_claim(name, NS)
    [condition] = [c for c in claim.status.conditions if c.type == "Loading"]
    return condition


def test_public_s3_and_gcs_buckets_load_and_say_what_they_did(
    installed: InstallCluster, stores: Stores
) -> None:
    files = dataset_files(files=300, large_bytes=20 * 1024 * 1024)
    installed.s3.put("imagenet-public", files, prefix="train/", public=True)
    stores.gcs.put("coco-public", files, prefix="2017/")
    installed.apply([anonymous_pvc("public-s3", "s3://imagenet-public/train")])
    installed.apply([anonymous_pvc("public-gcs", "gs://coco-public/2017")])
    for name in ("public-s3", "public-gcs"):
        annotations = load_finished(installed, name)
        assert annotations[PHASE] == "Succeeded", annotations
        assert tree(volume_of(installed, name)) == files
        assert annotations[f"{PREFIX}data-load-files"] == str(len(files))
        assert annotations[f"{PREFIX}data-load-bytes"] == str(sum(map(len, files.values())))
        assert float(annotations[f"{PREFIX}data-load-duration-seconds"]) > 0
    public = installed.core.read_namespaced_persistent_volume_claim("public-s3", NS)
    content = DatasetContent("s3://imagenet-public/train")
    job_name = DatasetLoad("public-s3", public.metadata.uid, content).job
    assert public.metadata.annotations[f"{PREFIX}data-load-job"] == job_name
    assert [j.metadata.name for j in jobs_of(installed, "public-s3")] == [job_name]
    condition = loading_condition(installed, "public-s3")
    assert condition.status == "False" and condition.reason == "Succeeded"
    assert condition.last_transition_time

    def reasons() -> list[str] | None:
        found = [e.reason for e in events_of(installed, "public-s3")]
        return found if "LoadSucceeded" in found else None

    said = wait_for(reasons, "the LoadSucceeded event")  # it follows the status write
    assert said.count("LoadStarted") == 1 and said.count("LoadSucceeded") == 1
    # Other components speak of the PVC too (the PV controller); ours say who they are.
    ours = [e for e in events_of(installed, "public-s3") if e.reason.startswith("Load")]
    assert ours and all(e.source.component == "gpu-admission" for e in ours)


@pytest.fixture
def private_store(installed: InstallCluster) -> Iterator[S3Store]:
    store = S3Store(host=network.HOST)
    try:
        yield store
    finally:
        store.stop()  # and moto's authentication back as it was


def s3_keys(cluster: InstallCluster, name: str, endpoint: str, key: str, secret: str) -> None:
    keys = {
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    credential_secret(cluster, name, "aws-credential", keys)


def test_a_private_bucket_loads_with_keys_and_rejected_keys_fail_for_good(
    installed: InstallCluster, private_store: S3Store
) -> None:
    private_store.put("private-data", {"a/b.txt": b"private bytes", "c.txt": b"more"})
    key, secret = private_store.valid_keys()
    private_store.require_authentication()
    s3_keys(installed, "good-keys", private_store.endpoint, key, secret)
    s3_keys(installed, "bad-keys", private_store.endpoint, key, "not-the-secret")
    installed.apply([dataset_pvc("private", "s3://private-data", "good-keys")])
    installed.apply([dataset_pvc("wrong", "s3://private-data", "bad-keys")])
    installed.apply([consumer("waits-for-wrong", "wrong", "true")])

    loaded = load_finished(installed, "private")
    assert loaded[PHASE] == "Succeeded", loaded
    assert tree(volume_of(installed, "private")) == {"a/b.txt": b"private bytes", "c.txt": b"more"}
    failed = load_finished(installed, "wrong")
    assert failed[PHASE] == "Failed", failed
    condition = loading_condition(installed, "wrong")
    assert condition.reason == "Failed"
    assert "rejected the credentials" in condition.message
    assert "not-the-secret" not in str(
        installed.core.read_namespaced_persistent_volume_claim("wrong", NS)
    )
    # Rejected credentials are permanent: one attempt (the podFailurePolicy fails the Job at
    # once, whatever the backoffLimit), no new Job, and the message says how to retry.
    [job] = jobs_of(installed, "wrong")
    assert job.status.failed == 1
    assert next(c for c in job.status.conditions if c.type == "Failed").reason == "PodFailurePolicy"
    assert "so it was not retried" in condition.message
    assert "kubectl annotate pvc wrong gpu-admission.io/data-load-retry=" in condition.message
    failures = wait_for(
        lambda: [e for e in events_of(installed, "wrong") if e.reason == "LoadFailed"],
        "the LoadFailed event",
    )
    assert len(failures) == 1 and failures[0].type == "Warning"
    warned = wait_for(
        lambda: [e for e in events_of(installed, "waits-for-wrong") if e.type == "Warning"],
        "a warning on the waiting pod",
    )
    assert warned[0].reason == "DatasetLoadFailed"
    assert waiting(installed, "waits-for-wrong")
