"""Pure parts of the dataset controller: decisions, PVC status patches, the Job spec, summaries."""

from __future__ import annotations

from dataclasses import replace

from controllers.dataset.decide import decide
from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
from controllers.dataset.records import (
    JOB_NAME_LABEL,
    Condition,
    JobRecord,
    LoaderPod,
    job_record,
    loader_pod,
    pvc_record,
)
from controllers.dataset.status import status_patch
from controllers.dataset.summary import summary_from_pods
from gpu_admission.config.model import Config
from gpu_admission.datasets.source import parse_data_source
from tests.controllers.pvc_records import changed, dataset_pvc

CONFIG = Config()
NAMES = CONFIG.names
PVC = dataset_pvc()


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
        pvc = changed(PVC, phase=phase, job=PVC.current_job)
        assert decide(pvc, [], 0, 1, 1) == decide(pvc, [], 5, 1, 1)
        assert not decide(pvc, [], 0, 1, 1).create_job


def test_edited_source_stops_the_old_job_first() -> None:
    old = job("dl-imagenet-old", started=True)
    edited = changed(PVC, source="s3://data-1/y", phase="Loading", job="dl-imagenet-old")
    plan = decide(edited, [old], 0, 1, 1)
    assert plan.delete_jobs == ("dl-imagenet-old",) and not plan.create_job
    assert plan.phase == "Pending"
    plan = decide(edited, [replace(old, deleting=True)], 0, 1, 1)
    assert plan.delete_jobs == () and not plan.create_job
    plan = decide(edited, [replace(old, complete=True)], 0, 1, 1)
    assert plan.create_job  # a finished old Job writes nothing any more


def test_deleting_pvc_deletes_its_unfinished_jobs() -> None:
    plan = decide(changed(PVC, deleting=True), [job(started=True)], 0, 1, 1)
    assert plan.delete_jobs == (PVC.current_job,) and plan.phase is None


def test_invalid_source_fails_without_a_job() -> None:
    plan = decide(changed(PVC, source="s3://Bad"), [], 0, 1, 1)
    assert plan.phase == "Failed" and not plan.create_job and "lowercase" in plan.message


def test_one_status_write_carries_the_condition_and_the_annotations() -> None:
    patch = status_patch(NAMES, PVC, "Loading", "Loading", "copying", PVC.current_job, None, "T1")
    assert patch == {
        "metadata": {
            "uid": PVC.uid,  # a precondition: never written onto a re-created PVC
            "annotations": {
                NAMES.data_load_phase: "Loading",
                NAMES.data_load_job: PVC.current_job,
                NAMES.data_load_bytes: None,
                NAMES.data_load_files: None,
                NAMES.data_load_duration: None,
                NAMES.data_load_progress: None,
            },
        },
        "status": {
            "conditions": [
                {
                    "type": "Loading",
                    "status": "True",
                    "reason": "Loading",
                    "message": "copying",
                    "lastProbeTime": None,
                    "lastTransitionTime": "T1",
                }
            ]
        },
    }


def test_status_write_keeps_the_transition_time_and_skips_what_is_already_there() -> None:
    loading = changed(
        PVC,
        phase="Loading",
        job=PVC.current_job,
        condition=Condition("True", "Loading", "copying", "T1"),
    )
    job = PVC.current_job
    assert status_patch(NAMES, loading, "Loading", "Loading", "copying", job, None, "T2") is None
    moved = status_patch(NAMES, loading, "Loading", "Loading", "more", job, None, "T2")
    assert moved is not None
    assert moved["status"]["conditions"][0]["lastTransitionTime"] == "T1"
    done = status_patch(NAMES, loading, "Succeeded", "Succeeded", "ok", job, {"files": 3}, "T3")
    assert done is not None
    assert done["status"]["conditions"][0]["lastTransitionTime"] == "T3"
    assert done["status"]["conditions"][0]["status"] == "False"
    assert done["metadata"]["annotations"][NAMES.data_load_files] == "3"
    # A condition another writer left without a transition time gets one.
    untimed = changed(loading, condition=Condition("True", "Loading", "copying", ""))
    filled = status_patch(NAMES, untimed, "Loading", "Loading", "copying", job, None, "T4")
    assert filled is not None and filled["status"]["conditions"][0]["lastTransitionTime"] == "T4"


def test_job_spec_s3_with_credentials_by_reference() -> None:
    keyed = changed(PVC, credentials="s3-reader")
    spec = build_loader_job(LoaderJobInputs.of(keyed, sync=True), CONFIG)
    assert spec["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = spec["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "none"
    ref = env["RCLONE_CONFIG_SRC_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]
    # Optional: a keyless Secret has no keys, and then rclone's env_auth uses the role.
    assert ref == {"name": "s3-reader", "key": "AWS_ACCESS_KEY_ID", "optional": True}
    assert env["RCLONE_CONFIG_SRC_ENV_AUTH"]["value"] == "true"
    role = env["AWS_ROLE_ARN"]["valueFrom"]["secretKeyRef"]
    assert role == {"name": "s3-reader", "key": "AWS_ROLE_ARN", "optional": True}
    token_file = "/var/run/secrets/sts.amazonaws.com/serviceaccount/token"
    assert env["AWS_WEB_IDENTITY_TOKEN_FILE"]["value"] == token_file
    assert env["RCLONE_CONFIG_SRC_ENDPOINT"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert all("value" not in e or "AKIA" not in e["value"] for e in container["env"])
    assert container["command"][-1] == "--sync"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"]
    assert {v["name"] for v in pod["volumes"]} == {"data", "scratch", "web-identity-token"}
    [token_volume] = [v for v in pod["volumes"] if v["name"] == "web-identity-token"]
    token = token_volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == "sts.amazonaws.com"
    assert pod["automountServiceAccountToken"] is False  # no Kubernetes API access
    assert spec["spec"]["template"]["metadata"]["labels"] == {
        NAMES.data_load_label: "true",
        "app.kubernetes.io/managed-by": "gpu-admission",  # what the uninstall selects
    }
    record = job_record(spec)
    assert record is not None and record.pvc_key == "ml/imagenet" and not record.finished


def loader_job_pod(config: Config, url: str = "s3://data-1/x", secret: str | None = None) -> dict:
    """The pod template of the loader Job for PVC ml/p of `url`."""
    inputs = LoaderJobInputs("j", "ml", "p", "u", parse_data_source(url), secret=secret)
    job = build_loader_job(inputs, config)
    return job["spec"]["template"]["spec"]


def test_job_spec_gcs_key_file_volume_and_anonymous() -> None:
    pod = loader_job_pod(CONFIG, "gs://data-1/x", "gcs-reader")
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RCLONE_CONFIG_SRC_SERVICE_ACCOUNT_FILE"] == (
        "/var/run/secrets/gcp/gcs-reader/key.json"
    )
    assert any(v.get("secret", {}).get("secretName") == "gcs-reader" for v in pod["volumes"])
    anonymous = loader_job_pod(CONFIG, "gs://data-1/x")
    env = {e["name"]: e.get("value") for e in anonymous["containers"][0]["env"]}
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
    def pod(finished: str, code: int, message: str) -> LoaderPod:
        obj = {
            "metadata": {"name": finished, "namespace": "ml", "labels": {JOB_NAME_LABEL: "j"}},
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
            },
        }
        record = loader_pod(obj)
        assert record is not None and record.job == "j"
        return record

    pods = [pod("T2", 1, '{"cause": "second"}'), pod("T1", 1, '{"cause": "first"}')]
    assert summary_from_pods(pods, job(failed_for_good=True), 60)["cause"] == "second"
    assert summary_from_pods([pod("T1", 1, "plain log tail")], job(failed_for_good=True), 60) == {
        "cause": "plain log tail"
    }
    expired = job(failed_for_good=True, failure_reason="DeadlineExceeded")
    assert "longer than its deadline (60 s)" in summary_from_pods([], expired, 60)["cause"]


def test_job_spec_trusts_the_configured_ca_bundle_and_none_by_default() -> None:
    plain = loader_job_pod(CONFIG)
    assert "SSL_CERT_FILE" not in {e["name"] for e in plain["containers"][0]["env"]}
    trusting = Config.model_validate(
        {"dataset": {"trusted_ca_config_map": "trust-bundle", "trusted_ca_key": "bundle.pem"}}
    )
    pod = loader_job_pod(trusting)
    [volume] = [v for v in pod["volumes"] if v["name"] == "trusted-ca"]
    assert volume["configMap"] == {
        "name": "trust-bundle",
        "items": [{"key": "bundle.pem", "path": "ca.crt"}],
    }
    container = pod["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "trusted-ca")
    assert mount["mountPath"] == "/etc/gpu-admission/trusted-ca" and mount["readOnly"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SSL_CERT_FILE"] == "/etc/gpu-admission/trusted-ca/ca.crt"
