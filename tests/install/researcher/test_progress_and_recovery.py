"""A load's progress, and a store that comes back, on a real node through the installed
product: progress read from the loader pods' logs (the real kubelet's, through kube-apiserver's
`pods/log`) while a proxy holds part of the source; and an object store briefly unreachable (a
port on the pod network nothing listens on, then the proxy on it) that the loader Job's own
retries get through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    NS,
    PREFIX,
    dataset_pvc,
    failed_attempts,
    jobs_of,
    load_finished,
    loading_message,
    pvc_annotations,
    s3_secret,
    volume_of,
)
from tests.support.ports import free_port
from tests.world.node import network
from tests.world.stand_ins.holding_proxy import ThreadedHoldingProxy
from tests.world.stand_ins.objectstores import dataset_files, tree

PHASE = f"{PREFIX}data-load-phase"
PROGRESS = f"{PREFIX}data-load-progress"
# A few hundred small objects and one much larger.
FILES = dataset_files(files=300, large_bytes=12 * 1024 * 1024)


def progress(cluster: InstallCluster, name: str) -> tuple[str, str, str] | None:
    """The PVC's progress label, annotation and Loading message, once it counts files."""
    claim = cluster.core.read_namespaced_persistent_volume_claim(name, NS)
    label = (claim.metadata.labels or {}).get(PROGRESS)
    annotation = (claim.metadata.annotations or {}).get(PROGRESS)
    if label and annotation and " files" in annotation:
        return label, annotation, loading_message(cluster, name)
    return None


def files_done(annotation: str) -> int:
    return int(annotation.split(", ")[1].split(" of ")[0])


def copy_settings(cluster: InstallCluster, claim: str) -> list[str]:
    """The `copy settings` line of each loader pod of the claim's Job that has said it yet."""
    (job,) = jobs_of(cluster, claim)
    selector = f"job-name={job.metadata.name}"
    lines = []
    for pod in cluster.core.list_namespaced_pod(NS, label_selector=selector).items:
        if pod.status.phase == "Pending":
            continue
        log = cluster.core.read_namespaced_pod_log(pod.metadata.name, NS)
        lines += [line for line in log.splitlines() if "copy settings:" in line]
    return lines


def test_progress_advances_on_the_pvc_while_the_load_runs(
    installed: InstallCluster, held_store: ThreadedHoldingProxy
) -> None:
    installed.s3.put("watched-data", FILES)
    # The large object and a dozen small ones wait at the proxy; with more transfer slots than
    # held objects, the other objects always get through meanwhile.
    held_store.hold("watched-data", "large/")
    held_store.hold("watched-data", "part-3/shard-6/")
    s3_secret(installed, "s3-watched", endpoint=held_store.endpoint)
    claim = dataset_pvc("watched", "s3://watched-data", "s3-watched")
    claim["metadata"]["annotations"][f"{PREFIX}data-load-parallelism"] = "2"
    claim["spec"]["accessModes"] = ["ReadWriteMany"]
    installed.apply([claim])

    total = len(FILES)
    label, annotation, message = wait_for(
        lambda: (p := progress(installed, "watched")) and 0 < files_done(p[1]) < total and p,
        "progress",
    )
    assert "of 2 shards done" in annotation and "%" in annotation
    assert message.startswith("copying s3://watched-data with 2 shards: ")
    assert message.endswith(annotation)
    # Readable with kubectl get pvc -L.
    shown = installed.kubectl("-n", NS, "get", "pvc", "watched", "-L", PROGRESS, "--no-headers")
    assert shown.stdout.split()[-1] == label
    held_store.release("watched-data", "part-3/shard-6/")
    advanced = wait_for(
        lambda: (
            (p := progress(installed, "watched"))
            and files_done(p[1]) > files_done(annotation)
            and p
        ),
        "progress to advance",
    )
    assert files_done(advanced[1]) < total  # the large object is still held: not over yet
    assert pvc_annotations(installed, "watched")[PHASE] == "Loading"
    held_store.release()
    loaded = load_finished(installed, "watched")
    assert loaded[PHASE] == "Succeeded", loaded
    claimed = installed.core.read_namespaced_persistent_volume_claim("watched", NS)
    assert PROGRESS not in (claimed.metadata.labels or {})
    assert tree(volume_of(installed, "watched")) == FILES
    # Each shard chose how to copy from its own part, within the memory limit the kubelet gave
    # it through the Downward API, the configured transfers winning.
    said = copy_settings(installed, "watched")
    assert len(said) == 2, said
    assert all("--transfers 32 " in line and "memory limit 2.0 GiB" in line for line in said)


@pytest.fixture
def returning_store(installed: InstallCluster) -> Iterator[ThreadedHoldingProxy]:
    proxy = ThreadedHoldingProxy(installed.s3.endpoint, host=network.HOST)
    try:
        yield proxy
    finally:
        proxy.stop()


def test_a_briefly_unreachable_store_recovers_by_itself(
    installed: InstallCluster, returning_store: ThreadedHoldingProxy
) -> None:
    files = dataset_files(files=30, large_bytes=0)
    installed.s3.put("comes-back", files)
    port = free_port(network.HOST)  # nothing listens there yet: connections are refused
    s3_secret(installed, "s3-comes-back", endpoint=f"http://{network.HOST}:{port}")
    installed.apply([dataset_pvc("flaky-store", "s3://comes-back", "s3-comes-back")])
    wait_for(lambda: failed_attempts(installed, "flaky-store") >= 1, "a first attempt to fail")
    wait_for(
        lambda: "transient failure" in loading_message(installed, "flaky-store"),
        "the PVC to say it is retrying",
    )
    assert pvc_annotations(installed, "flaky-store")[PHASE] == "Loading"
    returning_store.start(port)  # the store comes back on the same address
    loaded = load_finished(installed, "flaky-store")
    assert loaded[PHASE] == "Succeeded", loaded
    assert tree(volume_of(installed, "flaky-store")) == files
    [job] = jobs_of(installed, "flaky-store")  # one load: the Job itself retried
    assert job.status.failed >= 1 and job.status.succeeded == 1
