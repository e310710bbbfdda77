"""PvcRecord: what is derived from a PVC (its parsed source, its load's Job) is derived once,
when the record is made, and again for every changed copy."""

from __future__ import annotations

from dataclasses import replace

from controllers.dataset.records import PvcRecord
from gpu_admission.datasource import loader_job_name


def record(source: str) -> PvcRecord:
    return PvcRecord("ml", "imagenet", "uid-1", source, None, False, None, None)


def test_a_good_source_is_parsed_and_names_its_job() -> None:
    pvc = record("s3://data/train")
    assert pvc.parsed_source is not None and pvc.parsed_source.scheme == "s3"
    assert pvc.source_error is None
    assert pvc.current_job == loader_job_name("imagenet", "uid-1", pvc.content, "")


def test_a_bad_source_says_why_instead_of_parsing() -> None:
    pvc = record("ftp://data/train")
    assert pvc.parsed_source is None
    assert pvc.source_error is not None and "ftp://data/train" in pvc.source_error


def test_a_changed_copy_derives_again() -> None:
    pvc = record("s3://data/train")
    retried = replace(pvc, retry="2")
    assert retried.current_job != pvc.current_job
    assert replace(pvc, source="gs://other/x").parsed_source.scheme == "gs"  # type: ignore[union-attr]
    assert retried == replace(pvc, retry="2")  # derived fields are not compared
