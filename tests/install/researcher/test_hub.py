"""Hugging Face Hub sources on a real node, through the installed product: the webhooks admit
the PVC and the huggingface-credential Secret, the installed controller runs the loader with the
real huggingface_hub against the Hub stand-in (a private mirror behind a private CA, set by the
engineer's overlay); the commit a branch resolved to is recorded on the PVC and keys the
snapshot cache: a PVC pinned to that commit starts as a clone of it, one pinned to another
commit loads in full."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    NS,
    PREFIX,
    cached_pvc,
    consumers_of_a_failed_dataset_are_warned,
    consumers_of_a_loaded_dataset_run,
    created_as_clone,
    credential_secret,
    failed_attempts,
    load_finished,
    load_succeeded,
    loading_message,
    volume_of,
)
from tests.install.researcher.conftest import Stores
from tests.world.stand_ins.hf_hub import HubStandIn
from tests.world.stand_ins.objectstores import tree

PHASE = f"{PREFIX}data-load-phase"
MODEL = {
    "config.json": b'{"hidden_size": 64}',
    "model.safetensors": bytes(range(256)) * 8192,
    "tokenizer.json": b'{"v": 1}' * 100,
}


@pytest.fixture
def hub(stores: Stores) -> HubStandIn:
    return stores.hub


def create(cluster: InstallCluster, body: dict[str, Any]) -> dict[str, Any]:
    response = cluster.core.create_namespaced_persistent_volume_claim(
        NS, body, _preload_content=False
    )
    return dict(json.loads(response.data))


def files_of(cluster: InstallCluster, name: str) -> dict[str, bytes]:
    """The volume's files, less huggingface_hub's own cache folder."""
    found = tree(volume_of(cluster, name))
    return {k: v for k, v in found.items() if not k.startswith(".cache/")}


def test_a_private_model_loads_at_its_commit_and_is_cloned_only_for_that_commit(
    installed: InstallCluster, hub: HubStandIn
) -> None:
    token = hub.token("ml-team")
    repo = hub.repo("acme/tiny-llm", private=True, readers={token})
    first = repo.commit(MODEL)
    credential_secret(installed, "hub", "huggingface-credential", {"HF_TOKEN": token})
    create(installed, cached_pvc("at-main", "hf://acme/tiny-llm", data_credentials="hub"))
    annotations = load_succeeded(installed, "at-main")
    assert files_of(installed, "at-main") == MODEL
    assert annotations[f"{PREFIX}data-commit"] == first
    kept = annotations[f"{PREFIX}data-snapshot"]
    written = installed.core.read_namespaced_persistent_volume_claim("at-main", NS)
    assert token not in json.dumps(installed.api.sanitize_for_serialization(written))

    # The branch moves on; a PVC pinned to the first commit is a clone of what was loaded.
    second = repo.commit(MODEL | {"config.json": b'{"hidden_size": 128}'})
    pinned = created_as_clone(
        installed, cached_pvc("pinned", f"hf://acme/tiny-llm@{first}", data_credentials="hub")
    )
    assert pinned.spec.data_source_ref.name == kept
    refreshed = load_succeeded(installed, "pinned")
    assert files_of(installed, "pinned") == MODEL
    assert refreshed[f"{PREFIX}data-load-files"] == "0"
    # Neither the new commit nor the branch (which now means the new commit) is cloned.
    for name, source in (("newer", f"hf://acme/tiny-llm@{second}"), ("main", "hf://acme/tiny-llm")):
        created = create(installed, cached_pvc(name, source, data_credentials="hub"))
        assert "dataSourceRef" not in created["spec"], name
    load_succeeded(installed, "main")  # nothing left in flight for the journeys after this one
    newer = load_succeeded(installed, "newer")
    assert newer[f"{PREFIX}data-commit"] == second
    assert files_of(installed, "newer")["config.json"] == b'{"hidden_size": 128}'


def test_a_dataset_narrowed_by_patterns_and_the_failures(
    installed: InstallCluster, hub: HubStandIn
) -> None:
    data = {f"data/train-{i}.parquet": bytes([i]) * 2048 for i in range(8)} | {"README.md": b"#"}
    hub.repo("acme/web-text", "dataset").commit(data)
    hub.repo("acme/gated-llm", gated=True).commit(MODEL)
    create(installed, cached_pvc("texts", "hf://datasets/acme/web-text", data_include="data/*"))
    create(installed, cached_pvc("gated", "hf://acme/gated-llm"))
    create(installed, cached_pvc("typo", "hf://acme/no-such-model", data_include="*.json"))
    load_succeeded(installed, "texts")
    assert files_of(installed, "texts") == {k: v for k, v in data.items() if k.startswith("data/")}
    # Its pods: the webhook and the controller agree on what a narrowed load is.
    consumers_of_a_loaded_dataset_run(installed, "texts")
    for name, words in (
        ("gated", "the model acme/gated-llm is gated"),
        ("typo", "the Hub has no model repository acme/no-such-model, or it is private"),
    ):
        assert load_finished(installed, name)[PHASE] == "Failed"
        message = loading_message(installed, name)
        assert words in message and "so it was not retried" in message
    consumers_of_a_failed_dataset_are_warned(installed, "typo")  # a narrowed load that failed
    # Refused at admission: a repository name the Hub would refuse, patterns on another source.
    for body, said in (
        (cached_pvc("bad", "hf://acme/llama..7b"), "must not contain '--' or '..'"),
        (cached_pvc("bad", "s3://bucket-1/x", data_include="*.json"), "hf:// sources only"),
    ):
        with pytest.raises(ApiException) as info:
            create(installed, body)
        assert said in str(info.value.body)


def test_a_throttled_hub_is_retried_by_the_job(installed: InstallCluster, hub: HubStandIn) -> None:
    hub.repo("acme/busy").commit(MODEL)
    hub.fail("/api/models/acme/busy/", 429)
    try:
        create(installed, cached_pvc("busy-model", "hf://acme/busy"))
        wait_for(
            lambda: failed_attempts(installed, "busy-model") >= 1,
            "the first loader pod to fail",
        )
    finally:
        hub.faults.clear()
    load_succeeded(installed, "busy-model")
    assert files_of(installed, "busy-model") == MODEL
