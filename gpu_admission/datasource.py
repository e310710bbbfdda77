"""Parsing a dataset PVC's data source: `s3://bucket[/prefix]` or `gs://bucket[/prefix]`.

Pure functions. Each cloud's bucket-naming rules are checked here, at admission, so a typo fails
when the PVC is created (with a message that says what to change) instead of minutes later inside
a loader Job. The same parser gives the controller the bucket and prefix it hands to the loader.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

from gpu_admission.names import AWS_CREDENTIAL_TYPE, GCP_CREDENTIAL_TYPE

Scheme = Literal["s3", "gs"]

SCHEMES: dict[str, Scheme] = {"s3://": "s3", "gs://": "gs"}
CREDENTIAL_TYPE: dict[Scheme, str] = {"s3": AWS_CREDENTIAL_TYPE, "gs": GCP_CREDENTIAL_TYPE}
CLOUD_NAME: dict[Scheme, str] = {"s3": "S3", "gs": "Google Cloud Storage"}

_S3_CHARS = re.compile(r"[a-z0-9.-]+")
_GCS_CHARS = re.compile(r"[a-z0-9._-]+")
_S3_FORBIDDEN_PREFIXES = ("xn--", "sthree-")
_S3_FORBIDDEN_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3")
_MAX_PREFIX_BYTES = 1024  # the longest object key either cloud accepts


class DataSourceError(ValueError):
    """The data source cannot be used; the message tells the user what to change."""


@dataclass(frozen=True, slots=True)
class DataSource:
    scheme: Scheme
    bucket: str
    prefix: str = ""  # no leading or trailing slash; "" = the whole bucket

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}" if self.prefix else self.bucket_url

    @property
    def bucket_url(self) -> str:
        return f"{self.scheme}://{self.bucket}"

    @property
    def remote_path(self) -> str:
        """The path rclone copies from, relative to the remote: `bucket/prefix`."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    @property
    def credential_type(self) -> str:
        return CREDENTIAL_TYPE[self.scheme]


def parse_data_source(value: str) -> DataSource:
    """Parse `s3://bucket[/prefix]` or `gs://bucket[/prefix]`; raise DataSourceError saying why
    the value cannot be used and what a valid one looks like."""
    if value != value.strip():
        raise DataSourceError(f"{value!r} has spaces around it; remove them")
    scheme = next((SCHEMES[p] for p in SCHEMES if value.lower().startswith(p)), None)
    if scheme is None:
        raise DataSourceError(
            f"{value!r} is not a supported data source; use s3://bucket/prefix or "
            "gs://bucket/prefix"
        )
    if not value.startswith(f"{scheme}://"):
        raise DataSourceError(f"{value!r}: write the scheme in lowercase, as {scheme}://")
    rest = value[len(scheme) + 3 :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise DataSourceError(f"{value!r} names no bucket; use {scheme}://bucket/prefix")
    problem = (s3_bucket_problem if scheme == "s3" else gcs_bucket_problem)(bucket)
    if problem:
        raise DataSourceError(
            f"{value!r}: {CLOUD_NAME[scheme]} bucket name {bucket!r} {problem}; check the "
            "bucket name"
        )
    return DataSource(scheme, bucket, _clean_prefix(value, prefix))


def _clean_prefix(value: str, prefix: str) -> str:
    prefix = prefix.rstrip("/")
    if not prefix:
        return ""
    if len(prefix.encode()) > _MAX_PREFIX_BYTES:
        raise DataSourceError(f"{value!r}: the prefix is longer than {_MAX_PREFIX_BYTES} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in prefix):
        raise DataSourceError(f"{value!r}: the prefix contains control characters; remove them")
    parts = prefix.split("/")
    if any(part == "" for part in parts):
        raise DataSourceError(f"{value!r}: the prefix has an empty path segment (//); remove it")
    if any(part in (".", "..") for part in parts):
        raise DataSourceError(
            f"{value!r}: the prefix has a '.' or '..' segment; write the plain path instead"
        )
    return prefix


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def s3_bucket_problem(bucket: str) -> str | None:
    """What breaks S3's general-purpose bucket naming rules, or None."""
    if not 3 <= len(bucket) <= 63:
        return f"must be 3 to 63 characters long (it has {len(bucket)})"
    if not _S3_CHARS.fullmatch(bucket):
        return "may contain only lowercase letters, digits, dots and hyphens"
    if not (bucket[0].isalnum() and bucket[-1].isalnum()):
        return "must begin and end with a letter or digit"
    if ".." in bucket:
        return "must not contain two dots in a row"
    if _is_ip_address(bucket):
        return "must not look like an IP address"
    for prefix in _S3_FORBIDDEN_PREFIXES:
        if bucket.startswith(prefix):
            return f"must not begin with {prefix!r}"
    for suffix in _S3_FORBIDDEN_SUFFIXES:
        if bucket.endswith(suffix):
            return f"must not end with {suffix!r}"
    return None


def gcs_bucket_problem(bucket: str) -> str | None:
    """What breaks Cloud Storage's bucket naming rules, or None."""
    has_dots = "." in bucket
    if len(bucket) < 3 or len(bucket) > (222 if has_dots else 63):
        limit = "222 (with dots)" if has_dots else "63 (222 with dots)"
        return f"must be 3 to {limit} characters long (it has {len(bucket)})"
    if not _GCS_CHARS.fullmatch(bucket):
        return "may contain only lowercase letters, digits, hyphens, underscores and dots"
    if not (bucket[0].isalnum() and bucket[-1].isalnum()):
        return "must begin and end with a letter or digit"
    if any(len(part) > 63 for part in bucket.split(".")):
        return "must not have a dot-separated part longer than 63 characters"
    if any(part == "" for part in bucket.split(".")):
        return "must not contain two dots in a row"
    if _is_ip_address(bucket):
        return "must not look like an IP address"
    if bucket.startswith("goog"):
        return "must not begin with 'goog'"
    if "google" in bucket:
        return "must not contain 'google'"
    return None


def load_id(pvc_uid: str, source: str, retry: str = "") -> str:
    """A stable id for one load: the same PVC, source and retry value always give the same id;
    a new source, a new retry value (or a PVC re-created under the same name) gives another."""
    key = f"{pvc_uid}\x00{source}" + (f"\x00{retry}" if retry else "")
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def loader_job_name(pvc_name: str, pvc_uid: str, source: str, retry: str = "") -> str:
    """`dl-<pvc name>-<load id>`, at most 63 characters (a Job name must also fit a label value)."""
    # Dots become hyphens so the name is also a DNS label (pod hostnames derive from it).
    stem = pvc_name.replace(".", "-")[: 63 - len("dl--") - 10].rstrip("-")
    return f"dl-{stem}-{load_id(pvc_uid, source, retry)}"
