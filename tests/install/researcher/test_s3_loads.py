"""Loads on a real node, through the installed product: the installed controller's Indexed loader
Jobs, the real Job controller's backoffLimitPerIndex, the real kubelet giving each shard its
JOB_COMPLETION_INDEX and reporting each attempt's termination message; a permanent failure
that waits for the user's `data-load-retry`; and consumers gated until the load ends, then
given the data read-only by the real kubelet's mount.

A load is held open by a proxy between the loader and the S3 stand-in, on the pod network: the
loader really runs (its pod is up, its request in flight) while the test acts, with no sleeps."""

from __future__ import annotations

import json
import threading
from typing import Any

from kubernetes import client, watch

from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    LOAD_SECONDS,
    NS,
    PREFIX,
    consumer,
    dataset_pvc,
    finished,
    jobs_of,
    load_finished,
    mount_of,
    pvc_annotations,
    s3_secret,
    volume_of,
    waiting,
    warnings_on,
)
from tests.world.stand_ins.holding_proxy import ThreadedHoldingProxy
from tests.world.stand_ins.objectstores import dataset_files, tree

# A few hundred small objects and one much larger.
FILES = dataset_files(files=300, large_bytes=12 * 1024 * 1024)


def sharded_pvc(cluster: InstallCluster, name: str, bucket: str, shards: int) -> None:
    s3_secret(cluster, f"s3-{name}")
    claim = dataset_pvc(name, f"s3://{bucket}", f"s3-{name}")
    claim["metadata"]["annotations"][f"{PREFIX}data-load-parallelism"] = str(shards)
    claim["spec"]["accessModes"] = ["ReadWriteMany"]
    cluster.apply([claim])


def loader_job(cluster: InstallCluster, name: str) -> client.V1Job:
    job = pvc_annotations(cluster, name)[f"{PREFIX}data-load-job"]
    return client.BatchV1Api(cluster.api).read_namespaced_job(job, NS)


def summaries_by_shard(cluster: InstallCluster, job: str) -> dict[int, list[dict[str, Any]]]:
    """Each loader attempt's summary, from the termination message the kubelet reported."""
    found: dict[int, list[dict[str, Any]]] = {}
    for attempt in cluster.core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items:
        index = int(attempt.metadata.labels["batch.kubernetes.io/job-completion-index"])
        terminated = attempt.status.container_statuses[0].state.terminated
        message = (terminated.message or "") if terminated else ""
        found.setdefault(index, []).append(json.loads(message) if message.startswith("{") else {})
    return found


def sharded_load_succeeds(
    cluster: InstallCluster, name: str, files: dict[str, bytes], shards: int
) -> tuple[dict[str, str], client.V1Job]:
    """`files` in a bucket of their own, loaded by `shards` shards into the claim `name`: what
    the PVC then says, and its loader Job."""
    cluster.s3.put(f"{name}-data", files)
    sharded_pvc(cluster, name, f"{name}-data", shards)
    loaded = load_finished(cluster, name)
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loaded
    assert tree(volume_of(cluster, name)) == files
    return loaded, loader_job(cluster, name)


def test_four_shards_copy_every_object_once_and_succeed(installed: InstallCluster) -> None:
    loaded, job = sharded_load_succeeds(installed, "big", FILES, 4)
    assert job.spec.completion_mode == "Indexed" and job.spec.completions == 4
    assert job.status.completed_indexes == "0-3"
    # The loaders' own counts: one attempt per shard, and the shards' parts add up to the
    # source with nothing copied twice.
    shards = summaries_by_shard(installed, job.metadata.name)
    assert sorted(shards) == [0, 1, 2, 3] and all(len(a) == 1 for a in shards.values())
    files = [shards[i][0]["files"] for i in range(4)]
    assert sum(files) == len(FILES) and all(f > 0 for f in files)
    assert len({shards[i][0]["listing"] for i in range(4)}) == 1
    assert loaded[f"{PREFIX}data-load-files"] == str(len(FILES))
    assert loaded[f"{PREFIX}data-load-bytes"] == str(sum(map(len, FILES.values())))
    claim = installed.core.read_namespaced_persistent_volume_claim("big", NS)
    [loading] = [c for c in claim.status.conditions if c.type == "Loading"]
    assert loading.message.endswith("by 4 shards")


def test_a_shard_failing_once_is_retried_alone(installed: InstallCluster) -> None:
    # The installed loader command fails shard 2's first attempt of s3://flaky-data
    # (conftest.loader_command).
    _, job = sharded_load_succeeds(installed, "flaky", dataset_files(files=60, large_bytes=0), 4)
    attempts = {i: len(a) for i, a in summaries_by_shard(installed, job.metadata.name).items()}
    assert attempts == {0: 1, 1: 1, 2: 2, 3: 1}
    assert job.status.failed == 1 and job.status.completed_indexes == "0-3"


def test_a_permanent_failure_is_not_retried_until_asked(installed: InstallCluster) -> None:
    sharded_pvc(installed, "later", "not-there-yet", 1)
    installed.apply([consumer("stuck", "later", "test -s /data/part-0/shard-0/file-0000.bin")])
    failed = load_finished(installed, "later")
    assert failed[f"{PREFIX}data-load-phase"] == "Failed", failed
    claim = installed.core.read_namespaced_persistent_volume_claim("later", NS)
    [loading] = [c for c in claim.status.conditions if c.type == "Loading"]
    assert "the source was not found" in loading.message
    assert "so it was not retried" in loading.message
    [first] = jobs_of(installed, "later")
    assert first.status.failed == 1  # one attempt: the backoff limit was never used
    # Its consumer stays gated, and is told why.
    [warning] = wait_for(lambda: warnings_on(installed, "stuck"), "a warning on the waiting pod")
    assert warning.reason == "DatasetLoadFailed"
    assert "'later' failed to load" in warning.message
    assert "fix the PVC's data source" in warning.message
    assert waiting(installed, "stuck")

    # The cause is fixed; the user asks for the same source again.
    installed.s3.put("not-there-yet", FILES)
    retry = {"metadata": {"annotations": {f"{PREFIX}data-load-retry": "1"}}}
    installed.core.patch_namespaced_persistent_volume_claim("later", NS, retry)
    job_key = f"{PREFIX}data-load-job"
    wait_for(
        lambda: pvc_annotations(installed, "later")[job_key] != first.metadata.name,
        "the new load to be recorded",
    )
    loaded = load_finished(installed, "later")
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loaded
    assert tree(volume_of(installed, "later")) == FILES
    assert len(jobs_of(installed, "later")) == 2
    finished(installed, "stuck")  # released, and read the data
    # The same value again changes nothing: no third load.
    installed.core.patch_namespaced_persistent_volume_claim("later", NS, retry)
    assert pvc_annotations(installed, "later")[f"{PREFIX}data-load-phase"] == "Succeeded"
    assert len(jobs_of(installed, "later")) == 2


# Reads the data, then proves the mount is read-only: the write must fail.
READ_ONLY_CHECK = "cat /data/train/part-0/shard-0/file-0000.bin >/dev/null && ! touch /data/x"


def test_consumers_wait_for_the_load_then_read_it_read_only(
    installed: InstallCluster, held_store: ThreadedHoldingProxy
) -> None:
    files = dataset_files(files=20, large_bytes=1024 * 1024)
    installed.s3.put("imagenet", files, prefix="train/")
    held_store.hold("imagenet")
    s3_secret(installed, "s3-imagenet", endpoint=held_store.endpoint)
    installed.apply([dataset_pvc("imagenet", "s3://imagenet", "s3-imagenet")])
    wait_for(
        lambda: (
            pvc_annotations(installed, "imagenet").get(f"{PREFIX}data-load-phase") == "Loading"
            and held_store.held.get("imagenet", 0) > 0
        ),
        "the load to be in flight",
    )

    # Created mid-load: gated, labelled for the controller, mounted read-only.
    installed.apply([consumer("early", "imagenet", READ_ONLY_CHECK)])
    assert waiting(installed, "early")
    assert mount_of(installed, "early").read_only is True
    early = installed.core.read_namespaced_pod("early", NS)
    assert early.spec.volumes[0].persistent_volume_claim.read_only is True

    # A pod pinned to a node cannot wait behind a gate: refused while the data is missing.
    pinned = consumer("pinned", "imagenet", "true", nodeName=installed.node.name)
    refused = installed.apply([pinned], check=False)
    assert refused.returncode != 0
    assert 'admission webhook "pods.mutate.gpu-admission.io" denied' in refused.stderr
    assert "cannot wait behind a scheduling gate" in refused.stderr
    assert waiting(installed, "early")  # the kubelet runs the loader, not the consumer

    held_store.release()
    loaded = load_finished(installed, "imagenet")
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loaded
    volume = volume_of(installed, "imagenet")
    assert tree(volume) == {f"train/{k}": v for k, v in files.items()}
    finished(installed, "early")  # read the data, and could not write
    assert not (volume / "x").exists()

    # Created after the load: never gated; writable only when the pod asks for it.
    installed.apply([consumer("late", "imagenet", "true")])
    late = installed.core.read_namespaced_pod("late", NS)
    assert not late.spec.scheduling_gates
    assert f"{PREFIX}data-wait" not in (late.metadata.labels or {})
    assert mount_of(installed, "late").read_only is True
    writer = consumer("writer", "imagenet", "touch /data/written")
    writer["metadata"]["annotations"] = {f"{PREFIX}dataset-writable": "true"}
    installed.apply([writer])
    assert not installed.core.read_namespaced_pod("writer", NS).spec.scheduling_gates
    assert not mount_of(installed, "writer").read_only
    finished(installed, "writer")
    assert (volume / "written").exists()


def record_phases(cluster: InstallCluster, since: str, phases: list[str]) -> None:
    """The load phases the PVC `edited` goes through after `since`, until one that ends it."""
    stream = watch.Watch().stream(
        cluster.core.list_namespaced_persistent_volume_claim,
        NS,
        field_selector="metadata.name=edited",
        resource_version=since,
        timeout_seconds=LOAD_SECONDS,
    )
    for event in stream:
        phase = (event["object"].metadata.annotations or {}).get(f"{PREFIX}data-load-phase")
        if phase and (not phases or phases[-1] != phase):
            phases.append(phase)
        if phase in ("Succeeded", "Failed"):
            return


def test_editing_the_source_mid_load_replaces_the_loader(
    installed: InstallCluster, held_store: ThreadedHoldingProxy
) -> None:
    installed.s3.put("first-source", {"old.txt": b"old data"})
    new_files = {"new/a.txt": b"new data", "new/b.txt": b"more new data"}
    installed.s3.put("second-source", new_files)
    held_store.hold("first-source")  # the first loader stays mid-request until it is killed
    s3_secret(installed, "s3-edited", endpoint=held_store.endpoint)
    installed.apply([dataset_pvc("edited", "s3://first-source", "s3-edited")])
    reader = consumer("reader", "edited", 'test "$(cat /data/new/a.txt)" = "new data"')
    installed.apply([reader])
    wait_for(
        lambda: (
            pvc_annotations(installed, "edited").get(f"{PREFIX}data-load-phase") == "Loading"
            and held_store.held.get("first-source", 0) > 0
        ),
        "the first load to be in flight",
    )
    [first] = jobs_of(installed, "edited")
    since = installed.core.read_namespaced_persistent_volume_claim("edited", NS)
    phases: list[str] = []
    watching = threading.Thread(
        target=record_phases, args=(installed, since.metadata.resource_version, phases)
    )
    watching.start()

    # The edit goes through the PVC webhooks like any other update.
    edit = {"metadata": {"annotations": {f"{PREFIX}data-source": "s3://second-source"}}}
    installed.core.patch_namespaced_persistent_volume_claim("edited", NS, edit)
    loaded = load_finished(installed, "edited")
    watching.join(LOAD_SECONDS)
    # Stopping the first load put the PVC back to Pending before the new load ran.
    assert phases[-1] == "Succeeded" and "Pending" in phases, phases
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loaded
    [second] = jobs_of(installed, "edited")  # the first Job is gone
    assert second.metadata.name != first.metadata.name
    assert loaded[f"{PREFIX}data-load-job"] == second.metadata.name
    assert tree(volume_of(installed, "edited")) == new_files
    # The kubelet killed the first loader: its held request was dropped, never answered.
    assert held_store.dropped.get("first-source", 0) >= 1
    finished(installed, "reader")  # released once the new source was loaded


def held_load(cluster: InstallCluster, proxy: ThreadedHoldingProxy, name: str) -> client.V1Job:
    """A load of `name` in flight, its listing held at the proxy; its loader Job."""
    cluster.s3.put(f"{name}-data", {"a.txt": b"a\n", "b/c.txt": b"c\n"})
    proxy.hold(f"{name}-data")
    s3_secret(cluster, f"s3-{name}", endpoint=proxy.endpoint)
    cluster.apply([dataset_pvc(name, f"s3://{name}-data", f"s3-{name}")])
    wait_for(
        lambda: (
            pvc_annotations(cluster, name).get(f"{PREFIX}data-load-phase") == "Loading"
            and proxy.held.get(f"{name}-data", 0) > 0
        ),
        f"the load of {name} to be in flight",
    )
    [job] = jobs_of(cluster, name)
    return job


def test_a_restarted_controller_adopts_the_running_job(
    installed: InstallCluster, held_store: ThreadedHoldingProxy
) -> None:
    job = held_load(installed, held_store, "adopted")
    # A new release of the controller rolls out while the load runs.
    installed.kubectl(
        "-n", "gpu-admission", "rollout", "restart", "deployment/gpu-admission-controller"
    )
    installed.rolled_out("gpu-admission-controller")
    held_store.release()
    loaded = load_finished(installed, "adopted")
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loaded
    assert [j.metadata.name for j in jobs_of(installed, "adopted")] == [job.metadata.name]
    assert tree(volume_of(installed, "adopted")) == {"a.txt": b"a\n", "b/c.txt": b"c\n"}
    events = installed.core.list_namespaced_event(
        NS, field_selector="involvedObject.name=adopted,reason=LoadStarted"
    )
    assert len(events.items) == 1


def claims(cluster: InstallCluster) -> set[str]:
    return {c.metadata.name for c in cluster.core.list_namespaced_persistent_volume_claim(NS).items}


def test_deleting_the_pvc_mid_load_stops_its_loader_and_removes_the_job(
    installed: InstallCluster, held_store: ThreadedHoldingProxy
) -> None:
    held_load(installed, held_store, "short-lived")
    installed.core.delete_namespaced_persistent_volume_claim("short-lived", NS)
    # The controller deletes the Job; the kubelet stops the loader, which hangs up at once; the
    # claim, protected while a pod uses it, then goes.
    wait_for(lambda: not jobs_of(installed, "short-lived"), "the Job to be deleted")
    wait_for(lambda: held_store.dropped.get("short-lived-data"), "the loader to hang up")
    wait_for(lambda: "short-lived" not in claims(installed), "the claim to be gone")
