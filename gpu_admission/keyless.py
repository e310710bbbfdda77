"""Keyless Google credentials: what a workload identity federation file (`type:
external_account`, `credential_source.file`) needs from the pod, read from the file.

Such a file names where the subject token is read (`credential_source.file`) and the workload
identity provider (`audience`, `//iam.googleapis.com/projects/<number>/locations/global/
workloadIdentityPools/<pool>/providers/<provider>`). A provider with no allowed audiences of its
own accepts tokens whose audience is that name as an https URL, which is what Google's
Kubernetes guide projects: `https://iam.googleapis.com/projects/...`. Neither value is secret;
they are the only things ever kept from the file.

The token is projected as a volume mounted at the file's directory, so the directory must be
one the injector can own: under /var/run/secrets/, and not where Kubernetes mounts the pod's own
API token, where gcp-credential key files are mounted, or where the AWS web identity token goes.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.names import (
    AWS_TOKEN_DIR,
    AWS_TOKEN_PATH,
    AZURE_TOKEN_AUDIENCE,
    AZURE_TOKEN_DIR,
    AZURE_TOKEN_PATH,
    GCP_MOUNT_ROOT,
)

TOKEN_ROOT = "/var/run/secrets"
RESERVED_DIRS = (
    "/var/run/secrets/kubernetes.io",
    GCP_MOUNT_ROOT,
    AWS_TOKEN_DIR,
    AZURE_TOKEN_DIR,
)
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
EXAMPLE_PATH = "/var/run/secrets/tokens/gcp-workload-identity/token"


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """A projected ServiceAccount token a credential needs: where, and for whom."""

    path: str
    audience: str

    @property
    def directory(self) -> str:
        return posixpath.dirname(self.path)

    @property
    def file(self) -> str:
        return posixpath.basename(self.path)

    def volume(self, name: str, seconds: int) -> dict[str, Any]:
        """The projected volume that puts the token at `path` once mounted at `directory`."""
        token = {"audience": self.audience, "expirationSeconds": seconds, "path": self.file}
        return {"name": name, "projected": {"sources": [{"serviceAccountToken": token}]}}


def aws_web_identity(audience: str) -> TokenRequest:
    """The token keyless AWS credentials read (AWS_WEB_IDENTITY_TOKEN_FILE)."""
    return TokenRequest(AWS_TOKEN_PATH, audience)


def azure_workload_identity() -> TokenRequest:
    """The token keyless Azure credentials read (AZURE_FEDERATED_TOKEN_FILE), where and for
    whom Azure's own workload-identity webhook projects it."""
    return TokenRequest(AZURE_TOKEN_PATH, AZURE_TOKEN_AUDIENCE)


def path_problem(path: str) -> str | None:
    """Why the injector cannot project a token at `path` (None when it can)."""
    parts = path.split("/")
    if (
        not path.startswith(TOKEN_ROOT + "/")
        or posixpath.normpath(path) != path
        or len(parts) < 6  # "", var, run, secrets, <directory>, <file>
        or not all(_SEGMENT.fullmatch(p) for p in parts[4:])
    ):
        return (
            f"must be a file in a directory of its own under {TOKEN_ROOT}/, like {EXAMPLE_PATH} "
            "(the ServiceAccount token is projected into that directory)"
        )
    directory = posixpath.dirname(path)
    for reserved in RESERVED_DIRS:
        if directory == reserved or directory.startswith(reserved + "/"):
            return (
                f"must not be under {reserved} (already used for other credentials); use a "
                f"directory of its own, like {posixpath.dirname(EXAMPLE_PATH)}"
            )
    return None


def token_audience(provider: str) -> str:
    """`//iam.googleapis.com/projects/...` -> `https://iam.googleapis.com/projects/...`."""
    return "https:" + provider if provider.startswith("//") else provider


def gcp_token_request(document: Mapping[str, Any]) -> TokenRequest | None:
    """The token a parsed external_account file reads from a file; None for other files."""
    if document.get("type") != "external_account":
        return None
    source = document.get("credential_source")
    audience = document.get("audience")
    if not isinstance(source, Mapping) or not isinstance(audience, str):
        return None
    path = source.get("file")
    if not isinstance(path, str) or path_problem(path) is not None:
        return None
    return TokenRequest(path, token_audience(audience))


def gcp_token_request_from(key_json: bytes) -> TokenRequest | None:
    """The same, from a key.json's bytes (anything unreadable needs no token)."""
    try:
        document = json.loads(key_json)
    except (ValueError, UnicodeDecodeError):
        return None
    return gcp_token_request(document) if isinstance(document, Mapping) else None
