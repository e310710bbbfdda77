"""The loader wrapper: real rclone against moto's S3 server and fake-gcs-server."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_admission.datasets.source import parse_data_source
from loaders.rclone import PERMANENT_EXIT_CODE, run_load
from loaders.report import MAX_SUMMARY_BYTES, RunLog, encode_summary, plain_cause
from loaders.sources import rclone_env
from loaders.tuning import CopyTuning
from tests.world.stand_ins.objectstores import (
    GcsStore,
    S3Store,
    dataset_files,
    gcs_store,
    s3_store,
    tree,
)

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

FILES = dataset_files(files=40, large_bytes=2 * 1024 * 1024)
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Store]:
    with s3_store() as store:
        store.put("public-data", FILES, prefix="imagenet/train/", public=True)
        yield store


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsStore]:
    with gcs_store() as store:
        store.put("coco-public", FILES, prefix="coco/2017/")
        yield store


def s3_env(store: S3Store, keys: tuple[str, str] | None = None) -> dict[str, str]:
    env = {"PATH": f"{BIN}:{os.environ['PATH']}", "RCLONE_CONFIG_SRC_ENDPOINT": store.endpoint}
    env["RCLONE_CONFIG_SRC_REGION"] = "us-east-1"
    if keys:
        env["RCLONE_CONFIG_SRC_ACCESS_KEY_ID"], env["RCLONE_CONFIG_SRC_SECRET_ACCESS_KEY"] = keys
    return env


def load(source: str, dest: Path, env: dict[str, str], **kwargs) -> tuple[int, dict, str]:
    out = io.StringIO()
    term = dest.parent / f"{dest.name}.termination-log"
    code = run_load(
        parse_data_source(source),
        str(dest),
        environ=env,
        out=out,
        termination_log=str(term),
        rclone=str(BIN / "rclone"),
        **kwargs,
    )
    return code, json.loads(term.read_text()), out.getvalue()


def test_s3_copy_is_byte_identical_with_summary(s3: S3Store, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, log = load("s3://public-data/imagenet/train", dest, s3_env(s3))
    assert code == 0
    assert tree(dest) == FILES
    assert summary["phase"] == "Succeeded"
    assert summary["files"] == len(FILES)
    assert summary["bytes"] == sum(len(b) for b in FILES.values())
    assert "cause" not in summary
    # rclone's JSON log is streamed, one JSON object per line.
    assert all(json.loads(line) for line in log.splitlines())


def test_copy_keeps_extra_files_and_sync_removes_them(s3: S3Store, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    dest.mkdir()
    (dest / "stale.txt").write_text("old")
    assert load("s3://public-data/imagenet/train", dest, s3_env(s3))[0] == 0
    assert (dest / "stale.txt").exists()
    code, summary, _ = load("s3://public-data/imagenet/train", dest, s3_env(s3), sync=True)
    assert code == 0 and not (dest / "stale.txt").exists()
    assert tree(dest) == FILES
    assert summary["files"] == 0  # checksums matched: nothing copied again


def test_the_copy_settings_are_chosen_from_the_listing_within_the_memory_limit(
    s3: S3Store, tmp_path: Path
) -> None:
    code, _, log = load("s3://public-data/imagenet/train", tmp_path / "data", s3_env(s3),
                        memory_limit=256 * 1024 * 1024)  # fmt: skip
    assert code == 0  # real rclone took every flag
    (said,) = [json.loads(line)["msg"] for line in log.splitlines() if "copy settings" in line]
    count = len(FILES)
    assert f"--transfers {count} --checkers {max(16, count)} " in said
    assert f"--buffer-size {128 // count}Mi" in said and "--fast-list" in said
    assert f"({count} files, 0 of them from 64.0 MiB" in said and "memory limit 256 MiB" in said


def test_without_verification_a_refresh_still_compares_checksums(
    s3: S3Store, tmp_path: Path
) -> None:
    dest, unverified = tmp_path / "data", CopyTuning(verify=False)
    source = "s3://public-data/imagenet/train"
    code, _, log = load(source, dest, s3_env(s3), tuning=unverified)
    assert code == 0 and tree(dest) == FILES and "--ignore-checksum" in log
    name = next(iter(FILES))
    (dest / name).write_bytes(bytes(len(FILES[name])))  # same size, other bytes
    code, summary, _ = load(source, dest, s3_env(s3), tuning=unverified)
    assert code == 0 and summary["files"] == 1  # only the changed file, found by its MD5
    assert tree(dest) == FILES


def test_missing_bucket_fails_with_plain_cause(s3: S3Store, tmp_path: Path) -> None:
    code, summary, _ = load("s3://no-such-bucket/x", tmp_path / "data", s3_env(s3))
    assert code == PERMANENT_EXIT_CODE  # retrying cannot help: the Job fails at once
    assert summary["phase"] == "Failed" and summary["permanent"] is True
    assert summary["cause"].startswith("the source was not found")


def test_unreachable_endpoint_is_transient(tmp_path: Path) -> None:
    env = {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RCLONE_CONFIG_SRC_ENDPOINT": "http://127.0.0.1:9",
    }
    env["RCLONE_CONFIG_SRC_REGION"] = "us-east-1"
    env["RCLONE_LOW_LEVEL_RETRIES"] = "1"
    env["RCLONE_RETRIES"] = "1"
    code, summary, _ = load("s3://some-bucket/x", tmp_path / "data", env)
    assert code not in (0, PERMANENT_EXIT_CODE)  # rclone's own code: the Job may retry
    assert summary["permanent"] is False
    assert "could not be reached" in summary["cause"]


def test_gcs_anonymous_copy(gcs: GcsStore, tmp_path: Path) -> None:
    env = {
        "RCLONE_CONFIG_SRC_ANONYMOUS": "true",
        "RCLONE_GCS_ENDPOINT": gcs.endpoint,
    }
    dest = tmp_path / "data"
    code, summary, _ = load("gs://coco-public/coco/2017", dest, env)
    assert code == 0, summary
    assert tree(dest) == FILES


def test_private_bucket_needs_valid_keys(tmp_path: Path) -> None:
    with s3_store() as store:
        store.put("private-loader-data", {"a/b.txt": b"secret data"})
        keys = store.valid_keys()
        store.require_authentication()
        code, summary, _ = load("s3://private-loader-data", tmp_path / "ok", s3_env(store, keys))
        assert code == 0 and tree(tmp_path / "ok") == {"a/b.txt": b"secret data"}
        wrong = (keys[0], "not-the-secret")
        code, summary, _ = load("s3://private-loader-data", tmp_path / "bad", s3_env(store, wrong))
        assert code != 0
        assert "rejected the credentials" in summary["cause"]
        assert "not-the-secret" not in json.dumps(summary)


def test_cli_runs_as_a_subprocess_and_rejects_bad_sources(tmp_path: Path) -> None:
    term = tmp_path / "term"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "load",
            "--source",
            "s3://Bad_Bucket",
            "--termination-log",
            str(term),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "lowercase letters" in result.stderr


def test_unstartable_rclone_is_reported(tmp_path: Path) -> None:
    term = tmp_path / "term"
    code = run_load(
        parse_data_source("s3://bucket-1"),
        str(tmp_path / "d"),
        rclone=str(tmp_path / "missing-rclone"),
        termination_log=str(term),
        environ={},
        out=io.StringIO(),
    )
    assert code == 127
    assert "cannot start" in json.loads(term.read_text())["cause"]


def test_plain_cause_table() -> None:
    assert "rejected the credentials" in plain_cause(["api error InvalidAccessKeyId: x"], 1)
    assert plain_cause(["AccessDenied: Access Denied"], 1).startswith("access denied")
    assert plain_cause(["NoSuchBucket: The specified bucket does not exist"], 3).startswith(
        "the source was not found"
    )
    assert "could not be reached" in plain_cause(["dial tcp: connection refused"], 5)
    assert "volume is full" in plain_cause(["write /data/x: no space left on device"], 1)
    assert plain_cause([], 9) == "the copy failed (rclone: rclone exited with code 9)"


def test_summary_is_clipped_to_4_kib() -> None:
    long = {"phase": "Failed", "bytes": 1, "cause": "x" * 10_000}
    data = encode_summary(long)
    assert len(data) <= MAX_SUMMARY_BYTES
    assert json.loads(data)["cause"].endswith("...")


def test_run_log_keeps_last_stats_and_error_lines() -> None:
    log = RunLog()
    log.take('{"level":"error","msg":"boom"}\n')
    log.take('{"level":"notice","msg":"s","stats":{"bytes":5,"transfers":2}}\n')
    log.take("not json\n")
    assert log.stats == {"bytes": 5, "transfers": 2}
    assert log.errors == ["boom", "not json"]


def test_rclone_env_provider_and_empty_optional_values() -> None:
    s3 = parse_data_source("s3://bucket-1")
    env = rclone_env(s3, {"RCLONE_CONFIG_SRC_ENDPOINT": "", "RCLONE_CONFIG_SRC_REGION": ""})
    assert env["RCLONE_CONFIG_SRC_PROVIDER"] == "AWS"
    assert "RCLONE_CONFIG_SRC_ENDPOINT" not in env and env["RCLONE_CONFIG_SRC_TYPE"] == "s3"
    env = rclone_env(s3, {"RCLONE_CONFIG_SRC_ENDPOINT": "http://minio:9000"})
    assert env["RCLONE_CONFIG_SRC_PROVIDER"] == "Other"
    assert rclone_env(parse_data_source("gs://bucket-1"), {})["RCLONE_CONFIG_SRC_TYPE"] == "gcs"


def test_the_secrets_endpoint_wins_over_the_clusters_backend_default(
    s3: S3Store, tmp_path: Path
) -> None:
    # A cluster-wide RCLONE_S3_ENDPOINT (dataset.loader_env) pointing nowhere: rclone reads it
    # as the flag --s3-endpoint, which would beat the remote's own endpoint from the Secret.
    env = s3_env(s3) | {
        "RCLONE_S3_ENDPOINT": "http://127.0.0.1:9",
        "RCLONE_LOW_LEVEL_RETRIES": "1",
        "RCLONE_RETRIES": "1",
    }
    code, summary, _ = load("s3://public-data/imagenet/train", tmp_path / "data", env)
    assert code == 0, summary
    assert tree(tmp_path / "data") == FILES
    # Without a remote endpoint of its own, the cluster's default stands.
    s3_source = parse_data_source("s3://bucket-1")
    assert rclone_env(s3_source, {"RCLONE_S3_ENDPOINT": "http://minio:9000"}) == {
        "RCLONE_S3_ENDPOINT": "http://minio:9000",
        "RCLONE_CONFIG_SRC_TYPE": "s3",
        "RCLONE_CONFIG_SRC_PROVIDER": "Other",
    }
    both = {"RCLONE_S3_ENDPOINT": "http://x:1", "RCLONE_CONFIG_SRC_ENDPOINT": "http://y:2"}
    assert "RCLONE_S3_ENDPOINT" not in rclone_env(s3_source, both)
    gcs_env = {"RCLONE_GCS_ENDPOINT": "http://x:1", "RCLONE_CONFIG_SRC_ENDPOINT": "http://y:2"}
    assert "RCLONE_GCS_ENDPOINT" not in rclone_env(parse_data_source("gs://bucket-1"), gcs_env)
