"""Parsing a dataset PVC's data source:

- `s3://bucket[/prefix]`, `gs://bucket[/prefix]`, `az://container[/prefix]` (Azure Blob Storage);
- `https://host[:port]/path/file` (one file) or `https://host[:port]/path/` (a directory, as an
  HTTP server's index page lists it: the trailing slash says which); `http://` only where the
  configuration allows it;
- `hf://ORG/MODEL[@REVISION]` and `hf://datasets/ORG/NAME[@REVISION]` (a Hugging Face Hub
  repository; the revision is a branch, a tag or a commit, `main` when left out). Repository
  names follow huggingface_hub's `validate_repo_id`.

Pure functions. Each store's naming rules are checked here, at admission, so a typo fails when
the PVC is created (with a message that says what to change) instead of minutes later inside a
loader Job. The same parser gives the controller and the loader what they hand to rclone.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from gpu_admission.names import (
    AWS_CREDENTIAL_TYPE,
    AZURE_CREDENTIAL_TYPE,
    GCP_CREDENTIAL_TYPE,
    HUGGINGFACE_CREDENTIAL_TYPE,
)

Scheme = Literal["s3", "gs", "az", "https", "http", "hf"]

SCHEMES: dict[str, Scheme] = {
    "s3://": "s3",
    "gs://": "gs",
    "az://": "az",
    "https://": "https",
    "http://": "http",
    "hf://": "hf",
}
BUCKET_SCHEMES: tuple[Scheme, ...] = ("s3", "gs", "az")
WEB_SCHEMES: tuple[Scheme, ...] = ("https", "http")
# The Secret type a source's credentials must have; web sources are read without credentials.
CREDENTIAL_TYPE: dict[Scheme, str] = {
    "s3": AWS_CREDENTIAL_TYPE,
    "gs": GCP_CREDENTIAL_TYPE,
    "az": AZURE_CREDENTIAL_TYPE,
    "hf": HUGGINGFACE_CREDENTIAL_TYPE,
}
CLOUD_NAME: dict[Scheme, str] = {
    "s3": "S3",
    "gs": "Google Cloud Storage",
    "az": "Azure Blob Storage",
    "https": "HTTPS",
    "http": "HTTP",
    "hf": "the Hugging Face Hub",
}
# The rclone backend each rclone-copied scheme uses (hf:// is fetched with huggingface_hub).
RCLONE_BACKEND: dict[Scheme, str] = {
    "s3": "s3",
    "gs": "gcs",
    "az": "azureblob",
    "https": "http",
    "http": "http",
}
BUCKET_WORD: dict[Scheme, str] = {"s3": "bucket", "gs": "bucket", "az": "container"}
SUPPORTED = (
    "s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, https://host/path/file, "
    "https://host/path/ (a directory), hf://org/model[@revision] or "
    "hf://datasets/org/name[@revision]"
)
HUB_DATASETS = "datasets/"
DEFAULT_REVISION = "main"
COMMIT = re.compile(r"[0-9a-f]{40}")
# huggingface_hub's REPO_ID_REGEX, one part of it; "--", ".." and a ".git" end are refused too.
_HUB_NAME = re.compile(r"[A-Za-z0-9_.-]{1,96}")
# Git ref names as the Hub takes them in URLs (refs/pr/1 has slashes).
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")

_S3_CHARS = re.compile(r"[a-z0-9.-]+")
_AZURE_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9]))*")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_GCS_CHARS = re.compile(r"[a-z0-9._-]+")
_S3_FORBIDDEN_PREFIXES = ("xn--", "sthree-")
_S3_FORBIDDEN_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3")
_MAX_PREFIX_BYTES = 1024  # the longest object key either cloud accepts


class DataSourceError(ValueError):
    """The data source cannot be used; the message tells the user what to change."""


@dataclass(frozen=True, slots=True)
class DataSource:
    scheme: Scheme
    bucket: str  # the bucket or container; for a web source, the host (and port)
    prefix: str = ""  # no leading or trailing slash; "" = the whole bucket (or the site's root)
    directory: bool = True  # a web source: a directory listing (True) or one file
    repo_type: str = ""  # a Hub source: "model" or "dataset"
    revision: str = ""  # a Hub source: the branch, tag or commit asked for ("" = main)

    @property
    def url(self) -> str:
        if self.scheme == "hf":
            kind = HUB_DATASETS if self.repo_type == "dataset" else ""
            return f"hf://{kind}{self.bucket}" + (f"@{self.revision}" if self.revision else "")
        if self.is_web:
            path = self.prefix + ("/" if self.directory and self.prefix else "")
            return f"{self.scheme}://{self.bucket}/{path}"
        return f"{self.scheme}://{self.bucket}/{self.prefix}" if self.prefix else self.bucket_url

    @property
    def bucket_url(self) -> str:
        return f"{self.scheme}://{self.bucket}"

    @property
    def is_web(self) -> bool:
        return self.scheme in WEB_SCHEMES

    @property
    def single_file(self) -> bool:
        return self.is_web and not self.directory

    @property
    def pinned(self) -> bool:
        """A Hub source naming a commit: its content can never change."""
        return COMMIT.fullmatch(self.revision) is not None

    def at_commit(self, commit: str) -> DataSource:
        """The same Hub source, pinned to the commit its revision resolved to."""
        return DataSource("hf", self.bucket, repo_type=self.repo_type, revision=commit)

    @property
    def web_base(self) -> str:
        """A web source: the directory URL rclone's http backend is given (its `url`)."""
        folder = self.prefix if self.directory else self.prefix.rpartition("/")[0]
        return f"{self.scheme}://{self.bucket}/" + (f"{folder}/" if folder else "")

    @property
    def remote_path(self) -> str:
        """The path rclone copies from, relative to the remote: `bucket/prefix`; for a web
        source, the file's name under `web_base` (decoded: rclone encodes it again), or "" for
        the directory itself."""
        if self.is_web:
            return "" if self.directory else urllib.parse.unquote(self.prefix.rpartition("/")[2])
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    @property
    def credential_type(self) -> str | None:
        """The Secret type its credentials must have; None: read without credentials."""
        return CREDENTIAL_TYPE.get(self.scheme)


def parse_data_source(value: str, *, allow_http: bool = True) -> DataSource:
    """Parse a data source (the module's docstring lists the forms); raise DataSourceError saying
    why the value cannot be used and what a valid one looks like. `allow_http`: whether plain
    http:// is accepted (the configuration's `dataset.allow_http`)."""
    if value != value.strip():
        raise DataSourceError(f"{value!r} has spaces around it; remove them")
    scheme = next((SCHEMES[p] for p in SCHEMES if value.lower().startswith(p)), None)
    if scheme is None:
        raise DataSourceError(f"{value!r} is not a supported data source; use {SUPPORTED}")
    if not value.startswith(f"{scheme}://"):
        raise DataSourceError(f"{value!r}: write the scheme in lowercase, as {scheme}://")
    if scheme == "hf":
        return _parse_hub(value)
    if scheme in WEB_SCHEMES:
        if scheme == "http" and not allow_http:
            raise DataSourceError(
                f"{value!r}: plain http:// is not allowed here (anyone on the path can read or "
                "change the data); use https://, or ask the cluster's administrators to set "
                "dataset.allow_http"
            )
        return _parse_web(value, scheme)
    rest = value[len(scheme) + 3 :]
    bucket, _, prefix = rest.partition("/")
    word = BUCKET_WORD[scheme]
    if not bucket:
        raise DataSourceError(f"{value!r} names no {word}; use {scheme}://{word}/prefix")
    check = {
        "s3": s3_bucket_problem,
        "gs": gcs_bucket_problem,
        "az": azure_container_problem,
    }[scheme]
    problem = check(bucket)
    if problem:
        raise DataSourceError(
            f"{value!r}: {CLOUD_NAME[scheme]} {word} name {bucket!r} {problem}; check the "
            f"{word} name"
        )
    return DataSource(scheme, bucket, _clean_prefix(value, prefix))


def _parse_web(value: str, scheme: Scheme) -> DataSource:
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise DataSourceError(f"{value!r} is not a valid URL ({exc}); check it") from exc
    # Never echo what may be a credential: these two messages show the URL without it.
    shown = f"{scheme}://{parts.hostname or ''}{f':{port}' if port else ''}{parts.path}"
    if parts.username is not None or parts.password is not None:
        raise DataSourceError(
            f"{shown!r} carries a user name or password; a PVC annotation is readable by anyone "
            "who can read the PVC, so remove them (web sources are read without credentials)"
        )
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise DataSourceError(
            f"{shown!r} has a query string or fragment; name the file or directory by its path "
            "alone (a signed URL's token must not be written in an annotation)"
        )
    host = parts.hostname or ""
    problem = host_problem(host)
    if problem:
        raise DataSourceError(f"{value!r}: the host {host!r} {problem}; check the URL")
    if port == 0:
        raise DataSourceError(f"{value!r}: port 0 is not a port; check the URL")
    path = parts.path.lstrip("/")
    directory = path == "" or path.endswith("/")
    if any(ch in path for ch in " \\"):
        raise DataSourceError(
            f"{value!r}: the path has spaces or backslashes; write them percent-encoded (%20)"
        )
    return DataSource(scheme, parts.netloc, _clean_prefix(value, path, "path"), directory)


def _parse_hub(value: str) -> DataSource:
    rest = value[len("hf://") :]
    repo, at, revision = rest.partition("@")
    repo_type = "model"
    if repo.startswith(HUB_DATASETS):
        repo_type, repo = "dataset", repo[len(HUB_DATASETS) :]
    example = (
        "hf://datasets/org/name[@revision]"
        if repo_type == "dataset"
        else "hf://org/model[@revision]"
    )
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts):
        raise DataSourceError(
            f"{value!r} must name a repository as org/name: use {example} (a dataset starts with "
            "datasets/)"
        )
    for part in parts:
        problem = hub_name_problem(part)
        if problem:
            raise DataSourceError(
                f"{value!r}: the Hugging Face Hub name {part!r} {problem}; check the repository"
            )
    if at:
        problem = revision_problem(revision)
        if problem:
            raise DataSourceError(f"{value!r}: the revision after @ {problem}")
    return DataSource("hf", repo, repo_type=repo_type, revision=revision)


def hub_name_problem(name: str) -> str | None:
    """What breaks the Hub's rules for one part of a repository id, or None."""
    if not _HUB_NAME.fullmatch(name):
        return "may contain only letters, digits, '-', '_' and '.' (at most 96)"
    if name[0] in "-." or name[-1] in "-.":
        return "must not begin or end with '-' or '.'"
    if "--" in name or ".." in name:
        return "must not contain '--' or '..'"
    if name.endswith(".git"):
        return "must not end with '.git'"
    return None


def revision_problem(revision: str) -> str | None:
    """What makes a revision no branch, tag or commit name, or None."""
    if not revision:
        return "is empty; name a branch, tag or commit, or leave out the @"
    if not _REVISION.fullmatch(revision):
        return "may contain only letters, digits, '.', '_', '-' and '/'"
    if ".." in revision or revision.startswith("/") or revision.endswith(("/", ".lock")):
        return "is not a valid branch, tag or commit name"
    return None


def host_problem(host: str) -> str | None:
    """What makes `host` (as urlsplit gives it: lowercase, IPv6 without brackets) no host name
    or IP address, or None."""
    if not host:
        return "is missing"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return None
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return "is not a valid host name"
    return None


def _clean_prefix(value: str, prefix: str, what: str = "prefix") -> str:
    prefix = prefix.rstrip("/")
    if not prefix:
        return ""
    if len(prefix.encode()) > _MAX_PREFIX_BYTES:
        raise DataSourceError(f"{value!r}: the {what} is longer than {_MAX_PREFIX_BYTES} bytes")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in prefix):
        raise DataSourceError(f"{value!r}: the {what} contains control characters; remove them")
    parts = prefix.split("/")
    if any(part == "" for part in parts):
        raise DataSourceError(f"{value!r}: the {what} has an empty path segment (//); remove it")
    if any(part in (".", "..") for part in parts):
        raise DataSourceError(
            f"{value!r}: the {what} has a '.' or '..' segment; write the plain path instead"
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


def azure_container_problem(container: str) -> str | None:
    """What breaks Azure Blob Storage's container naming rules, or None."""
    if not 3 <= len(container) <= 63:
        return f"must be 3 to 63 characters long (it has {len(container)})"
    if not re.fullmatch(r"[a-z0-9-]+", container):
        return "may contain only lowercase letters, digits and hyphens"
    if not _AZURE_CONTAINER.fullmatch(container):
        return "must begin and end with a letter or digit and must not contain two hyphens in a row"
    return None


def include_patterns(value: str | None) -> list[str]:
    """`data-include`'s comma-separated glob patterns, blanks dropped."""
    return [p.strip() for p in (value or "").split(",") if p.strip()]
