"""Loads on a real node, through the installed product: the installed controller's Indexed loader
Jobs, the real Job controller's backoffLimitPerIndex, the real kubelet giving each shard its
JOB_COMPLETION_INDEX and reporting each attempt's termination message; and a permanent failure
that waits for the user's `data-load-retry`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controllers.dataset.jobspec import DATA_MOUNT_PATH
from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    NS,
    PREFIX,
    dataset_pvc,
    installed_product,
    pvc_annotations,
    s3_secret,
)
from tests.world.stand_ins.objectstores import dataset_files, tree

# A few hundred small objects and one much larger.
FILES = dataset_files(files=300, large_bytes=12 * 1024 * 1024)
LOAD_SECONDS = 240


@pytest.fixture(scope="module")
def installed(install_cluster: InstallCluster) -> Iterator[InstallCluster]:
    with installed_product(install_cluster):
        yield install_cluster


def sharded_pvc(cluster: InstallCluster, name: str, bucket: str, shards: int) -> None:
    s3_secret(cluster, f"s3-{name}")
    claim = dataset_pvc(name, f"s3://{bucket}", f"s3-{name}")
    claim["metadata"]["annotations"][f"{PREFIX}data-load-parallelism"] = str(shards)
    claim["spec"]["accessModes"] = ["ReadWriteMany"]
    cluster.apply([claim])


def load_finished(cluster: InstallCluster, name: str) -> dict[str, str]:
    def phase() -> str | None:
        found = pvc_annotations(cluster, name).get(f"{PREFIX}data-load-phase")
        return found if found in ("Succeeded", "Failed") else None

    wait_for(phase, f"the load of {name} to end", timeout=LOAD_SECONDS)
    return pvc_annotations(cluster, name)


def volume_of(cluster: InstallCluster, name: str) -> Path:
    claim = cluster.core.read_namespaced_persistent_volume_claim(name, NS)
    return Path(cluster.core.read_persistent_volume(claim.spec.volume_name).spec.host_path.path)


def loader_job(cluster: InstallCluster, name: str) -> client.V1Job:
    job = pvc_annotations(cluster, name)[f"{PREFIX}data-load-job"]
    return client.BatchV1Api(cluster.api).read_namespaced_job(job, NS)


def summaries_by_shard(cluster: InstallCluster, job: str) -> dict[int, list[dict[str, Any]]]:
    """Each loader attempt's summary, from the termination message the kubelet reported."""
    found: dict[int, list[dict[str, Any]]] = {}
    for pod in cluster.core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items:
        index = int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"])
        terminated = pod.status.container_statuses[0].state.terminated
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


@pytest.fixture
def shard_two_fails_once(installed: InstallCluster) -> Iterator[None]:
    """The loader command wrapped, as a platform engineer sets it in the ConfigMap: shard 2's
    first attempt fails before loading anything; its retry removes the marker the first left on
    the volume (the only place two attempts share), then loads. Set back afterwards."""
    marker = f"{DATA_MOUNT_PATH}/.shard-2-failed-once"
    script = (
        f'if [ "$JOB_COMPLETION_INDEX" = 2 ]; then if [ ! -e {marker} ]; then touch {marker}; '
        f'echo "network went away" >&2; exit 1; fi; rm -f {marker}; fi; exec "$@"'
    )
    config = installed.core.read_namespaced_config_map("gpu-admission", "gpu-admission")
    before = config.data["config.yaml"]
    settings = yaml.safe_load(before)
    settings["dataset"]["loader_command"] = ["sh", "-c", script, "sh", "gpu-admission", "load"]
    restart_controller(installed, yaml.safe_dump(settings))
    try:
        yield
    finally:
        restart_controller(installed, before)


def restart_controller(cluster: InstallCluster, config_yaml: str) -> None:
    cluster.core.patch_namespaced_config_map(
        "gpu-admission", "gpu-admission", {"data": {"config.yaml": config_yaml}}
    )
    cluster.kubectl(
        "-n", "gpu-admission", "rollout", "restart", "deployment/gpu-admission-controller"
    )
    cluster.rolled_out("gpu-admission-controller")


def test_a_shard_failing_once_is_retried_alone(
    installed: InstallCluster, shard_two_fails_once: None
) -> None:
    _, job = sharded_load_succeeds(installed, "flaky", dataset_files(files=60, large_bytes=0), 4)
    attempts = {i: len(a) for i, a in summaries_by_shard(installed, job.metadata.name).items()}
    assert attempts == {0: 1, 1: 1, 2: 2, 3: 1}
    assert job.status.failed == 1 and job.status.completed_indexes == "0-3"


def jobs_of(cluster: InstallCluster, claim: str) -> list[client.V1Job]:
    found = client.BatchV1Api(cluster.api).list_namespaced_job(NS).items
    return [j for j in found if any(o.name == claim for o in j.metadata.owner_references or [])]


def test_a_permanent_failure_is_not_retried_until_asked(installed: InstallCluster) -> None:
    sharded_pvc(installed, "later", "not-there-yet", 1)
    failed = load_finished(installed, "later")
    assert failed[f"{PREFIX}data-load-phase"] == "Failed", failed
    claim = installed.core.read_namespaced_persistent_volume_claim("later", NS)
    [loading] = [c for c in claim.status.conditions if c.type == "Loading"]
    assert "the source was not found" in loading.message
    assert "so it was not retried" in loading.message
    [first] = jobs_of(installed, "later")
    assert first.status.failed == 1  # one attempt: the backoff limit was never used

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
    # The same value again changes nothing: no third load.
    installed.core.patch_namespaced_persistent_volume_claim("later", NS, retry)
    assert pvc_annotations(installed, "later")[f"{PREFIX}data-load-phase"] == "Succeeded"
    assert len(jobs_of(installed, "later")) == 2
