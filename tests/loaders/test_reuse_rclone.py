"""The version a load read and a clone's reuse, with real rclone against moto's S3 server and
fake-gcs-server: an object rewritten to new bytes of the same size changes the digest; a clone
whose source still lists to its snapshot's digest is kept as it is; one whose source changed is
loaded afresh, and a retry of that resumes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from gpu_admission.datasets.source import parse_data_source
from loaders.digest_only import run_digest_only
from loaders.rclone import PERMANENT_EXIT_CODE
from tests.loaders.test_rclone import BIN, gcs, load, s3, s3_env  # noqa: F401  (the fixtures)
from tests.world.stand_ins.objectstores import GcsStore, S3Store, tree

pytestmark = pytest.mark.e2e  # real rclone, real stores

FILES = {f"shard-{i}.bin": bytes([i]) * (64 * 1024 + i) for i in range(6)}
FILES["meta/config.json"] = b'{"layers": 12}'


def flipped(data: bytes) -> bytes:
    return bytes(b ^ 0xFF for b in data)  # new bytes, the same size


def test_an_s3_object_rewritten_at_the_same_size_changes_the_digest(
    s3: S3Store,  # noqa: F811
    tmp_path: Path,
) -> None:
    s3.put("versioned", FILES, public=True)
    code, first, _ = load("s3://versioned", tmp_path / "one", s3_env(s3))
    assert code == 0, first
    assert (first["digestFiles"], first["digestBytes"]) == (
        len(FILES),
        sum(map(len, FILES.values())),
    )
    code, again, _ = load("s3://versioned", tmp_path / "two", s3_env(s3))
    assert again["digest"] == first["digest"]  # nothing changed: the same digest
    s3.put("versioned", {"shard-3.bin": flipped(FILES["shard-3.bin"])}, public=True)
    code, changed, _ = load("s3://versioned", tmp_path / "three", s3_env(s3))
    assert code == 0 and changed["digest"] != first["digest"]
    assert changed["digestBytes"] == first["digestBytes"]


def test_a_gcs_object_rewritten_at_the_same_size_changes_the_digest(
    gcs: GcsStore,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = {"RCLONE_CONFIG_SRC_ANONYMOUS": "true", "RCLONE_GCS_ENDPOINT": gcs.endpoint}
    gcs.put("gcs-versioned", FILES)
    code, first, _ = load("gs://gcs-versioned", tmp_path / "one", env)
    assert code == 0, first
    gcs.put("gcs-versioned", {"meta/config.json": flipped(FILES["meta/config.json"])})
    code, changed, _ = load("gs://gcs-versioned", tmp_path / "two", env)
    assert code == 0 and changed["digest"] != first["digest"]


def loaded_and_cloned(s3: S3Store, bucket: str, tmp_path: Path) -> tuple[dict, Path]:  # noqa: F811
    """(the summary of a first load of FILES, a clone of its volume: what restoring its
    snapshot gives, a copy of its files)."""
    s3.put(bucket, FILES, public=True)
    code, first, _ = load(f"s3://{bucket}", tmp_path / "first", s3_env(s3))
    assert code == 0, first
    return first, Path(shutil.copytree(tmp_path / "first", tmp_path / "clone"))


def test_a_clone_is_reused_while_the_source_lists_to_its_digest(
    s3: S3Store,  # noqa: F811
    tmp_path: Path,
) -> None:
    first, clone = loaded_and_cloned(s3, "reused", tmp_path)
    code, summary, log = load(
        "s3://reused", clone, s3_env(s3), clone_of="ds-1", clone_digest=first["digest"]
    )
    assert code == 0, summary
    assert summary["clone"] == "reused" and summary["files"] == 0
    assert summary["digest"] == first["digest"]
    assert "lists as it did when VolumeSnapshot ds-1 was taken" in log
    assert '"msg": "size check' not in log  # nothing to fetch, nothing to check
    assert tree(clone) == FILES


def test_a_clone_of_a_changed_source_is_loaded_afresh_and_a_retry_resumes(
    s3: S3Store,  # noqa: F811
    tmp_path: Path,
) -> None:
    first, clone = loaded_and_cloned(s3, "afresh", tmp_path)
    (clone / "left-over.bin").write_bytes(b"the source never had this")
    now = dict(FILES, **{"shard-1.bin": flipped(FILES["shard-1.bin"])})
    s3.put("afresh", {"shard-1.bin": now["shard-1.bin"]}, public=True)

    code, summary, log = load(
        "s3://afresh", clone, s3_env(s3), clone_of="ds-1", clone_digest=first["digest"]
    )
    assert code == 0, summary
    assert summary["clone"] == "afresh" and summary["files"] == len(FILES)  # every object
    assert "the source changed since VolumeSnapshot ds-1 was taken" in log
    assert tree(clone) == now  # the left-over is gone; the changed object is new
    assert not (clone / ".gpu-admission-afresh").exists()  # the marker goes on success

    # An attempt that failed part-way left its marker and two files: the retry fetches only
    # what is missing, where a first attempt fetches everything again.
    (clone / ".gpu-admission-afresh").write_text(summary["digest"] + "\n")
    for name in ("shard-2.bin", "meta/config.json"):
        (clone / name).unlink()
    code, retried, log = load(
        "s3://afresh", clone, s3_env(s3), clone_of="ds-1", clone_digest=first["digest"]
    )
    assert code == 0, retried
    assert retried["clone"] == "afresh" and retried["files"] == 2
    assert "resumed: an earlier attempt began it" in log
    assert tree(clone) == now


def digest_only(source: str, env: dict[str, str], tmp_path: Path) -> tuple[int, dict]:
    out, term = io.StringIO(), tmp_path / "digest.termination-log"
    code = run_digest_only(
        parse_data_source(source),
        environ=env,
        out=out,
        termination_log=str(term),
        permanent_exit_code=PERMANENT_EXIT_CODE,
        rclone=str(BIN / "rclone"),
    )
    return code, json.loads(term.read_text())


def test_listing_only_gives_the_digest_a_load_records(
    s3: S3Store,  # noqa: F811
    tmp_path: Path,
) -> None:
    s3.put("listed", FILES, public=True)
    code, loaded, _ = load("s3://listed", tmp_path / "data", s3_env(s3))
    assert code == 0, loaded
    code, listed = digest_only("s3://listed", s3_env(s3), tmp_path)
    assert code == 0 and listed["phase"] == "Succeeded"
    assert (listed["digest"], listed["digestFiles"], listed["digestBytes"]) == (
        loaded["digest"],
        loaded["digestFiles"],
        loaded["digestBytes"],
    )
    code, missing = digest_only("s3://no-such-bucket-here", s3_env(s3), tmp_path)
    assert code == PERMANENT_EXIT_CODE and missing["permanent"] is True
    assert missing["cause"].startswith("listing the source failed: the source was not found")
    assert "digest" not in missing
