"""Sharded loads on the real control plane (tests/e2e/real_node.py): a sharded PVC that cannot be
shared refused, and progress read from the loader pods' logs through kube-apiserver's `pods/log`
while a holding proxy keeps part of the source in flight (the played kubelet runs the shards:
the proxy is on loopback). The shards' copies and a shard's lone retry run on the real node,
through the installed product: tests/install/loads/test_s3_loads.py."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from gpu_admission.config import Config
from tests.e2e.datasets import (
    NS,
    PREFIX,
    eventually,
    make_config,
    read_pvc,
    start,
    wait_phase,
)
from tests.world.control_plane import ControlPlane
from tests.world.harness import KUBECTL
from tests.world.stand_ins.holding_proxy import HoldingProxy, holding_proxy
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree

# A few hundred small objects and one much larger.
FILES = dataset_files(files=300, large_bytes=12 * 1024 * 1024)
PROGRESS = f"{PREFIX}data-load-progress"


def sharded_config(endpoint: str, **dataset: Any) -> Config:
    config = make_config(endpoint, progress_interval_seconds=0.3, **dataset)
    env = {**config.dataset.loader_env, "RCLONE_DISABLE_HTTP_KEEP_ALIVES": "true"}
    return config.model_copy(
        update={"dataset": config.dataset.model_copy(update={"loader_env": env})}
    )


def create_sharded_pvc(core: client.CoreV1Api, name: str, source: str, shards: int) -> None:
    body = {
        "metadata": {
            "name": name,
            "annotations": {
                f"{PREFIX}data-source": source,
                f"{PREFIX}data-load-parallelism": str(shards),
            },
            "labels": {f"{PREFIX}data-load": "true"},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    core.create_namespaced_persistent_volume_claim(NS, body, _preload_content=False)


async def test_read_write_once_pvc_asking_for_shards_is_refused(admission_cluster: Any) -> None:
    result = admission_cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": "rwo",
                    "annotations": {
                        f"{PREFIX}data-source": "s3://some-bucket/x",
                        f"{PREFIX}data-load-parallelism": "4",
                    },
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ),
    )
    assert result.returncode != 0
    assert "denied the request" in result.stderr
    assert "4 loader shards" in result.stderr and "ReadWriteMany" in result.stderr


@pytest.fixture
async def proxy(s3: S3Store) -> AsyncIterator[HoldingProxy]:
    async with holding_proxy(s3.endpoint) as started:
        yield started


def kubectl_progress(plane: ControlPlane, name: str) -> str:
    assert KUBECTL
    command = [KUBECTL, "--kubeconfig", str(plane.kubeconfig), "-n", NS, "get", "pvc"]
    done = subprocess.run(
        [*command, name, "-L", PROGRESS, "--no-headers"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split()[-1]


async def test_progress_advances_on_the_pvc_while_the_load_runs(
    kube_client: client.ApiClient,
    real_cluster: ControlPlane,
    core: client.CoreV1Api,
    kubelet: Any,
    s3: S3Store,
    proxy: HoldingProxy,
    controllers: list[DatasetController],
) -> None:
    s3.put("watched-data", FILES, public=True)
    # The large object and a dozen small ones wait at the proxy; with more transfer slots than
    # held objects, the other objects always get through meanwhile.
    proxy.hold("watched-data", "large/")
    proxy.hold("watched-data", "part-3/shard-6/")
    await start(controllers, kube_client, sharded_config(proxy.endpoint, transfers=32))
    create_sharded_pvc(core, "watched", "s3://watched-data", 2)

    def progress() -> tuple[str, str, str] | None:
        pvc = read_pvc(core, "watched")
        label = (pvc["metadata"].get("labels") or {}).get(PROGRESS)
        annotation = (pvc["metadata"].get("annotations") or {}).get(PROGRESS)
        conditions = pvc["status"].get("conditions") or [{}]
        if label and annotation and " files" in annotation:
            return label, annotation, conditions[0].get("message", "")
        return None

    def files_done(annotation: str) -> int:
        return int(annotation.split(", ")[1].split(" of ")[0])

    total = len(FILES)
    first = await eventually(
        lambda: (p := progress()) and 0 < files_done(p[1]) < total and p, what="progress"
    )
    label, annotation, message = first
    assert "of 2 shards done" in annotation and "%" in annotation
    assert message.startswith("copying s3://watched-data with 2 shards: ")
    assert message.endswith(annotation)
    assert kubectl_progress(real_cluster, "watched") == label  # readable with kubectl get pvc -L
    proxy.release("watched-data", "part-3/shard-6/")
    second = await eventually(
        lambda: (p := progress()) and files_done(p[1]) > files_done(annotation) and p,
        what="progress to advance",
    )
    assert files_done(second[1]) < total  # the large object is still held: not over yet
    assert read_pvc(core, "watched")["metadata"]["annotations"][f"{PREFIX}data-load-phase"] == (
        "Loading"
    )
    proxy.release()
    pvc = await wait_phase(core, "watched", "Succeeded")
    assert PROGRESS not in (pvc["metadata"].get("labels") or {})
    assert tree(kubelet.pvc_dir(NS, "watched")) == FILES
