"""`gpu-admission audit --sources`, end to end: two dataset PVCs loaded by the controller, one
source changed afterwards; the audit's check Jobs (the loader's image and credentials, listing
only) name the changed one and only it, and are gone when the audit ends."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from commands.audit import EXIT_FINDINGS, audit_command
from controllers.dataset import DatasetController
from tests.e2e.admission.test_dataset_cache import NS, PREFIX, create_pvc, dataset_pvc, load
from tests.e2e.datasets import make_config
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.objectstores import S3Store, dataset_files


@pytest.fixture
async def controller(cluster: AdmissionCluster, s3: S3Store) -> AsyncIterator[DatasetController]:
    started = DatasetController(cluster.api, make_config(s3.endpoint), identity="sources")
    yield started
    await started.stop()


async def test_audit_sources_names_the_pvc_whose_source_changed(
    cluster: AdmissionCluster,
    storage: FakeKubelet,
    s3: S3Store,
    controller: DatasetController,
    tmp_path: Path,
) -> None:
    core = cluster.core
    files = dataset_files(files=12, large_bytes=0)
    for bucket in ("steady-data", "moving-data"):
        s3.put(bucket, files, public=True)
    await controller.start()
    for name, bucket in (("steady", "steady-data"), ("moving", "moving-data")):
        create_pvc(core, dataset_pvc(name, f"s3://{bucket}"))
    loaded = {name: (await load(core, name))[0] for name in ("steady", "moving")}
    then = loaded["moving"]["metadata"]["annotations"][f"{PREFIX}data-digest"]
    key = sorted(files)[0]
    s3.put("moving-data", {key: bytes(b ^ 0xFF for b in files[key])}, public=True)

    config_file = tmp_path / "config.yaml"
    config = make_config(s3.endpoint)
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True)))
    args = argparse.Namespace(
        kubeconfig=cluster.kubeconfig_path,
        config=config_file,
        output="json",
        namespace=NS,
        sources=True,
        sources_timeout=120,
        sources_parallel=8,
    )
    out, err = io.StringIO(), io.StringIO()
    code = await asyncio.to_thread(audit_command, args, out, err)
    assert code == EXIT_FINDINGS, err.getvalue()
    report = json.loads(out.getvalue())
    changed = [f for f in report["findings"] if f["policy"] == "dataset-source-version"]
    assert [(f["name"], f["result"]) for f in changed] == [("moving", "source changed")]
    message = changed[0]["message"]
    assert message.startswith("s3://moving-data changed since it was loaded: it lists 12 files")
    assert f"(digest {then.removeprefix('sha256:')[:12]})" in message
    assert "data-load-retry=<any new value>" in message
    assert report["summary"]["objects"]["dataset sources"] == 2
    assert "checking the sources of 2 loaded dataset PVC(s)" in err.getvalue()
    # The audit's Jobs are gone (deleting them is asked; the API server may still hold them
    # while their pods go, marked for deletion).
    jobs = client.BatchV1Api(cluster.api).list_namespaced_job(
        NS, label_selector=f"{PREFIX}source-check"
    )
    assert all(j.metadata.deletion_timestamp for j in jobs.items)
