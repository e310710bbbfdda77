"""Pure parts of sharded loads and progress: the Indexed Job spec, summed summaries, the progress
record's words and label, and the status patch that carries them."""

from __future__ import annotations

import json
import re

import pytest

from controllers.dataset.decide import REASON_INVALID_PARALLELISM, decide
from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
from controllers.dataset.progress import finished_progress
from controllers.dataset.records import LoaderPod, count_indexes, loader_pod, pvc_record
from controllers.dataset.status import status_patch
from controllers.dataset.summary import (
    SOURCE_CHANGED,
    failure_message,
    last_failure_cause,
    summary_from_pods,
)
from gpu_admission.datasets.progress import (
    LoadProgress,
    Progress,
    combine,
    from_stats,
    last_progress,
)
from gpu_admission.datasets.source import parse_data_source
from tests.controllers.pvc_records import changed
from tests.controllers.test_dataset_units import CONFIG, NAMES, PVC, job

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # and at most 63


def sharded_job(shards: int = 4) -> dict:
    source = parse_data_source("s3://data-1/x")
    inputs = LoaderJobInputs("dl-x", "ml", "imagenet", "uid-1", source, shards=shards)
    return build_loader_job(inputs, CONFIG)


def test_sharded_load_is_one_indexed_job_retrying_each_index_alone() -> None:
    spec = sharded_job(4)["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimitPerIndex"] == CONFIG.dataset.backoff_limit_per_shard
    assert "backoffLimit" not in spec  # defaulted to MaxInt32: the per-index limit governs
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    command = pod["containers"][0]["command"]
    assert command[command.index("--shard-count") + 1] == "4"
    assert "--shard-index" not in command  # from JOB_COMPLETION_INDEX
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TMPDIR"] == "/var/cache/loader"  # the shard's file list; root is read-only


def test_one_shard_stays_a_plain_job() -> None:
    spec = sharded_job(1)["spec"]
    assert "completionMode" not in spec and spec["backoffLimit"] == CONFIG.dataset.backoff_limit
    assert "--shard-count" not in spec["template"]["spec"]["containers"][0]["command"]


def test_pvc_record_takes_shards_from_the_annotation_and_the_access_modes() -> None:
    def record(modes: list[str], value: str | None) -> tuple[int, str | None]:
        annotations = {NAMES.data_source: "s3://data-1/x"}
        if value is not None:
            annotations[NAMES.data_load_parallelism] = value
        obj = {
            "metadata": {"name": "p", "namespace": "ml", "uid": "u", "annotations": annotations},
            "spec": {"accessModes": modes},
        }
        found = pvc_record(obj, NAMES, 1, 16)
        assert found is not None
        return found.shards, found.shards_error

    assert record(["ReadWriteMany"], "4") == (4, None)
    assert record(["ReadWriteMany"], None) == (1, None)
    shards, error = record(["ReadWriteOnce"], "4")
    assert shards == 1 and error is not None and "ReadWriteMany" in error


def test_a_pvc_that_slipped_past_the_webhook_fails_with_the_reason() -> None:
    pvc = changed(PVC, shards_error="data-load-parallelism: 'x' is not a whole number")
    plan = decide(pvc, [], 0, 5, 1.0)
    assert (plan.phase, plan.reason, plan.create_job) == (
        "Failed",
        REASON_INVALID_PARALLELISM,
        False,
    )
    assert "not a whole number" in plan.message
    # A load already running keeps going.
    assert decide(pvc, [job(started=True, active=1)], 0, 5, 1.0).phase == "Loading"


def shard_pod(index: int, exit_code: int | None, finished_at: str = "", **summary) -> LoaderPod:
    return LoaderPod(
        "ml",
        f"dl-x-{index}-{finished_at or 'run'}",
        "dl-x",
        exit_code,
        finished_at,
        json.dumps(summary) if summary else "",
        index=index,
        running=exit_code is None,
    )


def ok(index: int, files: int, size: int, listing: str = "abc", at: str = "T2") -> LoaderPod:
    return shard_pod(
        index, 0, at, phase="Succeeded", files=files, bytes=size, checks=0,
        durationSeconds=float(index + 1), shard=index, shards=3, listing=listing,
        plannedFiles=files, plannedBytes=size,
    )  # fmt: skip


def test_summary_sums_the_shards_last_successful_attempts() -> None:
    pods = [
        ok(0, 10, 100),
        shard_pod(1, 1, "T1", phase="Failed", files=2, bytes=5, cause="network"),
        ok(1, 20, 200, at="T3"),
        ok(2, 30, 300),
    ]
    summary = summary_from_pods(pods, job(complete=True, completions=3), 60)
    assert (summary["files"], summary["bytes"], summary["shards"]) == (60, 600, 3)
    assert summary["shardFiles"] == [10, 20, 30]
    assert summary["durationSeconds"] == 3.0  # the slowest shard: they run side by side
    assert "cause" not in summary


def test_shards_that_listed_different_sources_are_not_a_success() -> None:
    pods = [ok(0, 1, 1), ok(1, 1, 1, listing="other"), ok(2, 1, 1)]
    done = job(complete=True, completions=3)
    summary = summary_from_pods(pods, done, 60)
    assert summary["cause"] == SOURCE_CHANGED
    message = failure_message("s3://b/x", "imagenet", done, summary, NAMES.data_load_retry)
    assert "no loader failed, so nothing was retried" in message
    assert "transient" not in message


def test_a_failed_shard_names_itself_and_its_cause() -> None:
    pods = [
        ok(0, 1, 1),
        shard_pod(1, 3, "T1", phase="Failed", cause="access denied: these credentials"),
        shard_pod(1, 3, "T2", phase="Failed", cause="access denied: these credentials"),
        ok(2, 1, 1),
    ]
    failed = job(failed_for_good=True, failure_reason="FailedIndexes", completions=3)
    summary = summary_from_pods(pods, failed, 60)
    assert summary["cause"] == "shard 1 of 3 failed: access denied: these credentials"


def test_loader_pod_knows_its_shard_and_whether_it_runs() -> None:
    obj = {
        "metadata": {
            "name": "dl-x-2-abcde",
            "namespace": "ml",
            "labels": {
                "batch.kubernetes.io/job-name": "dl-x",
                "batch.kubernetes.io/job-completion-index": "2",
            },
        },
        "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
    }
    pod = loader_pod(obj)
    assert pod is not None and (pod.index, pod.running, pod.exit_code) == (2, True, None)


@pytest.mark.parametrize(("text", "count"), [("", 0), ("0", 1), ("0-2,4", 4), ("1,3-7", 6)])
def test_count_indexes(text: str, count: int) -> None:
    assert count_indexes(text) == count


def test_progress_line_round_trip_and_rclone_stats() -> None:
    stats = {"bytes": 1024, "totalBytes": 4096, "transfers": 3, "totalTransfers": 9, "speed": 512.4}
    progress = from_stats(stats, 1, 4, planned_files=10, planned_bytes=8192, listed=(32768, 40))
    assert (progress.bytesDone, progress.bytesTotal, progress.filesTotal) == (1024, 8192, 10)
    lines = ["noise", "{not json", progress.line(), '{"msg":"progress","progress":{"x":1}}']
    assert last_progress(lines) == progress  # unknown fields are ignored, not fatal
    assert last_progress(["{}", "plain"]) is None


def test_combined_progress_words_and_label() -> None:
    gib = 1024**3
    records = [
        Progress(bytesDone=gib, bytesTotal=gib, filesDone=100, filesTotal=100, listedBytes=4 * gib),
        Progress(bytesDone=gib // 2, bytesTotal=gib, filesDone=10, filesTotal=100, speed=1048576),
    ]
    progress = combine(records, shards=4, shards_done=1)
    assert progress.bytes_total == 4 * gib  # the whole source, not just the shards that ran
    assert progress.message() == (
        "1.5 GiB of 4.0 GiB (37%), 110 of 200 files, 1 of 4 shards done, 1.0 MiB/s, about 43m left"
    )
    label = progress.label()
    assert label == "37pct_1.5Gi-of-4.0Gi_eta-43m_1of4-shards"
    assert LABEL_VALUE.match(label) and len(label) <= 63


@pytest.mark.parametrize(
    "progress",
    [
        LoadProgress(0, 0, 0, 0, 0.0, 1, 0),
        LoadProgress(5, 10, 1, 2, 0.0, 1, 0),
        LoadProgress(10**15, 10**16, 10**9, 10**10, 1.0, 100, 99),
    ],
)
def test_every_label_is_a_valid_label_value(progress: LoadProgress) -> None:
    label = progress.label()
    assert LABEL_VALUE.match(label) and len(label) <= 63, label


def test_status_patch_writes_progress_as_annotation_and_label_and_clears_them() -> None:
    progress = combine([Progress(bytesDone=5, bytesTotal=10, filesDone=1, filesTotal=2)], 1, 0)
    patch = status_patch(
        NAMES, PVC, "Loading", "Loading", "copying", PVC.current_job, None, "T1", progress
    )
    assert patch is not None
    assert patch["metadata"]["labels"] == {NAMES.data_load_progress: "50pct_5B-of-10B"}
    assert patch["metadata"]["annotations"][NAMES.data_load_progress] == progress.message()
    shown = changed(PVC, progress_label="50pct_5B-of-10B")
    done = status_patch(NAMES, shown, "Succeeded", "Succeeded", "loaded", PVC.current_job, {}, "T2")
    assert done is not None
    assert done["metadata"]["labels"] == {NAMES.data_load_progress: None}
    assert done["metadata"]["annotations"][NAMES.data_load_progress] is None


def test_a_succeeded_shard_counts_as_complete() -> None:
    progress = finished_progress(ok(2, 30, 300))
    assert progress is not None
    assert (progress.bytesDone, progress.bytesTotal, progress.shard) == (300, 300, 2)


def test_loader_jobs_fail_at_once_on_permanent_failures_and_ignore_disruptions() -> None:
    for shards in (1, 4):
        rules = sharded_job(shards)["spec"]["podFailurePolicy"]["rules"]
        assert rules[0] == {
            "action": "FailJob",
            "onExitCodes": {"containerName": "loader", "operator": "In", "values": [10]},
        }
        assert rules[1]["action"] == "Ignore"
        assert rules[1]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]


def test_a_retry_value_is_a_new_load() -> None:
    again = changed(PVC, retry="2026-11-23")
    assert again.current_job != PVC.current_job
    assert changed(PVC, retry="").current_job == PVC.current_job  # no value: the old name
    plan = decide(again, [job(failed_for_good=True)], 0, 5, 1.0)
    assert plan.create_job  # the failed Job is of the older load


def test_failure_messages_say_whether_it_was_retried_and_how_to_load_again() -> None:
    key = NAMES.data_load_retry
    permanent = failure_message(
        "s3://b/x", "imagenet", job(failure_reason="PodFailurePolicy", failed=1),
        {"cause": "access denied: ..."}, key,
    )  # fmt: skip
    assert permanent == (
        "loading s3://b/x failed: access denied: ...; trying again cannot fix this, so it was "
        "not retried; once fixed, load again with `kubectl annotate pvc imagenet "
        "gpu-admission.io/data-load-retry=<any new value>`"
    )
    transient = failure_message(
        "s3://b/x", "imagenet", job(failure_reason="BackoffLimitExceeded", failed=3),
        {"cause": "the storage endpoint could not be reached"}, key,
    )  # fmt: skip
    assert "it failed 3 times: transient failures are retried automatically" in transient


def test_a_running_load_says_it_is_retrying() -> None:
    plan = decide(PVC, [job(started=True, active=1, failed=2)], 0, 5, 1.0)
    assert plan.message == "copying s3://data-1/x (retrying after 2 transient failures)"


def test_a_retrying_load_says_why_its_last_attempt_failed() -> None:
    cause = "the source stopped sending: no data for 10m; 1.0 GiB of 4.0 GiB copied"
    plan = decide(PVC, [job(started=True, active=1, failed=1)], 0, 5, 1.0, cause)
    assert plan.message == f"copying s3://data-1/x (retrying after 1 transient failure: {cause})"


def test_the_last_failure_is_the_newest_failed_attempts_cause() -> None:
    def attempt(name: str, finished: str, code: int | None, cause: str = "") -> LoaderPod:
        message = json.dumps({"phase": "Failed", "cause": cause}) if cause else ""
        return LoaderPod("ns", name, "dl-x", code, finished, message)

    pods = [
        attempt("a", "2026-11-25T10:00:00Z", 1, "the storage endpoint could not be reached"),
        attempt("b", "2026-11-25T10:05:00Z", 1, "the source stopped sending: no data for 10m"),
        attempt("c", "", None),  # the retry, running
    ]
    assert last_failure_cause(pods, "dl-x") == "the source stopped sending: no data for 10m"
    assert last_failure_cause(pods, "dl-other") is None
    assert last_failure_cause(pods[2:], "dl-x") is None
