"""Projected ServiceAccount tokens for keyless credentials, and the volume helpers they share
with the key-file injection.

- Keyless AWS (aws-credential with AWS_ROLE_ARN): a projected token with audience
  `credentials.aws_token_audience` at /var/run/secrets/sts.amazonaws.com/serviceaccount/token,
  and AWS_WEB_IDENTITY_TOKEN_FILE pointing at it.
- Keyless Google (gcp-credential whose key.json reads its subject token from a file): a
  projected token at exactly that path, with the provider's audience (gpu_admission.keyless).

- Keyless Azure (azure-credential with AZURE_CLIENT_ID, no key or SAS): a projected token with
  audience api://AzureADTokenExchange at /var/run/secrets/azure/tokens/azure-identity-token, and
  AZURE_FEDERATED_TOKEN_FILE pointing at it, as Azure's own workload-identity webhook does; a pod
  that webhook already changed keeps its volume (same name, audience and file).

A volume of the same name, or another volume mounted where a token must go, is reported in a
warning and never overwritten.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.cluster.view import SecretInfo
from gpu_admission.keyless import TokenRequest, aws_web_identity, azure_workload_identity
from gpu_admission.names import (
    AWS_TOKEN_DIR,
    AWS_TOKEN_PATH,
    AWS_WEB_IDENTITY_TOKEN_FILE,
    AZURE_FEDERATED_TOKEN_FILE,
    AZURE_TOKEN_PATH,
)
from webhooks.core.patch import Patch
from webhooks.policies.containers import ContainerRef

MAX_VOLUME_NAME = 63  # a DNS label
VOLUME_PREFIX = "gcp-"
HASH_LENGTH = 8
AWS_TOKEN_VOLUME = "aws-web-identity-token"
AZURE_TOKEN_VOLUME = "azure-identity-token"  # the name Azure's workload-identity webhook uses


@dataclass(frozen=True, slots=True)
class TokenSettings:
    audience: str
    expiration_seconds: int


def aws_token_volume(settings: TokenSettings) -> dict[str, Any]:
    return aws_web_identity(settings.audience).volume(AWS_TOKEN_VOLUME, settings.expiration_seconds)


def _token_volume(patch: Patch, settings: TokenSettings) -> str | None:
    """The web-identity token volume (added once); None when the pod has another volume of
    that name."""
    wanted = aws_token_volume(settings)
    for volume in (patch.obj.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == AWS_TOKEN_VOLUME:
            return AWS_TOKEN_VOLUME if volume == wanted else None
    patch.append("/spec/volumes", wanted)
    return AWS_TOKEN_VOLUME


def web_identity_env() -> dict[str, Any]:
    return {"name": AWS_WEB_IDENTITY_TOKEN_FILE, "value": AWS_TOKEN_PATH}


def azure_token_env() -> dict[str, Any]:
    return {"name": AZURE_FEDERATED_TOKEN_FILE, "value": AZURE_TOKEN_PATH}


def _same_token(volume: Mapping[str, Any], token: TokenRequest) -> bool:
    """A projected volume whose one source is a ServiceAccount token for `token`'s audience
    and file (the expiry may differ: whoever added it chose one)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    if len(sources) != 1:
        return False
    projected = sources[0].get("serviceAccountToken") or {}
    return projected.get("audience") == token.audience and projected.get("path") == token.file


def inject_azure_token(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], seconds: int
) -> bool:
    """The workload-identity token volume and its mounts; False when a different volume of
    that name is in the way (nothing is added then)."""
    token = azure_workload_identity()
    for volume in (patch.obj.get("spec") or {}).get("volumes") or []:
        if volume.get("name") == AZURE_TOKEN_VOLUME:
            if _same_token(volume, token):
                break
            patch.warn(
                f"the pod already has a volume named {AZURE_TOKEN_VOLUME}; keyless Secret "
                f'"{info.name}" needs that name for its token, so no token was added'
            )
            return False
    else:
        patch.append("/spec/volumes", token.volume(AZURE_TOKEN_VOLUME, seconds))
    _mount_token(patch, containers, AZURE_TOKEN_VOLUME, token.directory, info.name)
    return True


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def volume_name(secret: str, taken: Iterable[str]) -> str:
    """A DNS-label volume name for `secret`, unused in the pod and stable for the same inputs.

    `gcp-<secret>` when that is a valid, free label; otherwise a prefix of it with a short hash
    of the Secret name, so long or dotted names and collisions still get a distinct name.
    """
    taken = set(taken)
    plain = f"{VOLUME_PREFIX}{secret}"
    if len(plain) <= MAX_VOLUME_NAME and "." not in plain and plain not in taken:
        return plain
    stem = plain.replace(".", "-")[: MAX_VOLUME_NAME - HASH_LENGTH - 1].rstrip("-")
    attempt = 0
    while True:
        salt = secret if attempt == 0 else f"{secret}#{attempt}"
        name = f"{stem}-{_short_hash(salt)}"
        if name not in taken:
            return name
        attempt += 1


def mounts_at(ref: ContainerRef, path: str) -> list[Mapping[str, Any]]:
    mounts = ref.container.get("volumeMounts") or []
    return [m for m in mounts if str(m.get("mountPath", "")).rstrip("/") == path]


def inject_aws_token(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], settings: TokenSettings
) -> bool:
    """The web-identity token volume and its mounts; False when the pod's own volume of that
    name is in the way (nothing is added then)."""
    volume = _token_volume(patch, settings)
    if volume is None:
        patch.warn(
            f"the pod already has a volume named {AWS_TOKEN_VOLUME}; keyless Secret "
            f'"{info.name}" needs that name for its token, so no token was added'
        )
        return False
    _mount_token(patch, containers, volume, AWS_TOKEN_DIR, info.name)
    return True


def inject_gcp_token(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], seconds: int
) -> None:
    """A keyless Google file: its subject token, projected where the file reads it."""
    token = info.token
    assert token is not None
    volumes = (patch.obj.get("spec") or {}).get("volumes") or []
    wanted = token.volume("", seconds)["projected"]
    volume = next((v["name"] for v in volumes if v.get("projected") == wanted), None)
    if volume is None:
        volume = volume_name(f"token-{info.name}", (v.get("name", "") for v in volumes))
        patch.append("/spec/volumes", token.volume(volume, seconds))
    _mount_token(patch, containers, volume, token.directory, info.name)


def _mount_token(
    patch: Patch, containers: list[ContainerRef], volume: str, directory: str, secret: str
) -> None:
    """The token volume, read-only at `directory` in each container where nothing else is."""
    for ref in containers:
        at_path = mounts_at(ref, directory)
        if not at_path:
            patch.append(
                f"{ref.path}/volumeMounts",
                {"name": volume, "mountPath": directory, "readOnly": True},
            )
        elif all(m.get("name") != volume for m in at_path):
            patch.warn(
                f"{ref.describe} already mounts another volume at {directory}; keyless "
                f'Secret "{secret}" cannot give it a token there'
            )
