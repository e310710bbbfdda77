"""PvcRecord: what is derived from a PVC (its parsed source, its load's Job) is derived once,
when the record is made, and again for every changed copy."""

from __future__ import annotations

from dataclasses import replace

from tests.controllers.pvc_records import changed, dataset_pvc


def test_a_good_source_is_parsed_and_names_its_job() -> None:
    pvc = dataset_pvc(source="s3://data/train")
    assert pvc.parsed_source is not None and pvc.parsed_source.scheme == "s3"
    assert pvc.source_error is None
    assert pvc.current_job == pvc.load.job
    assert pvc.current_job.startswith("dl-imagenet-")


def test_a_bad_source_says_why_instead_of_parsing() -> None:
    pvc = dataset_pvc(source="ftp://data/train")
    assert pvc.parsed_source is None
    assert pvc.source_error is not None and "ftp://data/train" in pvc.source_error


def test_a_changed_copy_derives_again() -> None:
    pvc = dataset_pvc(source="s3://data/train")
    retried = changed(pvc, retry="2")
    assert retried.current_job != pvc.current_job
    assert changed(pvc, source="gs://other/x").parsed_source.scheme == "gs"  # type: ignore[union-attr]
    assert retried == changed(pvc, retry="2")  # derived fields are not compared
    assert replace(pvc, resource_version="9") == pvc  # nor is the version
