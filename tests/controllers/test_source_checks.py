"""`gpu-admission audit --sources`, its pure parts: which PVCs are checked, the check Job (the
loader's, told to list only, on no volume of the PVC's), and the findings people read."""

from __future__ import annotations

from typing import Any

from controllers.dataset.jobspec import DATA_VOLUME
from controllers.dataset.records import pvc_record
from controllers.dataset.source_version_audit import (
    LoadedPvc,
    build_check_job,
    changed_finding,
    check_job_name,
    loaded_pvcs,
)
from gpu_admission.admission.findings import COULD_NOT_CHECK, SOURCE_CHANGED
from gpu_admission.config.model import Config

CONFIG = Config()
NAMES = CONFIG.names
THEN = "sha256:" + "1a" * 32
NOW = "sha256:" + "2b" * 32


def pvc_object(name: str, **annotations: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "annotations": {NAMES.data_source: "s3://ml-datasets/imagenet", **annotations},
        },
        "spec": {"accessModes": ["ReadWriteOnce"]},
    }
    record = pvc_record(obj, NAMES)
    assert record is not None
    return obj


def loaded(name: str, **annotations: str) -> dict[str, Any]:
    obj = pvc_object(name)
    record = pvc_record(obj, NAMES)
    assert record is not None
    obj["metadata"]["annotations"].update(
        {
            NAMES.data_load_phase: "Succeeded",
            NAMES.data_load_job: record.current_job,
            NAMES.data_digest: THEN,
            NAMES.data_digest_files: "40",
            NAMES.data_digest_bytes: "83886080",
            **annotations,
        }
    )
    return obj


def test_only_pvcs_loaded_from_their_current_source_with_a_digest_are_checked() -> None:
    objects = [
        loaded("checked"),
        loaded("failed", **{NAMES.data_load_phase: "Failed"}),
        loaded("older-load", **{NAMES.data_load_job: "dl-older"}),
        pvc_object("never-loaded"),
        {"metadata": {"name": "plain", "namespace": "ml"}},
    ]
    no_digest = loaded("no-digest")
    del no_digest["metadata"]["annotations"][NAMES.data_digest]
    checked = list(loaded_pvcs([*objects, no_digest], CONFIG))
    assert [p.record.name for p in checked] == ["checked"]
    assert (checked[0].digest, checked[0].files, checked[0].bytes) == (THEN, "40", "83886080")


def check_of(name: str = "imagenet") -> tuple[LoadedPvc, dict[str, Any]]:
    [pvc] = loaded_pvcs([loaded(name)], CONFIG)
    return pvc, build_check_job(pvc.record, CONFIG, "run-1", 300)


def test_the_check_job_is_the_loaders_told_to_list_only_on_no_volume_of_the_pvc() -> None:
    pvc, job = check_of()
    meta, template = job["metadata"], job["spec"]["template"]
    assert meta["name"] == check_job_name(pvc.record, "run-1") and meta["name"].startswith("dv-")
    for labels in (meta["labels"], template["metadata"]["labels"]):
        # Never taken for a load; selected by the uninstall.
        assert labels == {
            NAMES.source_check_label: "run-1",
            "app.kubernetes.io/managed-by": "gpu-admission",
        }
    command = template["spec"]["containers"][0]["command"]
    assert command[-1] == "--digest-only"
    assert command[command.index("--source") + 1] == "s3://ml-datasets/imagenet"
    [data] = [v for v in template["spec"]["volumes"] if v["name"] == DATA_VOLUME]
    assert data == {"name": DATA_VOLUME, "emptyDir": {}}
    assert not any("persistentVolumeClaim" in v for v in template["spec"]["volumes"])
    assert meta["ownerReferences"][0]["uid"] == "uid-imagenet"  # goes with its PVC
    spec = job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (1, 300)
    assert spec["ttlSecondsAfterFinished"] == 600
    long_name = "x" * 250
    assert len(check_job_name(check_of(long_name)[0].record, "run-1")) <= 63


def test_what_people_read_of_a_check() -> None:
    pvc, _ = check_of()
    same = {"phase": "Succeeded", "digest": THEN}
    assert changed_finding(pvc, same, NAMES.data_load_retry) is None
    now = {"phase": "Succeeded", "digest": NOW, "digestFiles": 41, "digestBytes": 83886999}
    finding = changed_finding(pvc, now, NAMES.data_load_retry)
    assert finding is not None and finding.result == SOURCE_CHANGED
    assert (finding.kind, finding.namespace, finding.name) == (
        "PersistentVolumeClaim",
        "ml",
        "imagenet",
    )
    assert finding.message == (
        "s3://ml-datasets/imagenet changed since it was loaded: it lists 41 files, 83886999 bytes "
        "now (digest 2b2b2b2b2b2b), the load read 40 files, 83886080 bytes (digest "
        "1a1a1a1a1a1a); load it again with `kubectl annotate pvc -n ml imagenet "
        "gpu-admission.io/data-load-retry=<any new value> --overwrite`"
    )
    denied = {"phase": "Failed", "cause": "access denied: these credentials ..."}
    failed = changed_finding(pvc, denied, NAMES.data_load_retry)
    assert failed is not None and failed.result == COULD_NOT_CHECK
    assert failed.message == "the source could not be listed: access denied: these credentials ..."
