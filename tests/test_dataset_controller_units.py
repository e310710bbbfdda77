"""Pure parts of the dataset controller: decisions, PVC status patches, the Job spec, summaries."""

from __future__ import annotations

from dataclasses import replace

import jsonpatch

from controllers.dataset.controller import summary_from_pods
from controllers.dataset.decide import decide
from controllers.dataset.jobspec import build_loader_job
from controllers.dataset.records import JobRecord, PvcRecord, job_record, pvc_record
from controllers.dataset.status import condition_patch, loading_condition, merged_conditions
from gpu_admission.config import Config
from gpu_admission.datasource import loader_job_name, parse_data_source

CONFIG = Config()
NAMES = CONFIG.names
PVC = PvcRecord("ml", "imagenet", "uid-1", "s3://data-1/x", None, False, None, None)


def job(name: str | None = None, **fields) -> JobRecord:  # type: ignore[no-untyped-def]
    values = dict(
        namespace="ml",
        name=name or PVC.current_job,
        pvc_name="imagenet",
        pvc_uid="uid-1",
        active=0,
        succeeded=0,
        failed=0,
        complete=False,
        failed_for_good=False,
        failure_reason="",
        failure_message="",
        started=False,
    )
    values.update(fields)
    return JobRecord(**values)


def test_new_pvc_creates_a_job_unless_at_capacity() -> None:
    plan = decide(PVC, [], 0, 2, 5.0)
    assert plan.create_job and plan.phase == "Pending"
    plan = decide(PVC, [], 2, 2, 5.0)
    assert not plan.create_job and plan.reason == "WaitingForCapacity"
    assert plan.requeue_after == 5.0


def test_job_progress_maps_to_phases() -> None:
    assert decide(PVC, [job()], 0, 1, 1).phase == "Pending"
    assert decide(PVC, [job(started=True, active=1)], 0, 1, 1).phase == "Loading"
    done = decide(PVC, [job(complete=True)], 0, 1, 1)
    assert done.phase == "Succeeded" and done.finished_job is not None
    assert decide(PVC, [job(failed_for_good=True)], 0, 1, 1).phase == "Failed"


def test_finished_load_whose_job_was_cleaned_up_is_left_alone() -> None:
    for phase in ("Succeeded", "Failed"):
        pvc = replace(PVC, phase=phase, job=PVC.current_job)
        assert decide(pvc, [], 0, 1, 1) == decide(pvc, [], 5, 1, 1)
        assert not decide(pvc, [], 0, 1, 1).create_job


def test_edited_source_stops_the_old_job_first() -> None:
    old = job("dl-imagenet-old", started=True)
    edited = replace(PVC, source="s3://data-1/y", phase="Loading", job="dl-imagenet-old")
    plan = decide(edited, [old], 0, 1, 1)
    assert plan.delete_jobs == ("dl-imagenet-old",) and not plan.create_job
    assert plan.phase == "Pending"
    plan = decide(edited, [replace(old, deleting=True)], 0, 1, 1)
    assert plan.delete_jobs == () and not plan.create_job
    plan = decide(edited, [replace(old, complete=True)], 0, 1, 1)
    assert plan.create_job  # a finished old Job writes nothing any more


def test_deleting_pvc_deletes_its_unfinished_jobs() -> None:
    plan = decide(replace(PVC, deleting=True), [job(started=True)], 0, 1, 1)
    assert plan.delete_jobs == (PVC.current_job,) and plan.phase is None


def test_invalid_source_fails_without_a_job() -> None:
    plan = decide(replace(PVC, source="s3://Bad"), [], 0, 1, 1)
    assert plan.phase == "Failed" and not plan.create_job and "lowercase" in plan.message


def test_condition_patch_keeps_other_conditions_and_sets_transition_time() -> None:
    pvc = {
        "metadata": {"resourceVersion": "7"},
        "status": {"conditions": [{"type": "Resizing", "status": "True"}]},
    }
    wanted = loading_condition("Loading", "Loading", "copying")
    ops = condition_patch(pvc, wanted, "2026-01-01T00:00:00Z")
    assert ops is not None and ops[0] == {
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": "7",
    }
    patched = jsonpatch.apply_patch(pvc, ops)
    assert [c["type"] for c in patched["status"]["conditions"]] == ["Resizing", "Loading"]
    assert patched["status"]["conditions"][1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    # Same condition again: nothing to write. New message, same status: time kept.
    assert condition_patch(patched, wanted, "2026-01-02T00:00:00Z") is None
    again = merged_conditions(
        patched["status"]["conditions"], loading_condition("Loading", "Loading", "more"), "T2"
    )
    assert again is not None and again[1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    done = merged_conditions(again, loading_condition("Succeeded", "Succeeded", "ok"), "T3")
    assert done is not None and done[1]["status"] == "False"
    assert done[1]["lastTransitionTime"] == "T3"


def test_null_transition_time_from_another_writer_is_filled_in() -> None:
    current = [
        {
            "type": "Loading",
            "status": "True",
            "reason": "Loading",
            "message": "copying",
            "lastProbeTime": None,
            "lastTransitionTime": None,
        }
    ]
    result = merged_conditions(current, loading_condition("Loading", "Loading", "copying"), "T")
    assert result is not None and result[0]["lastTransitionTime"] == "T"


def test_job_spec_s3_with_credentials_by_reference() -> None:
    source = parse_data_source("s3://data-1/x")
    job_name = loader_job_name("imagenet", "uid-1", source.url)
    spec = build_loader_job(
        job_name=job_name,
        pvc_namespace="ml",
        pvc_name="imagenet",
        pvc_uid="uid-1",
        source=source,
        secret="s3-reader",
        sync=True,
        config=CONFIG,
    )
    assert spec["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = spec["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "none"
    ref = env["RCLONE_CONFIG_SRC_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "s3-reader", "key": "AWS_ACCESS_KEY_ID"}
    assert env["RCLONE_CONFIG_SRC_ENDPOINT"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert all("value" not in e or "AKIA" not in e["value"] for e in container["env"])
    assert container["command"][-1] == "--sync"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"]
    assert {v["name"] for v in pod["volumes"]} == {"data", "scratch"}
    assert spec["spec"]["template"]["metadata"]["labels"] == {NAMES.data_load_label: "true"}
    record = job_record(spec)
    assert record is not None and record.pvc_key == "ml/imagenet" and not record.finished


def test_job_spec_gcs_key_file_volume_and_anonymous() -> None:
    source = parse_data_source("gs://data-1/x")
    spec = build_loader_job(
        job_name="j",
        pvc_namespace="ml",
        pvc_name="p",
        pvc_uid="u",
        source=source,
        secret="gcs-reader",
        sync=False,
        config=CONFIG,
    )
    pod = spec["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RCLONE_CONFIG_SRC_SERVICE_ACCOUNT_FILE"] == (
        "/var/run/secrets/gcp/gcs-reader/key.json"
    )
    assert any(v.get("secret", {}).get("secretName") == "gcs-reader" for v in pod["volumes"])
    anonymous = build_loader_job(
        job_name="j",
        pvc_namespace="ml",
        pvc_name="p",
        pvc_uid="u",
        source=source,
        secret=None,
        sync=False,
        config=CONFIG,
    )
    env = {
        e["name"]: e.get("value")
        for e in anonymous["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["RCLONE_CONFIG_SRC_ANONYMOUS"] == "true"


def test_pvc_record_only_for_dataset_pvcs() -> None:
    assert pvc_record({"metadata": {"name": "x"}}, NAMES) is None
    record = pvc_record(
        {
            "metadata": {
                "name": "x",
                "namespace": "ml",
                "uid": "u",
                "annotations": {NAMES.data_source: "s3://b12", NAMES.data_load_sync: "true"},
            }
        },
        NAMES,
    )
    assert record is not None and record.sync and not record.loaded


def test_summary_from_the_last_attempt_and_deadline_cause() -> None:
    def pod(finished: str, code: int, message: str) -> dict:
        return {
            "status": {
                "containerStatuses": [
                    {
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "finishedAt": finished,
                                "message": message,
                            }
                        }
                    }
                ]
            }
        }

    pods = [pod("T2", 1, '{"cause": "second"}'), pod("T1", 1, '{"cause": "first"}')]
    assert summary_from_pods(pods, job(failed_for_good=True), 60)["cause"] == "second"
    assert summary_from_pods([pod("T1", 1, "plain log tail")], job(failed_for_good=True), 60) == {
        "cause": "plain log tail"
    }
    expired = job(failed_for_good=True, failure_reason="DeadlineExceeded")
    assert "longer than its deadline (60 s)" in summary_from_pods([], expired, 60)["cause"]
