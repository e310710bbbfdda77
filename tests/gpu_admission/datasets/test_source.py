"""Data-source parsing: the URL shape, each cloud's bucket and container naming rules, and web
sources (one file or a directory, https only unless allowed, never a credential echoed)."""

from __future__ import annotations

import pytest

from gpu_admission.datasets.source import (
    DataSource,
    DataSourceError,
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
        ("az://models/llama/7b", DataSource("az", "models", "llama/7b")),
        ("az://a-b-c", DataSource("az", "a-b-c", "")),
        ("az://" + "a" * 63 + "/x/", DataSource("az", "a" * 63, "x")),
        (
            "https://data.example.org/weights/model.safetensors",
            DataSource("https", "data.example.org", "weights/model.safetensors", False),
        ),
        ("https://data.example.org/sets/", DataSource("https", "data.example.org", "sets")),
        ("https://10.0.0.5:8443/a/b/", DataSource("https", "10.0.0.5:8443", "a/b")),
        ("https://[::1]:9/f.bin", DataSource("https", "[::1]:9", "f.bin", False)),
        ("https://mirror.example", DataSource("https", "mirror.example", "")),
        ("http://mirror.internal/f", DataSource("http", "mirror.internal", "f", False)),
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
        ("ftp://bucket/x", "use s3://bucket/prefix, gs://bucket/prefix, az://container/prefix"),
        ("ml-datasets/imagenet", "not a supported data source"),
        ("HTTPS://host/x", "lowercase"),
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
        # Azure container rules.
        ("az://", "names no container"),
        ("az://ab", "3 to 63 characters"),
        ("az://" + "a" * 64, "3 to 63 characters"),
        ("az://Models", "lowercase letters, digits and hyphens"),
        ("az://my_models", "lowercase letters, digits and hyphens"),
        ("az://my.models", "lowercase letters, digits and hyphens"),
        ("az://-models", "begin and end with a letter or digit"),
        ("az://models-", "begin and end with a letter or digit"),
        ("az://my--models", "two hyphens in a row"),
        ("az://models/a//b", "empty path segment"),
        # Web sources.
        ("https://", "the host '' is missing"),
        ("https:///path/f", "is missing"),
        ("https://under_score.example/f", "not a valid host name"),
        ("https://host:99999/f", "not a valid URL"),
        ("https://host:0/f", "port 0"),
        ("https://host/a b", "percent-encoded"),
        ("https://host/a/../b", "'.' or '..' segment"),
        ("https://host/a//b", "the path has an empty path segment"),
        ("https://host/f?x=1", "query string or fragment"),
        ("https://host/f#part", "query string or fragment"),
        ("https://user@host/f", "user name or password"),
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


def test_plain_http_only_where_allowed() -> None:
    with pytest.raises(DataSourceError) as info:
        parse_data_source("http://mirror.internal/f", allow_http=False)
    assert "use https://" in str(info.value) and "dataset.allow_http" in str(info.value)
    assert parse_data_source("https://mirror.internal/f", allow_http=False).scheme == "https"


@pytest.mark.parametrize(
    "value",
    [
        "https://reader:hunter2-SECRET@host/f.bin",
        "https://host/f.bin?sig=hunter2-SECRET&sv=2024",
        "https://host/f.bin#hunter2-SECRET",
    ],
)
def test_credentials_in_a_url_are_refused_without_echoing_them(value: str) -> None:
    with pytest.raises(DataSourceError) as info:
        parse_data_source(value)
    message = str(info.value)
    assert "hunter2" not in message and "SECRET" not in message
    assert "https://host/f.bin" in message


def test_web_source_file_or_directory_as_rclone_is_given_it() -> None:
    file = parse_data_source("https://h.example/models/v1/model%20a.bin")
    assert file.single_file and not file.directory
    assert file.web_base == "https://h.example/models/v1/"
    assert file.remote_path == "model a.bin"  # decoded: rclone's http backend encodes it again
    assert file.url == "https://h.example/models/v1/model%20a.bin"
    folder = parse_data_source("https://h.example:8443/sets/coco/")
    assert folder.directory and not folder.single_file
    assert folder.web_base == "https://h.example:8443/sets/coco/"
    assert folder.remote_path == ""
    root = parse_data_source("https://h.example/f")
    assert root.web_base == "https://h.example/" and root.remote_path == "f"
    assert file.credential_type is None and folder.credential_type is None


def test_s3_underscore_is_rejected_but_gcs_accepts_it() -> None:
    with pytest.raises(DataSourceError):
        parse_data_source("s3://my_bucket")
    assert parse_data_source("gs://my_bucket").bucket == "my_bucket"


def test_remote_path_and_credential_type() -> None:
    assert parse_data_source("s3://b12/p/q").remote_path == "b12/p/q"
    assert parse_data_source("gs://b12").remote_path == "b12"
    assert parse_data_source("s3://b12").credential_type == "aws-credential"
    assert parse_data_source("gs://b12").credential_type == "gcp-credential"
    assert parse_data_source("az://b12/p").remote_path == "b12/p"
    assert parse_data_source("az://b12").credential_type == "azure-credential"
