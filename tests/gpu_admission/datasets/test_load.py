"""A dataset PVC's load, decided in one place: its content, its Job, its cache key, its phase."""

from __future__ import annotations

from gpu_admission.datasets.load import DatasetContent, DatasetLoad, content_of, dataset_load
from gpu_admission.names import Names

NAMES = Names()
HUB, COMMIT = "hf://acme/tiny-llm", "c" * 40


def job(name: str, uid: str, source: str, retry: str = "") -> str:
    return DatasetLoad(name, uid, DatasetContent(source), retry).job


def test_job_name_is_deterministic_bounded_and_changes_with_content_uid_or_retry() -> None:
    name = job("imagenet", "uid-1", "s3://b12/x")
    assert name == job("imagenet", "uid-1", "s3://b12/x")
    assert name.startswith("dl-imagenet-") and len(name) == len("dl-imagenet-") + 10
    assert name != job("imagenet", "uid-1", "s3://b12/y")
    assert name != job("imagenet", "uid-2", "s3://b12/x")
    assert name != job("imagenet", "uid-1", "s3://b12/x", retry="1")
    assert len(job("p" * 253, "uid", "s3://b12")) <= 63
    assert job("data.set.v1", "uid", "s3://b12").startswith("dl-data-set-v1-")
    cut = job("a" * 48 + ".x", "uid", "s3://b12")
    assert len(cut) <= 63 and "--" not in cut


def test_a_digest_or_file_patterns_make_new_content_and_a_new_job() -> None:
    url = "https://h.example/m.bin"
    plain = DatasetLoad("w", "u", DatasetContent(url))
    checked = DatasetLoad("w", "u", DatasetContent(url, sha256="ab" * 32))
    assert plain.job != checked.job
    assert DatasetContent(url, "AB" * 32).key == DatasetContent(url, "ab" * 32).key
    narrowed = DatasetContent(HUB, include="b, a")
    assert narrowed.key == DatasetContent(HUB, include="a,b").key != HUB


def test_the_annotations_are_read_once_and_normalised() -> None:
    annotations = {
        NAMES.data_source: "https://h.example/m.bin",
        NAMES.data_sha256: " AB" + "ab" * 31 + " ",
        NAMES.data_credentials: "  ",
        NAMES.data_load_retry: " 2 ",
    }
    content = content_of(annotations, NAMES)
    assert content == DatasetContent("https://h.example/m.bin", "ab" * 32, None, None)
    load = dataset_load("w", "u", annotations, NAMES)
    assert load is not None and load.retry == "2"
    assert content_of({NAMES.data_credentials: "x"}, NAMES) is None  # no source: no dataset
    assert dataset_load("w", "u", {}, NAMES) is None


def test_the_phase_counts_only_for_the_current_job() -> None:
    content = DatasetContent("s3://b12/x")
    current = DatasetLoad("p", "u", content).job
    loaded = DatasetLoad("p", "u", content, recorded_phase="Succeeded", recorded_job=current)
    assert loaded.phase == "Succeeded" and loaded.loaded and not loaded.failed
    older = DatasetLoad("p", "u", content, recorded_phase="Succeeded", recorded_job="dl-p-old")
    assert older.phase == "Pending" and not older.loaded
    failed = DatasetLoad("p", "u", content, recorded_phase="Failed", recorded_job=current)
    assert failed.failed
    retried = DatasetLoad("p", "u", content, "1", recorded_phase="Failed", recorded_job=current)
    assert retried.phase == "Pending"  # the retry's load has not been recorded yet
    assert DatasetLoad("p", "u", content, recorded_job=current).phase == "Pending"


def test_cache_keys_separate_credentials_and_follow_hub_commits() -> None:
    source = "s3://b12/x"
    assert DatasetContent(source).cache_key == DatasetContent(source, credentials="").cache_key
    assert (
        DatasetContent(source, credentials="a").cache_key
        != DatasetContent(source, credentials="b").cache_key
    )
    assert DatasetContent(source).kept_key() == DatasetContent(source).cache_key
    at_branch = DatasetContent(HUB)
    assert at_branch.kept_key() is None  # a branch may move: no key until its commit is known
    at_commit = at_branch.kept_key(COMMIT)
    assert at_commit == DatasetContent(f"{HUB}@{COMMIT}").kept_key()
    assert DatasetContent(HUB, include="*.json").kept_key(COMMIT) not in (at_commit, None)
    assert DatasetContent("s3://Not_A_Bucket").kept_key() is None  # does not parse
