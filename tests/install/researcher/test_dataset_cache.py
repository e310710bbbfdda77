"""Datasets as a cache on a real node, through the installed product, with the played CSI
driver's snapshots (tests/world/snapshotter.py; it restores a clone before the real kubelet
mounts it, as CSI CreateVolume does). A loaded PVC is snapshotted; a new PVC of the same source
starts as a clone, kept as it is while the source lists to the digest its snapshot's load read,
and loaded afresh once an object changed; other credentials or an opt-out never clone."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.install.cluster import InstallCluster
from tests.install.journeys import (
    NS,
    PREFIX,
    cached_pvc,
    created_as_clone,
    credential_secret,
    finished,
    load_succeeded,
    loading_message,
    pod,
    volume_of,
)
from tests.world.stand_ins.objectstores import dataset_files, tree

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
PHASE = f"{PREFIX}data-load-phase"
CHANGED = ("part-1/shard-1/file-0001.bin", "part-2/shard-2/file-0002.bin")


def snapshots_of(cluster: InstallCluster, bucket: str) -> list[dict[str, Any]]:
    listing = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, NS, "volumesnapshots"
    )
    source = f"{PREFIX}data-source"
    return [
        s for s in listing["items"] if s["metadata"]["annotations"].get(source) == f"s3://{bucket}"
    ]


def load_first(
    cluster: InstallCluster, name: str, bucket: str, files: dict[str, bytes]
) -> tuple[dict[str, str], str]:
    """`files` loaded into the PVC `name`, kept as a snapshot: its annotations and snapshot."""
    cluster.s3.put(bucket, files, public=True)
    cluster.core.create_namespaced_persistent_volume_claim(NS, cached_pvc(name, f"s3://{bucket}"))
    annotations = load_succeeded(cluster, name)
    kept = annotations[f"{PREFIX}data-snapshot"]
    assert f"kept as VolumeSnapshot {kept}" in loading_message(cluster, name)
    [snapshot] = snapshots_of(cluster, bucket)
    assert snapshot["metadata"]["name"] == kept
    assert snapshot["metadata"]["ownerReferences"][0]["name"] == name  # nothing dangles
    assert snapshot["spec"]["volumeSnapshotClassName"] == "csi-snapshots"
    # What the load read is recorded on the PVC and on its snapshot.
    digest = annotations[f"{PREFIX}data-digest"]
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    assert annotations[f"{PREFIX}data-digest-files"] == str(len(files))
    assert annotations[f"{PREFIX}data-digest-bytes"] == str(sum(map(len, files.values())))
    assert snapshot["metadata"]["annotations"][f"{PREFIX}data-digest"] == digest
    return annotations, kept


def clone(cluster: InstallCluster, name: str, bucket: str, kept: str, digest: str) -> None:
    created = created_as_clone(cluster, cached_pvc(name, f"s3://{bucket}"))
    ref = client.V1TypedObjectReference(api_group=GROUP, kind="VolumeSnapshot", name=kept)
    assert created.spec.data_source_ref == ref
    assert created.spec.data_source.name == kept
    assert created.metadata.annotations[f"{PREFIX}data-cloned-from"] == kept
    assert created.metadata.annotations[f"{PREFIX}data-cloned-digest"] == digest


def test_a_clone_of_an_unchanged_source_is_reused_without_copying(
    installed: InstallCluster,
) -> None:
    files = dataset_files(files=300, large_bytes=24 * 1024 * 1024)
    first, kept = load_first(installed, "cached-1", "cached-data", files)
    digest = first[f"{PREFIX}data-digest"]

    clone(installed, "cached-2", "cached-data", kept, digest)
    second = load_succeeded(installed, "cached-2")
    assert tree(volume_of(installed, "cached-2")) == files
    assert second[f"{PREFIX}data-load-files"] == "0"  # nothing copied
    assert second[f"{PREFIX}data-digest"] == digest
    assert loading_message(installed, "cached-2").startswith(
        f"reused VolumeSnapshot {kept}: s3://cached-data lists as it did when the snapshot was "
        f"taken ({len(files)} files, {sum(map(len, files.values()))} bytes, digest "
        f"{digest.removeprefix('sha256:')[:12]}); nothing copied"
    )


def test_a_clone_of_a_changed_source_is_loaded_afresh_and_the_next_one_kept(
    installed: InstallCluster,
) -> None:
    files = dataset_files(files=60, large_bytes=4 * 1024 * 1024)
    first, kept = load_first(installed, "changing-1", "changing-data", files)
    then = first[f"{PREFIX}data-digest"]

    # Two objects change at the source, each to new bytes of the same size; one goes.
    changed = {key: bytes(b ^ 0xFF for b in files[key]) for key in CHANGED}
    installed.s3.put("changing-data", changed, public=True)
    files.update(changed)
    gone = sorted(files)[-1]
    installed.s3.client().delete_object(Bucket="changing-data", Key=gone)
    del files[gone]

    clone(installed, "changing-2", "changing-data", kept, then)
    second = load_succeeded(installed, "changing-2")
    assert tree(volume_of(installed, "changing-2")) == files  # current data, byte for byte
    now = second[f"{PREFIX}data-digest"]
    assert now != then
    assert second[f"{PREFIX}data-load-files"] == str(len(files))  # every object again
    short = (then.removeprefix("sha256:")[:12], now.removeprefix("sha256:")[:12])
    assert loading_message(installed, "changing-2").startswith(
        f"loaded s3://changing-data afresh into a clone of VolumeSnapshot {kept}, since the "
        f"source changed since the snapshot was taken (digest {short[0]} then, {short[1]} now): "
        f"{len(files)} files"
    )
    # A researcher's pod reads the new bytes through the real kubelet's mount.
    first_changed = CHANGED[0]
    reader = pod(
        "changing-reader",
        f"od -An -tx1 -N1 /data/{first_changed}",
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "changing-2"}}],
    )
    installed.apply([reader])
    assert finished(installed, "changing-reader").split() == [f"{changed[first_changed][0]:02x}"]
    # The newer load is kept too; two per source by default, so both stay.
    newer = second[f"{PREFIX}data-snapshot"]
    assert {s["metadata"]["name"] for s in snapshots_of(installed, "changing-data")} == {
        kept,
        newer,
    }

    # The source stays as it is now: the next PVC, cloned from the newer snapshot, copies nothing.
    clone(installed, "changing-3", "changing-data", newer, now)
    third = load_succeeded(installed, "changing-3")
    assert third[f"{PREFIX}data-load-files"] == "0"
    assert third[f"{PREFIX}data-digest"] == now
    assert loading_message(installed, "changing-3").startswith(
        f"reused VolumeSnapshot {newer}: s3://changing-data lists as it did when the snapshot "
        "was taken"
    )


def test_other_credentials_for_the_same_source_are_not_cloned(installed: InstallCluster) -> None:
    load_first(installed, "team-a", "team-data", dataset_files(files=20, large_bytes=0))
    keys = {
        "AWS_ACCESS_KEY_ID": "team-b",
        "AWS_SECRET_ACCESS_KEY": "team-b-secret",
        "AWS_ENDPOINT_URL": installed.s3.endpoint,
    }
    credential_secret(installed, "team-b", "aws-credential", keys)
    # The same source with no credentials is cloned (a dry run shows it once admission has
    # seen the ready snapshot); with team-b's credentials it is not, nor when it opts out.
    created_as_clone(installed, cached_pvc("team-a-again", "s3://team-data"))
    core = installed.core
    created = core.create_namespaced_persistent_volume_claim(
        NS, cached_pvc("team-b", "s3://team-data", data_credentials="team-b")
    )
    assert created.spec.data_source_ref is None
    assert f"{PREFIX}data-cloned-from" not in created.metadata.annotations
    opted_out = cached_pvc("team-full", "s3://team-data")
    opted_out["metadata"]["annotations"][f"{PREFIX}data-cache"] = "false"
    assert (
        core.create_namespaced_persistent_volume_claim(NS, opted_out).spec.data_source_ref is None
    )
    # Nothing left in flight for the journeys after this one (a load slot, a store's switches).
    for name in ("team-a-again", "team-b", "team-full"):
        load_succeeded(installed, name)
