"""Hugging Face Hub sources end to end: the webhook service admits the PVC and the
huggingface-credential Secret, the controller runs the loader (from the project's image where it
runs here) with the real huggingface_hub against the Hub stand-in behind a private CA; the
commit a branch resolved to is recorded on the PVC and keys the snapshot cache: a PVC pinned to
that commit starts as a clone of it, one pinned to another commit loads in full."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.dataset import DatasetController
from gpu_admission.cluster.snapshots import cache_key
from tests.e2e.admission.conftest import STORAGE_CLASS
from tests.e2e.datasets import eventually, make_config, wait_phase
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.hf_hub import HubStandIn, hub_stand_in
from tests.world.stand_ins.objectstores import tree

NS = "ml"
PREFIX = "gpu-admission.io/"
MODEL = {
    "config.json": b'{"hidden_size": 64}',
    "model.safetensors": bytes(range(256)) * 8192,
    "tokenizer.json": b'{"v": 1}' * 100,
}


@pytest.fixture
def hub() -> Iterator[HubStandIn]:
    with hub_stand_in() as stand_in:
        yield stand_in


@pytest.fixture
async def controller(
    cluster: AdmissionCluster, hub: HubStandIn
) -> AsyncIterator[DatasetController]:
    core = cluster.core
    bundle = {"metadata": {"name": "trust-bundle"}, "data": {"ca.crt": hub.ca_path.read_text()}}
    core.create_namespaced_config_map(NS, bundle)
    config = make_config(
        trusted_ca_config_map="trust-bundle", huggingface_endpoint=hub.endpoint, backoff_limit=1
    )
    started = DatasetController(cluster.api, config, identity="hub")
    await started.start()
    yield started
    await started.stop()


def pvc(name: str, source: str, **annotations: str) -> dict[str, Any]:
    values = {f"{PREFIX}data-source": source}
    values.update({PREFIX + k.replace("_", "-"): v for k, v in annotations.items()})
    return {
        "metadata": {"name": name, "annotations": values},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": STORAGE_CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def create(core: client.CoreV1Api, body: dict[str, Any]) -> dict[str, Any]:
    response = core.create_namespaced_persistent_volume_claim(NS, body, _preload_content=False)
    return json.loads(response.data)


def files_of(kubelet: FakeKubelet, name: str) -> dict[str, bytes]:
    found = tree(kubelet.pvc_dir(NS, name))
    return {k: v for k, v in found.items() if not k.startswith(".cache/")}


async def test_a_private_model_loads_at_its_commit_and_is_cloned_only_for_that_commit(
    cluster: AdmissionCluster, storage: FakeKubelet, hub: HubStandIn, controller: DatasetController
) -> None:
    core = cluster.core
    token = hub.token("ml-team")
    repo = hub.repo("acme/tiny-llm", private=True, readers={token})
    first = repo.commit(MODEL)
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": "hub"},
            "type": "huggingface-credential",
            "data": {"HF_TOKEN": base64.b64encode(token.encode()).decode()},
        },
    )
    await eventually(lambda: cluster.view.secret(NS, "hub"), what="the Secret in the view")
    create(core, pvc("at-main", "hf://acme/tiny-llm", data_credentials="hub"))
    loaded = await wait_phase(core, "at-main", "Succeeded")
    assert files_of(storage, "at-main") == MODEL
    annotations = loaded["metadata"]["annotations"]
    assert annotations[f"{PREFIX}data-commit"] == first
    kept = annotations[f"{PREFIX}data-snapshot"]
    assert token not in json.dumps(loaded)

    # The branch moves on; a PVC pinned to the first commit is a clone of what was loaded.
    second = repo.commit(MODEL | {"config.json": b'{"hidden_size": 128}'})
    key = cache_key(f"hf://acme/tiny-llm@{first}", "hub")
    await eventually(
        lambda: any(s.ready for s in cluster.view.dataset_snapshots(NS, key)),
        what="the webhook to see the ready snapshot",
    )
    pinned = create(core, pvc("pinned", f"hf://acme/tiny-llm@{first}", data_credentials="hub"))
    assert pinned["spec"]["dataSourceRef"]["name"] == kept
    refreshed = await wait_phase(core, "pinned", "Succeeded")
    assert files_of(storage, "pinned") == MODEL
    assert refreshed["metadata"]["annotations"][f"{PREFIX}data-load-files"] == "0"
    # Neither the new commit nor the branch (which now means the new commit) is cloned.
    for name, source in (("newer", f"hf://acme/tiny-llm@{second}"), ("main", "hf://acme/tiny-llm")):
        created = create(core, pvc(name, source, data_credentials="hub"))
        assert "dataSourceRef" not in created["spec"], name
    newer = await wait_phase(core, "newer", "Succeeded")
    assert newer["metadata"]["annotations"][f"{PREFIX}data-commit"] == second
    assert files_of(storage, "newer")["config.json"] == b'{"hidden_size": 128}'


async def test_a_dataset_narrowed_by_patterns_and_the_failures(
    cluster: AdmissionCluster, storage: FakeKubelet, hub: HubStandIn, controller: DatasetController
) -> None:
    core = cluster.core
    data = {f"data/train-{i}.parquet": bytes([i]) * 2048 for i in range(8)} | {"README.md": b"#"}
    hub.repo("acme/web-text", "dataset").commit(data)
    hub.repo("acme/gated-llm", gated=True).commit(MODEL)
    create(core, pvc("texts", "hf://datasets/acme/web-text", data_include="data/*"))
    create(core, pvc("gated", "hf://acme/gated-llm"))
    create(core, pvc("typo", "hf://acme/no-such-model"))
    await wait_phase(core, "texts", "Succeeded")
    assert files_of(storage, "texts") == {k: v for k, v in data.items() if k.startswith("data/")}
    for name, words in (
        ("gated", "the model acme/gated-llm is gated"),
        ("typo", "the Hub has no model repository acme/no-such-model, or it is private"),
    ):
        failed = await wait_phase(core, name, "Failed")
        message = failed["status"]["conditions"][0]["message"]
        assert words in message and "so it was not retried" in message
    # Refused at admission: a repository name the Hub would refuse, patterns on another source.
    for body, said in (
        (pvc("bad", "hf://acme/llama..7b"), "must not contain '--' or '..'"),
        (pvc("bad", "s3://bucket-1/x", data_include="*.json"), "hf:// sources only"),
    ):
        with pytest.raises(ApiException) as info:
            create(core, body)
        assert said in str(info.value.body)


async def test_a_throttled_hub_is_retried_by_the_job(
    cluster: AdmissionCluster, storage: FakeKubelet, hub: HubStandIn, controller: DatasetController
) -> None:
    core = cluster.core
    hub.repo("acme/busy").commit(MODEL)
    hub.fail("/api/models/acme/busy/", 429)
    create(core, pvc("busy", "hf://acme/busy"))
    batch = client.BatchV1Api(cluster.api)

    def first_pod_failed() -> bool:
        return any((j.status.failed or 0) >= 1 for j in batch.list_namespaced_job(NS).items)

    await eventually(first_pod_failed, what="the first loader pod to fail")
    hub.faults.clear()
    await wait_phase(core, "busy", "Succeeded")
    assert files_of(storage, "busy") == MODEL
