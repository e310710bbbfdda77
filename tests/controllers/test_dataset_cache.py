"""The dataset cache's pure parts: which snapshot a new PVC is cloned from (admission), the cache
key, the snapshot class, and how many snapshots per source are kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from controllers.dataset.snapshot_keeper import (
    SnapshotKeeper,
    choose_class,
    snapshot_name,
)
from gpu_admission.cluster.dataset_snapshots import SnapshotInfo
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.datasets.load import DatasetContent
from tests.controllers.pvc_records import changed
from tests.controllers.test_dataset_units import PVC
from tests.webhooks.policy_helpers import mutate_twice
from webhooks.policies.dataset_cache import choose_snapshot, policies

CONFIG = Config()
NAMES = CONFIG.names
SOURCE = "s3://ml-datasets/imagenet"
KEY = DatasetContent(SOURCE).cache_key


def snap(name: str, created: str, **fields: Any) -> SnapshotInfo:
    values: dict[str, Any] = dict(
        namespace="ml",
        name=name,
        key=KEY,
        ready=True,
        restore_size="100Gi",
        storage_class="cephfs",
        created=created,
    )
    values.update(fields)
    return SnapshotInfo(**values)


def pvc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "new",
            "namespace": "ml",
            "annotations": {NAMES.data_source: SOURCE, **spec.pop("annotations", {})},
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "cephfs",
            "resources": {"requests": {"storage": "200Gi"}},
            **spec,
        },
    }


def test_cache_key_separates_credentials() -> None:
    def key(source: str, credentials: str | None) -> str:
        return DatasetContent(source, credentials=credentials).cache_key

    assert key(SOURCE, None) == key(SOURCE, "")
    assert key(SOURCE, "team-a") != key(SOURCE, "team-b") != key(SOURCE, None)
    assert key(SOURCE, None) != key(SOURCE + "/x", None)


def test_choose_snapshot_takes_the_newest_usable_one() -> None:
    old, new = snap("old", "2026-11-01T00:00:00Z"), snap("new", "2026-11-20T00:00:00Z")
    assert choose_snapshot([old, new], "cephfs", "200Gi") == new
    assert choose_snapshot([old, replace(new, ready=False)], "cephfs", "200Gi") == old
    assert choose_snapshot([old, new], "other-class", "200Gi") is None
    assert choose_snapshot([old, new], "cephfs", "50Gi") is None  # the restore would not fit
    assert choose_snapshot([replace(new, restore_size="")], "cephfs", "200Gi") is None


def test_a_new_dataset_pvc_is_cloned_from_the_newest_ready_snapshot() -> None:
    view = StaticClusterView(snapshots=[snap("ds-a", "2026-11-01T00:00:00Z")])
    _, warnings, verdict, patched = mutate_twice(policies(CONFIG), pvc(), view)
    assert verdict is None
    ref = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "ds-a"}
    assert patched["spec"]["dataSourceRef"] == ref == patched["spec"]["dataSource"]
    assert patched["metadata"]["annotations"][NAMES.data_cloned_from] == "ds-a"
    assert "starts as a clone of VolumeSnapshot ds-a" in warnings[0]
    assert 'gpu-admission.io/data-cache: "false"' in warnings[0]


@pytest.mark.parametrize(
    "changes",
    [
        {"annotations": {"gpu-admission.io/data-cache": "false"}},  # opted out
        {"annotations": {"gpu-admission.io/data-credentials": "team-b"}},  # other credentials
        {"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "mine"}},  # user's choice
        {"storageClassName": None},
    ],
)
def test_no_clone(changes: dict[str, Any]) -> None:
    view = StaticClusterView(snapshots=[snap("ds-a", "2026-11-01T00:00:00Z")])
    ops, warnings, _, _ = mutate_twice(policies(CONFIG), pvc(**changes), view)
    assert ops == [] and warnings == []


def test_updates_are_never_cloned_and_the_cache_can_be_switched_off() -> None:
    view = StaticClusterView(snapshots=[snap("ds-a", "2026-11-01T00:00:00Z")])
    ops, _, _, _ = mutate_twice(policies(CONFIG), pvc(), view, operation="UPDATE")
    assert ops == []
    off = Config.model_validate({"dataset": {"cache": {"enabled": False}}})
    assert policies(off) == []


def test_snapshot_names_follow_the_load() -> None:
    assert snapshot_name("dl-imagenet-0123456789") == "ds-imagenet-0123456789"


def snapshot_class(name: str, driver: str, default: bool = False) -> dict[str, Any]:
    annotations = {"snapshot.storage.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}, "driver": driver}


def test_snapshot_class_is_the_drivers_default_or_its_only_one() -> None:
    classes = [
        snapshot_class("a", "d1"),
        snapshot_class("b", "d2"),
        snapshot_class("c", "d2", True),
    ]
    assert choose_class(classes, "d1") == "a"
    assert choose_class(classes, "d2") == "c"
    assert choose_class(classes, "d3") is None
    assert choose_class([snapshot_class("x", "d"), snapshot_class("y", "d")], "d") is None


class FakeApi:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete_snapshot(self, namespace: str, name: str) -> None:
        self.deleted.append(name)


class FakeInformer:
    def __init__(self, records: list[SnapshotInfo]) -> None:
        self.records = records

    def values(self) -> list[SnapshotInfo]:
        return self.records


async def test_only_the_newest_snapshots_of_a_key_are_kept() -> None:
    loaded = changed(PVC, source=SOURCE)
    keeper = SnapshotKeeper.__new__(SnapshotKeeper)
    keeper.api = FakeApi()  # type: ignore[assignment]
    keeper.settings = CONFIG.dataset.cache  # keep_per_source: 2
    keeper.informer = FakeInformer(  # type: ignore[assignment]
        [
            snap("ds-1", "2026-11-01T00:00:00Z"),
            snap("ds-2", "2026-11-02T00:00:00Z"),
            snap("ds-3", "2026-11-03T00:00:00Z"),
            snap("other-key", "2026-10-01T00:00:00Z", key="x"),
            snap("other-ns", "2026-10-01T00:00:00Z", namespace="prod"),
        ]
    )
    await keeper._prune(loaded, "ds-4", loaded.content.cache_key)
    assert keeper.api.deleted == ["ds-2", "ds-1"]  # ds-4 (new) and ds-3 stay


# -- what a snapshot holds: hub commits, digests and file patterns -------------------------------

COMMIT_A, COMMIT_B = "a" * 40, "b" * 40
HUB = "hf://acme/tiny-llm"


def test_a_hub_load_is_keyed_by_the_commit_it_read_never_by_its_branch() -> None:
    at_main = changed(PVC, source=HUB).content
    key = at_main.kept_key(COMMIT_A)
    assert key == DatasetContent(f"{HUB}@{COMMIT_A}").cache_key
    assert key != at_main.kept_key(COMMIT_B)
    assert at_main.kept_key(None) is None  # the commit is unknown: not kept
    pinned = changed(PVC, source=f"{HUB}@{COMMIT_A}").content
    assert pinned.kept_key(None) == key  # a pinned PVC names the same content
    narrowed = changed(PVC, source=HUB, include="*.json").content
    assert narrowed.kept_key(COMMIT_A) not in (key, None)


def test_digests_and_patterns_are_part_of_what_a_load_holds() -> None:
    url = "https://h.example/m.bin"
    assert DatasetContent(url).key == url
    assert DatasetContent(url, "AB" * 32).key == DatasetContent(url, "ab" * 32).key != url
    assert DatasetContent(HUB, None, "b, a").key == DatasetContent(HUB, None, "a,b").key != HUB


def hub_pvc(source: str, **annotations: str) -> dict[str, Any]:
    body = pvc(annotations=annotations)
    body["metadata"]["annotations"][NAMES.data_source] = source
    return body


def test_admission_clones_a_hub_pvc_only_for_the_exact_commit() -> None:
    held = snap("ds-hub", "2026-11-01T00:00:00Z", key=DatasetContent(f"{HUB}@{COMMIT_A}").cache_key)
    view = StaticClusterView(snapshots=[held])
    _, _, _, patched = mutate_twice(policies(CONFIG), hub_pvc(f"{HUB}@{COMMIT_A}"), view)
    assert patched["spec"]["dataSourceRef"]["name"] == "ds-hub"
    for other in (f"{HUB}@{COMMIT_B}", HUB, f"{HUB}@main"):
        ops, warnings, _, _ = mutate_twice(policies(CONFIG), hub_pvc(other), view)
        assert ops == [] and warnings == [], other
    # The same commit narrowed to other files is other content.
    ops, _, _, _ = mutate_twice(
        policies(CONFIG), hub_pvc(f"{HUB}@{COMMIT_A}", **{NAMES.data_include: "*.json"}), view
    )
    assert ops == []
