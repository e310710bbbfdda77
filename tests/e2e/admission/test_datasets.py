"""Datasets end to end with the real webhooks in the admission path: the PVC webhook labels the
claim, the pod webhook gates consumers and mounts the data read-only, the controller loads the
data with real rclone from moto and releases the gate, and the fake kubelet runs the consumer.

Loads are held open by a proxy between rclone and moto that keeps requests for chosen buckets
waiting until the test releases them: the loader really runs (its pod is up, its request is in
flight) while the test acts, with no sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from controllers.dataset import DatasetController
from gpu_admission.datasource import loader_job_name
from tests.e2e.datasets import (
    events_for,
    eventually,
    jobs,
    make_config,
    phase_of,
    read_pod,
    read_pvc,
    wait_phase,
)
from tests.world.harness import WAIT_SECONDS, AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.kubelet.watch import Watcher
from tests.world.stand_ins.holding_proxy import HoldingProxy, holding_proxy
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree

NS = "ml"
PREFIX = "gpu-admission.io/"
GATE = {"name": f"{PREFIX}data-load"}
PHASE = f"{PREFIX}data-load-phase"


def unique_bucket(stem: str) -> str:
    # moto keeps one backend per process: other modules' buckets are there too.
    return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def proxy(s3: S3Store) -> AsyncIterator[HoldingProxy]:
    async with holding_proxy(s3.endpoint) as started:
        yield started


@pytest.fixture
async def controller(
    cluster: AdmissionCluster, proxy: HoldingProxy
) -> AsyncIterator[DatasetController]:
    # Loaders reach moto through the proxy; a failed load is not retried (one loader pod).
    config = make_config(proxy.endpoint, backoff_limit=0)
    started = DatasetController(cluster.api, config, identity="e2e")
    yield started
    await started.stop()


def dataset_pvc(name: str, source: str, credentials: str | None = None) -> dict[str, Any]:
    # No label: the PVC webhook adds it.
    annotations = {f"{PREFIX}data-source": source}
    if credentials:
        annotations[f"{PREFIX}data-credentials"] = credentials
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def consumer(name: str, claim: str, command: str, **pod: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": pod.pop("annotations", {})},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh", "-c", command],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
            **pod,
        },
    }


def create(core: client.CoreV1Api, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    create_call = getattr(core, f"create_namespaced_{kind}")
    return json.loads(create_call(NS, body, _preload_content=False).data)


def finished(core: client.CoreV1Api, name: str) -> dict[str, Any] | None:
    pod = read_pod(core, name)
    return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None


def mount_of(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]["volumeMounts"][0]


def assert_waiting(pod: dict[str, Any]) -> None:
    """Gated, labelled for the controller, and neither bound nor run by the kubelet."""
    assert pod["spec"]["schedulingGates"] == [GATE]
    assert pod["metadata"]["labels"][f"{PREFIX}data-wait"] == "true"
    assert not pod["spec"].get("nodeName")
    assert pod["status"].get("phase") == "Pending"
    assert not pod["status"].get("containerStatuses")


async def wait_loading(
    core: client.CoreV1Api, claim: str, proxy: HoldingProxy, bucket: str
) -> None:
    """The load is running: phase Loading and the loader's request is held at the proxy."""
    await eventually(
        lambda: phase_of(core, claim) == "Loading" and proxy.held.get(bucket, 0) > 0,
        what=f"the load of {claim} to be in flight",
    )


# Reads the data, then proves the mount is read-only: the write must fail.
READ_ONLY_CHECK = "cat /data/train/part-0/shard-0/file-0000.bin >/dev/null && ! touch /data/x"


async def test_consumers_wait_for_the_load_then_read_it_read_only(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    s3: S3Store,
    proxy: HoldingProxy,
    controller: DatasetController,
) -> None:
    core = cluster.core
    files = dataset_files(files=20, large_bytes=1024 * 1024)
    bucket = unique_bucket("imagenet")
    s3.put(bucket, files, prefix="train/", public=True)
    proxy.hold(bucket)
    await controller.start()

    # The PVC webhook labels the claim so the controller sees it.
    pvc = await asyncio.to_thread(
        create, core, "persistent_volume_claim", dataset_pvc("imagenet", f"s3://{bucket}")
    )
    assert pvc["metadata"]["labels"][f"{PREFIX}data-load"] == "true"
    await wait_loading(core, "imagenet", proxy, bucket)

    # Created mid-load: gated, labelled for the controller, mounted read-only.
    early = await asyncio.to_thread(
        create, core, "pod", consumer("early", "imagenet", READ_ONLY_CHECK)
    )
    assert early["spec"]["schedulingGates"] == [GATE]
    assert early["metadata"]["labels"][f"{PREFIX}data-wait"] == "true"
    assert mount_of(early)["readOnly"] is True
    assert early["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True

    # A pod pinned to a node cannot wait behind a gate: refused while the data is missing.
    pinned = consumer("pinned", "imagenet", "true", nodeName=kubelet.node_name)
    with pytest.raises(ApiException) as refused:
        await asyncio.to_thread(create, core, "pod", pinned)
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "pods.mutate.gpu-admission.io" denied')
    assert "cannot wait behind a scheduling gate" in message

    # The kubelet runs the loader's pod, but not the gated consumer.
    assert_waiting(read_pod(core, "early"))

    proxy.release()
    await wait_phase(core, "imagenet", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "imagenet")) == {f"train/{k}": v for k, v in files.items()}

    released = await eventually(
        lambda: finished(core, "early"), what="the released consumer to finish"
    )
    assert released["status"]["phase"] == "Succeeded", kubelet.logs(NS, "early", "main")
    assert not released["spec"].get("schedulingGates")
    assert not (kubelet.pvc_dir(NS, "imagenet") / "x").exists()

    # Created after the load: never gated; writable only when the pod asks for it.
    late = await asyncio.to_thread(create, core, "pod", consumer("late", "imagenet", "true"))
    assert not late["spec"].get("schedulingGates")
    assert f"{PREFIX}data-wait" not in (late["metadata"].get("labels") or {})
    assert mount_of(late)["readOnly"] is True
    writable = consumer(
        "writer",
        "imagenet",
        "touch /data/written",
        annotations={f"{PREFIX}dataset-writable": "true"},
    )
    stored = await asyncio.to_thread(create, core, "pod", writable)
    assert not stored["spec"].get("schedulingGates")
    assert not mount_of(stored).get("readOnly")

    done = await eventually(lambda: finished(core, "writer"), what="the writer to finish")
    assert done["status"]["phase"] == "Succeeded", kubelet.logs(NS, "writer", "main")
    assert (kubelet.pvc_dir(NS, "imagenet") / "written").exists()


class JobAndPhaseLog:
    """Watches loader Jobs and the PVC's phase: the most Jobs that ever existed at once, and
    the phases in the order they were written."""

    def __init__(self, cluster: AdmissionCluster, claim: str) -> None:
        self._api = kube_config.new_client_from_config(str(cluster.kubeconfig_path))
        self._claim = claim
        self._live: set[str] = set()
        self.most_jobs = 0
        self.phases: list[str] = []
        batch, core = client.BatchV1Api(self._api), client.CoreV1Api(self._api)
        self._watchers = [
            Watcher(functools.partial(batch.list_namespaced_job, NS), self._on_job, "jobs"),
            Watcher(
                functools.partial(core.list_namespaced_persistent_volume_claim, NS),
                self._on_pvc,
                "pvcs",
            ),
        ]

    def __enter__(self) -> JobAndPhaseLog:
        for watcher in self._watchers:
            watcher.start()
        for watcher in self._watchers:
            assert watcher.synced.wait(WAIT_SECONDS), "the test's watches did not list"
        return self

    def __exit__(self, *_exc: object) -> None:
        for watcher in self._watchers:
            watcher.stop()
        self._api.close()

    def _on_job(self, event: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if event == "DELETED":
            self._live.discard(name)
        else:
            self._live.add(name)
        self.most_jobs = max(self.most_jobs, len(self._live))

    def _on_pvc(self, _event: str, pvc: dict[str, Any]) -> None:
        if pvc["metadata"]["name"] != self._claim:
            return
        phase = (pvc["metadata"].get("annotations") or {}).get(PHASE)
        if phase and (not self.phases or self.phases[-1] != phase):
            self.phases.append(phase)


async def test_editing_the_source_mid_load_replaces_the_loader(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    s3: S3Store,
    proxy: HoldingProxy,
    controller: DatasetController,
) -> None:
    core = cluster.core
    old, new = unique_bucket("first-source"), unique_bucket("second-source")
    s3.put(old, {"old.txt": b"old data"}, public=True)
    new_files = {"new/a.txt": b"new data", "new/b.txt": b"more new data"}
    s3.put(new, new_files, public=True)
    proxy.hold(old)  # the first loader stays mid-request until it is killed

    with JobAndPhaseLog(cluster, "edited") as log:
        await controller.start()
        pvc = await asyncio.to_thread(
            create, core, "persistent_volume_claim", dataset_pvc("edited", f"s3://{old}")
        )
        reads_new = consumer("reader", "edited", 'test "$(cat /data/new/a.txt)" = "new data"')
        assert (await asyncio.to_thread(create, core, "pod", reads_new))["spec"][
            "schedulingGates"
        ] == [GATE]
        await wait_loading(core, "edited", proxy, old)
        uid = pvc["metadata"]["uid"]
        first_job = loader_job_name("edited", uid, f"s3://{old}")
        assert [j["metadata"]["name"] for j in jobs(cluster.api)] == [first_job]

        # The edit goes through the PVC webhooks like any other update.
        edit = {"metadata": {"annotations": {f"{PREFIX}data-source": f"s3://{new}"}}}
        await asyncio.to_thread(core.patch_namespaced_persistent_volume_claim, "edited", NS, edit)

        done = await wait_phase(core, "edited", "Succeeded")
        second_job = loader_job_name("edited", uid, f"s3://{new}")
        assert done["metadata"]["annotations"][f"{PREFIX}data-load-job"] == second_job
        assert [j["metadata"]["name"] for j in jobs(cluster.api)] == [second_job]
        assert tree(kubelet.pvc_dir(NS, "edited")) == new_files
        # Stopping the first load put the PVC back to Pending before the new load ran.
        loading = log.phases.index("Loading")
        assert "Pending" in log.phases[loading:], log.phases
        assert log.phases[-1] == "Succeeded", log.phases

        reader = await eventually(lambda: finished(core, "reader"), what="the reader to finish")
        assert reader["status"]["phase"] == "Succeeded", kubelet.logs(NS, "reader", "main")
    assert log.most_jobs == 1
    assert proxy.held == {old: proxy.held[old]}  # only the first source was ever held


async def test_a_failed_load_keeps_consumers_gated_and_warns_them(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    controller: DatasetController,
) -> None:
    core = cluster.core
    missing = unique_bucket("never-created")
    await asyncio.to_thread(
        create, core, "persistent_volume_claim", dataset_pvc("lost", f"s3://{missing}")
    )
    await asyncio.to_thread(create, core, "pod", consumer("stuck", "lost", "true"))
    await controller.start()

    failed = await wait_phase(core, "lost", "Failed")
    [condition] = [c for c in failed["status"]["conditions"] if c["type"] == "Loading"]
    assert "the source was not found" in condition["message"]
    warnings = await eventually(
        lambda: [e for e in events_for(core, "stuck") if e["type"] == "Warning"],
        what="a warning on the waiting pod",
    )
    assert [w["reason"] for w in warnings] == ["DatasetLoadFailed"]
    assert "'lost' failed to load" in warnings[0]["message"]
    assert "fix the PVC's data source" in warnings[0]["message"]
    # The kubelet ran the failed loader but leaves the consumer alone.
    assert_waiting(read_pod(core, "stuck"))
    assert read_pvc(core, "lost")["metadata"]["annotations"][PHASE] == "Failed"


def kubectl_create(cluster: AdmissionCluster, manifest: dict[str, Any]) -> str:
    """kubectl's error output for a refused create (it must be refused)."""
    result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    assert result.returncode != 0, result.stdout
    return result.stderr


async def test_a_bad_dataset_pvc_is_refused_with_what_to_fix(cluster: AdmissionCluster) -> None:
    with pytest.raises(ApiException) as refused:
        await asyncio.to_thread(
            create,
            cluster.core,
            "persistent_volume_claim",
            dataset_pvc("broken", "s3://Not_A_Bucket/x"),
        )
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "pvcs.validate.gpu-admission.io" denied')
    assert "Not_A_Bucket" in message and "lowercase" in message

    # What a researcher sees from kubectl when the credential Secret does not exist.
    shown = await asyncio.to_thread(
        kubectl_create, cluster, dataset_pvc("private", "s3://data", credentials="no-such-keys")
    )
    # No reason in the webhook's Status, so kubectl shows none (as with kube-apiserver).
    assert shown.startswith(
        'Error from server: error when creating "STDIN": admission webhook '
        '"pvcs.validate.gpu-admission.io" denied the request: gpu-admission.io/data-credentials: '
        "Secret 'no-such-keys' was not found in namespace 'ml'"
    ), shown
    assert "create it (type aws-credential) before the PVC" in shown
    with pytest.raises(ApiException) as absent:
        await asyncio.to_thread(cluster.core.read_namespaced_persistent_volume_claim, "private", NS)
    assert absent.value.status == 404
