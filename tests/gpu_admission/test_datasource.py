"""Data-source parsing: the URL shape and each cloud's bucket-naming rules."""

from __future__ import annotations

import pytest

from gpu_admission.datasource import (
    DataSource,
    DataSourceError,
    load_id,
    loader_job_name,
    parse_data_source,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("s3://ml-datasets/imagenet/train", DataSource("s3", "ml-datasets", "imagenet/train")),
        ("s3://ml-datasets", DataSource("s3", "ml-datasets", "")),
        ("s3://ml-datasets/", DataSource("s3", "ml-datasets", "")),
        ("s3://ml-datasets/imagenet/", DataSource("s3", "ml-datasets", "imagenet")),
        ("s3://my.bucket.v2/a b/c", DataSource("s3", "my.bucket.v2", "a b/c")),
        ("s3://abc/x", DataSource("s3", "abc", "x")),
        ("s3://" + "a" * 63, DataSource("s3", "a" * 63, "")),
        ("gs://ml-public_datasets/coco/2017", DataSource("gs", "ml-public_datasets", "coco/2017")),
        ("gs://a.b.c", DataSource("gs", "a.b.c", "")),
        ("gs://" + ".".join(["a" * 63] * 3) + ".abc", None),
    ],
)
def test_valid_sources_parse(value: str, expected: DataSource | None) -> None:
    parsed = parse_data_source(value)
    if expected is not None:
        assert parsed == expected
    assert parse_data_source(parsed.url) == parsed


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("https://bucket/x", "use s3://bucket/prefix or gs://bucket/prefix"),
        ("ml-datasets/imagenet", "not a supported data source"),
        ("S3://ml-datasets", "lowercase"),
        (" s3://ml-datasets", "spaces"),
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        # S3 bucket rules.
        ("s3://ab", "3 to 63 characters"),
        ("s3://" + "a" * 64, "3 to 63 characters"),
        ("s3://ML_Datasets/imagenet", "lowercase letters, digits, dots and hyphens"),
        ("s3://under_score", "lowercase letters, digits, dots and hyphens"),
        ("s3://-bucket", "begin and end with a letter or digit"),
        ("s3://bucket-", "begin and end with a letter or digit"),
        ("s3://bucket.", "begin and end with a letter or digit"),
        ("s3://my..bucket", "two dots in a row"),
        ("s3://192.168.5.4", "IP address"),
        ("s3://xn--bucket", "must not begin with 'xn--'"),
        ("s3://sthree-bucket", "must not begin with 'sthree-'"),
        ("s3://bucket-s3alias", "must not end with '-s3alias'"),
        ("s3://bucket--ol-s3", "must not end with '--ol-s3'"),
        # Cloud Storage bucket rules.
        ("gs://ab", "3 to 63"),
        ("gs://" + "a" * 64, "3 to 63 (222 with dots)"),
        ("gs://" + ".".join(["a" * 60] * 4), "3 to 222"),
        ("gs://" + "a" * 64 + ".com", "dot-separated part longer than 63"),
        ("gs://Bucket", "lowercase letters, digits, hyphens, underscores and dots"),
        ("gs://_bucket", "begin and end with a letter or digit"),
        ("gs://bucket_", "begin and end with a letter or digit"),
        ("gs://a..b", "two dots in a row"),
        ("gs://10.0.0.1", "IP address"),
        ("gs://goog-data", "must not begin with 'goog'"),
        ("gs://my-google-data", "must not contain 'google'"),
        # Prefixes.
        ("s3://bucket/a//b", "empty path segment"),
        ("gs://bucket/a/../b", "'.' or '..' segment"),
        ("s3://bucket/a\nb", "control characters"),
        ("s3://bucket/" + "k" * 1025, "longer than 1024 bytes"),
    ],
)
def test_invalid_sources_say_what_to_fix(value: str, fragment: str) -> None:
    with pytest.raises(DataSourceError) as info:
        parse_data_source(value)
    assert fragment in str(info.value)


def test_s3_underscore_is_rejected_but_gcs_accepts_it() -> None:
    with pytest.raises(DataSourceError):
        parse_data_source("s3://my_bucket")
    assert parse_data_source("gs://my_bucket").bucket == "my_bucket"


def test_remote_path_and_credential_type() -> None:
    assert parse_data_source("s3://b12/p/q").remote_path == "b12/p/q"
    assert parse_data_source("gs://b12").remote_path == "b12"
    assert parse_data_source("s3://b12").credential_type == "aws-credential"
    assert parse_data_source("gs://b12").credential_type == "gcp-credential"


def test_job_name_is_deterministic_bounded_and_changes_with_source_or_uid() -> None:
    name = loader_job_name("imagenet", "uid-1", "s3://b12/x")
    assert name == loader_job_name("imagenet", "uid-1", "s3://b12/x")
    assert name.startswith("dl-imagenet-")
    assert name.endswith(load_id("uid-1", "s3://b12/x"))
    assert name != loader_job_name("imagenet", "uid-1", "s3://b12/y")
    assert name != loader_job_name("imagenet", "uid-2", "s3://b12/x")
    long = loader_job_name("p" * 253, "uid", "s3://b12")
    assert len(long) <= 63
    dotted = loader_job_name("data.set.v1", "uid", "s3://b12")
    assert dotted.startswith("dl-data-set-v1-")
    cut = loader_job_name("a" * 48 + ".x", "uid", "s3://b12")
    assert len(cut) <= 63 and "--" not in cut
