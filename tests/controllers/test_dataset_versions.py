"""The version a load read, controller side: the digest recorded on the PVC and its snapshot,
shards that listed different versions, the clone's loader arguments, and the words people read
when a clone was reused or loaded afresh."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from controllers.dataset.jobspec import LoaderJobInputs, loader_args
from controllers.dataset.records import LoaderPod, pvc_record
from controllers.dataset.status import annotations
from controllers.dataset.summary import SOURCE_CHANGED, success_message, summary_from_pods
from gpu_admission.cluster.dataset_snapshots import snapshot_info
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.datasets.source import parse_data_source
from tests.controllers.test_dataset_cache import CONFIG, NAMES, policies, pvc, snap
from tests.controllers.test_dataset_units import job
from tests.webhooks.policy_helpers import mutate_twice

THEN = "sha256:" + "1a" * 32
NOW = "sha256:" + "2b" * 32
READ = {"digest": NOW, "digestFiles": 40, "digestBytes": 83886080}


def test_a_succeeded_load_records_its_digest_and_a_failed_one_keeps_the_last() -> None:
    summary = {"bytes": 10, "files": 2, **READ}
    written = annotations(NAMES, "Succeeded", "dl-x", summary)
    assert written[NAMES.data_digest] == NOW
    assert written[NAMES.data_digest_files] == "40"
    assert written[NAMES.data_digest_bytes] == "83886080"
    failed = annotations(NAMES, "Failed", "dl-x", {"cause": "denied"})
    assert NAMES.data_digest not in failed  # what was loaded before stays recorded


def shard_pod(index: int, **summary: Any) -> LoaderPod:
    message = json.dumps({"phase": "Succeeded", "files": 1, "bytes": 1, **summary})
    return LoaderPod("ml", f"p{index}", "dl-x", 0, f"T{index}", message, index=index)


def test_shards_that_listed_other_versions_fail_the_load() -> None:
    sharded = job("dl-x", complete=True, completions=2)
    same = [shard_pod(i, listing="f1", **READ) for i in range(2)]
    combined = summary_from_pods(same, sharded, 60)
    assert combined["digest"] == NOW and combined["digestFiles"] == 40
    assert "cause" not in combined
    # The same paths and sizes (the fingerprint), but an object rewritten between listings.
    other = [
        shard_pod(0, listing="f1", **READ),
        shard_pod(1, listing="f1", **{**READ, "digest": THEN}),
    ]
    combined = summary_from_pods(other, sharded, 60)
    assert combined["cause"] == SOURCE_CHANGED and "digest" not in combined
    # A shard that ran a loader which recorded no digest is no disagreement.
    older = [shard_pod(0, listing="f1", **READ), shard_pod(1, listing="f1")]
    assert "cause" not in summary_from_pods(older, sharded, 60)


def test_one_shard_loading_afresh_makes_the_load_one_afresh() -> None:
    sharded = job("dl-x", complete=True, completions=2)
    pods = [shard_pod(0, clone="reused", **READ), shard_pod(1, clone="afresh", **READ)]
    assert summary_from_pods(pods, sharded, 60)["clone"] == "afresh"


def test_what_people_read_of_a_clone() -> None:
    reused = {"files": 0, "bytes": 0, "durationSeconds": 0.4, "clone": "reused", **READ}
    assert success_message("s3://d", reused, "ds-1", NOW) == (
        "reused VolumeSnapshot ds-1: s3://d lists as it did when the snapshot was taken "
        "(40 files, 83886080 bytes, digest 2b2b2b2b2b2b); nothing copied"
    )
    afresh = {"files": 40, "bytes": 83886080, "durationSeconds": 3.0, "clone": "afresh", **READ}
    assert success_message("s3://d", afresh, "ds-1", THEN) == (
        "loaded s3://d afresh into a clone of VolumeSnapshot ds-1, since the source changed "
        "since the snapshot was taken (digest 1a1a1a1a1a1a then, 2b2b2b2b2b2b now): 40 files, "
        "83886080 bytes in 3.0 s"
    )
    assert "recorded no digest" in success_message("s3://d", afresh, "ds-1", None)
    unlisted = {k: v for k, v in afresh.items() if k != "digest"}
    assert "could not be listed" in success_message("s3://d", unlisted, "ds-1", THEN)
    refreshed = {"files": 2, "bytes": 9, "durationSeconds": 1.0, "clone": "refreshed"}
    assert success_message("s3://d", refreshed, "ds-1", THEN).startswith(
        "refreshed s3://d from VolumeSnapshot ds-1: 2 new or changed files"
    )


def pvc_object(ref: dict[str, str] | None, **extra: str) -> dict[str, Any]:
    obj = pvc(annotations={NAMES.data_cloned_from: "ds-1", **extra})
    obj["metadata"]["uid"] = "u"
    if ref is not None:
        obj["spec"]["dataSourceRef"] = ref
    return obj


def test_a_pvc_counts_as_a_clone_only_when_its_volume_starts_from_that_snapshot() -> None:
    snapshot = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "ds-1"}
    record = pvc_record(pvc_object(snapshot, **{NAMES.data_cloned_digest: THEN}), NAMES)
    assert record is not None and (record.cloned_from, record.cloned_digest) == ("ds-1", THEN)
    for ref in (None, {**snapshot, "name": "ds-2"}, {"kind": "PersistentVolumeClaim", "name": "x"}):
        other = pvc_record(pvc_object(ref), NAMES)
        assert other is not None and other.cloned_from is None


def test_the_clones_loader_is_told_the_snapshot_and_its_digest() -> None:
    def args_of(url: str, **fields: str) -> list[str]:
        inputs = LoaderJobInputs("j", "ml", "p", "u", parse_data_source(url), **fields)
        return loader_args(inputs, CONFIG)

    s3 = "s3://datasets/x"
    args = args_of(s3, cloned_from="ds-1", cloned_digest=THEN)
    assert args[args.index("--clone-of") + 1] == "ds-1"
    assert args[args.index("--clone-digest") + 1] == THEN
    unknown = args_of(s3, cloned_from="ds-1")
    assert "--clone-of" in unknown and "--clone-digest" not in unknown
    assert "--clone-of" not in args_of(s3)
    hub = "hf://org/model@" + "c" * 40  # pinned to its commit already
    assert "--clone-of" not in args_of(hub, cloned_from="ds-1")


def test_admission_passes_the_snapshots_digest_to_the_clone() -> None:
    obj = {
        "metadata": {
            "name": "ds-1",
            "namespace": "ml",
            "labels": {NAMES.dataset_key_label: "k"},
            "annotations": {NAMES.data_digest: THEN, NAMES.data_storage_class: "cephfs"},
        },
        "status": {"readyToUse": True, "restoreSize": "1Gi"},
    }
    read = snapshot_info(obj, NAMES.dataset_key_label, NAMES.data_storage_class, NAMES.data_digest)
    assert read.digest == THEN
    view = StaticClusterView(snapshots=[snap("ds-a", "2026-11-01T00:00:00Z", digest=THEN)])
    _, warnings, _, patched = mutate_twice(policies(CONFIG), pvc(), view)
    assert patched["metadata"]["annotations"][NAMES.data_cloned_digest] == THEN
    assert "kept as it is if the source still lists as it did then" in warnings[0]
    view = StaticClusterView(snapshots=[replace(snap("ds-a", "2026-11-01T00:00:00Z"))])
    _, _, _, patched = mutate_twice(policies(CONFIG), pvc(), view)
    assert NAMES.data_cloned_digest not in patched["metadata"]["annotations"]
