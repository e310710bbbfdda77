"""Datasets end to end with the real webhooks in the admission path: the PVC webhook labels the
claim, the pod webhook gates consumers and mounts the data read-only, the controller loads the
data with real rclone from moto and releases the gate, and the fake kubelet runs the consumer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.dataset import DatasetController
from tests.e2e_harness import AdmissionCluster, AdmissionClusterFactory
from tests.kubeapi.kubelet import FakeKubelet
from tests.objectstores import S3Store, dataset_files, s3_store

from .test_dataset_controller_e2e import eventually, make_config, read_pod, wait_phase

NS = "ml"
PREFIX = "gpu-admission.io/"
GATE = {"name": f"{PREFIX}data-load"}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Store]:
    with s3_store() as store:
        yield store


@pytest.fixture
def cluster(admission_cluster_factory: AdmissionClusterFactory) -> AdmissionCluster:
    return admission_cluster_factory()


@pytest.fixture
def kubelet(cluster: AdmissionCluster, tmp_path: Path) -> Iterator[FakeKubelet]:
    node = FakeKubelet(cluster.api, pvc_base_dir=tmp_path / "pvcs", run_all_pods=True)
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
async def controller(cluster: AdmissionCluster, s3: S3Store) -> AsyncIterator[DatasetController]:
    started = DatasetController(cluster.api, make_config(s3.endpoint), identity="e2e")
    yield started
    await started.stop()


def dataset_pvc(name: str, source: str) -> dict[str, Any]:
    # No label: the PVC webhook adds it.
    return {
        "metadata": {"name": name, "annotations": {f"{PREFIX}data-source": source}},
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


# Reads the data, then proves the mount is read-only: the write must fail.
READ_ONLY_CHECK = "cat /data/train/part-0/shard-0/file-0000.bin >/dev/null && ! touch /data/x"


async def test_consumers_wait_for_the_load_then_read_it_read_only(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
) -> None:
    core = cluster.core
    files = dataset_files(files=20, large_bytes=1024 * 1024)
    s3.put("e2e-webhook-public", files, prefix="train/", public=True)

    # The PVC webhook labels the claim so the controller sees it.
    pvc = await asyncio.to_thread(
        create, core, "persistent_volume_claim", dataset_pvc("imagenet", "s3://e2e-webhook-public")
    )
    assert pvc["metadata"]["labels"][f"{PREFIX}data-load"] == "true"

    # Created before any load: gated, labelled for the controller, mounted read-only.
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

    # Nothing schedules a gated pod.
    assert not read_pod(core, "early")["spec"].get("nodeName")

    await controller.start()
    await wait_phase(core, "imagenet", "Succeeded")

    released = await eventually(
        lambda: finished(core, "early"), what="the released consumer to finish"
    )
    assert released["status"]["phase"] == "Succeeded", kubelet.logs(NS, "early", "main")
    assert not released["spec"].get("schedulingGates")
    assert not (kubelet.pvc_dir(NS, "imagenet") / "x").exists()

    # Created after the load: never gated; writable only when the pod asks for it.
    late = await asyncio.to_thread(create, core, "pod", consumer("late", "imagenet", "true"))
    assert not late["spec"].get("schedulingGates")
    assert mount_of(late)["readOnly"] is True
    writable = consumer(
        "writer",
        "imagenet",
        "touch /data/written",
        annotations={f"{PREFIX}dataset-writable": "true"},
    )
    stored = await asyncio.to_thread(create, core, "pod", writable)
    assert not mount_of(stored).get("readOnly")

    done = await eventually(lambda: finished(core, "writer"), what="the writer to finish")
    assert done["status"]["phase"] == "Succeeded", kubelet.logs(NS, "writer", "main")
    assert (kubelet.pvc_dir(NS, "imagenet") / "written").exists()


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
