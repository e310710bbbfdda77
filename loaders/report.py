"""What a load did, for the controller and for people: rclone's JSON log kept as it streams, the
failure in plain words, and the compact summary the loader leaves in its termination message."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpu_admission.names import AWS_WEB_IDENTITY_TOKEN_FILE, AZURE_FEDERATED_TOKEN_FILE
from loaders.shards import ShardPlan
from loaders.stop import STOPPED_CAUSE

MAX_SUMMARY_BYTES = 4096  # the kubelet's termination-message limit
MAX_ERRORS_KEPT = 20

NETWORK = (
    "no such host",
    "connection refused",
    "i/o timeout",
    "network is unreachable",
    "TLS handshake timeout",
    "context deadline exceeded",
)
# rclone error text -> what happened, in words a researcher can act on, and whether trying
# again could help (True: permanent, needs a person). First match wins; unmatched failures are
# taken as transient.
CAUSES: tuple[tuple[tuple[str, ...], str, bool], ...] = (
    (
        ("WorkloadIdentityCredential authentication failed", "AADSTS"),
        "Azure workload identity got no token for the loader's ServiceAccount: the identity "
        "named by AZURE_CLIENT_ID (tenant AZURE_TENANT_ID) needs a federated credential for "
        "{subject} from this cluster's issuer, audience api://AzureADTokenExchange",
        True,
    ),
    (
        ("AssumeRoleWithWebIdentity", "InvalidIdentityToken", "WebIdentityErr"),
        "could not assume the role with the loader's ServiceAccount token: the IAM role's trust "
        "policy must allow {subject} from this cluster's OIDC provider (audience {audience}); "
        "check the role named by AWS_ROLE_ARN in the credentials Secret",
        True,
    ),
    (
        (
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "invalid_grant",
            "ExpiredToken",
            "InvalidToken",
            "status code 401",
            "StatusCode: 401",
            "Unauthorized",
            # Azure Blob (azcore's error text: RESPONSE <status> ... ERROR CODE: <code>).
            "AuthenticationFailed",
            "AuthorizationFailure",
            "RESPONSE 401",
            "InvalidAuthenticationInfo",
        ),
        "the storage service rejected the credentials; check the keys in the credentials Secret",
        True,
    ),
    (
        (
            "AccessDenied",
            "Access Denied",
            "StatusCode: 403",
            "status code 403",
            "Forbidden",
            "does not have storage.objects",
            "AuthorizationPermissionMismatch",
            "RESPONSE 403",
            "HTTP Error: 403",
            "HTTP Error: 401",
        ),
        "access denied: these credentials (or anonymous access) may not read the source; "
        "grant read access or name a credentials Secret that has it",
        True,
    ),
    (
        (
            "NoSuchBucket",
            "bucket does not exist",
            "directory not found",
            "notFound",
            "StatusCode: 404",
            "status code 404",
            "ContainerNotFound",
            "BlobNotFound",
            "RESPONSE 404",
            "HTTP Error: 404",
            "HTTP Error: 410",
            "object not found",
        ),
        "the source was not found: the bucket or prefix does not exist; check the data source",
        True,
    ),
    (
        (
            "SlowDown",
            "RequestLimitExceeded",
            "TooManyRequests",
            "Throttling",
            "rateLimitExceeded",
            "StatusCode: 429",
            "status code 429",
            "StatusCode: 503",
            "status code 503",
            "ServerBusy",
            "OperationTimedOut",
            "InternalError",
            "RESPONSE 500",
            "RESPONSE 503",
            "HTTP Error: 429",
            "HTTP Error: 500",
            "HTTP Error: 502",
            "HTTP Error: 503",
            "HTTP Error: 504",
        ),
        "the storage service is throttling requests or briefly unavailable (retried)",
        False,
    ),
    (
        NETWORK,
        "the storage endpoint could not be reached; check the endpoint and the network",
        False,
    ),
    (
        ("x509: certificate", "tls: failed to verify certificate"),
        "the server's TLS certificate is not trusted by the loader: if the server uses a private "
        "CA, put that CA in the bundle named by dataset.trusted_ca_config_map",
        True,
    ),
    (
        ("no space left on device", "disk quota exceeded"),
        "the volume is full; request more storage for the PVC",
        True,
    ),
    (
        ("permission denied", "read-only file system"),
        "the loader cannot write to the volume; check the volume's permissions",
        True,
    ),
)


@dataclass
class RunLog:
    """What the wrapper keeps from rclone's JSON log while streaming it."""

    stats: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def take(self, line: str) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.strip():  # rclone prints plain text only for usage and panics
                self._error(line.strip())
            return
        if not isinstance(entry, dict):
            return
        if isinstance(entry.get("stats"), dict):
            self.stats = entry["stats"]
        if entry.get("level") in ("error", "critical", "fatal"):
            self._error(str(entry.get("msg", "")).strip())

    def _error(self, text: str) -> None:
        if text and len(self.errors) < MAX_ERRORS_KEPT and text not in self.errors:
            self.errors.append(text)


def classify(
    errors: Iterable[str], exit_code: int, identity: Mapping[str, str] | None = None
) -> tuple[str, bool]:
    """(the failure in plain words with rclone's own first error line after it, permanent).
    `identity`: who the loader's web identity token says it is (subject, audience)."""
    errors = list(errors)
    text = "\n".join(errors)
    # azcore's errors span several lines (a rule, the response, the code): the first says it.
    detail = errors[0].splitlines()[0].strip() if errors else ""
    # Entra ID's reason (AADSTS<code>: ...) sits deep in azidentity's report: it says the most.
    entra = [line.strip() for line in text.splitlines() if "AADSTS" in line]
    detail = (entra[0][:300] if entra else detail) or f"rclone exited with code {exit_code}"
    known = {"subject": "this ServiceAccount", "audience": "sts.amazonaws.com", **(identity or {})}
    if "failed to acquire a token" in text and any(n in text for n in NETWORK):
        return f"the identity service could not be reached; retried (rclone: {detail})", False
    for needles, words, permanent in CAUSES:
        if any(needle in text for needle in needles):
            return f"{words.format(**known)} (rclone: {detail})", permanent
    return f"the copy failed (rclone: {detail})", False


def plain_cause(errors: Iterable[str], exit_code: int) -> str:
    return classify(errors, exit_code)[0]


def token_identity(env: Mapping[str, str]) -> dict[str, str]:
    """The subject and audience of the projected ServiceAccount token the loader's web identity
    uses (AWS or Azure: the file `env` names), read from its claims (not verified: only to say
    who asked). The token itself never leaves this function."""
    path = env.get(AWS_WEB_IDENTITY_TOKEN_FILE) or env.get(AZURE_FEDERATED_TOKEN_FILE)
    if not path:
        return {}
    try:
        payload = Path(path).read_text().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return {}
    audience = claims.get("aud")
    audience = ", ".join(audience) if isinstance(audience, list) else str(audience or "")
    subject = str(claims.get("sub") or "")
    return {k: v for k, v in (("subject", subject), ("audience", audience)) if v}


def summary(
    log: RunLog,
    exit_code: int,
    duration: float,
    source: str,
    interrupted: bool = False,
    shard: ShardPlan | None = None,
    identity: Mapping[str, str] | None = None,
    failure: tuple[str, bool] | None = None,
) -> dict[str, Any]:
    """`failure`: (cause, permanent) the loader found itself: a digest that differs, a source
    too big for the volume, a source that stopped sending."""
    stats = log.stats
    result: dict[str, Any] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "source": source,
        "bytes": int(stats.get("bytes", 0) or 0),
        "files": int(stats.get("transfers", 0) or 0),
        "checks": int(stats.get("checks", 0) or 0),
        "durationSeconds": round(duration, 3),
        "exitCode": exit_code,
    }
    if shard is not None:
        result.update(shard.summary_fields())
    if exit_code != 0:
        cause, permanent = failure or classify(log.errors, exit_code, identity)
        if interrupted:
            cause, permanent = STOPPED_CAUSE, False
        result["cause"] = cause
        result["permanent"] = permanent
    return result


def encode_summary(result: Mapping[str, Any]) -> bytes:
    """Compact JSON within the kubelet's 4 KiB termination-message limit (the cause is cut)."""
    data = json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) <= MAX_SUMMARY_BYTES:
        return data
    trimmed = dict(result)
    cause = str(trimmed.get("cause", ""))
    overflow = len(data) - MAX_SUMMARY_BYTES + 3
    trimmed["cause"] = (
        cause.encode()[: max(0, len(cause.encode()) - overflow)].decode(errors="ignore") + "..."
    )
    return json.dumps(trimmed, separators=(",", ":"), ensure_ascii=False).encode()


def write_summary(result: Mapping[str, Any], out: IO[str], termination_log: str) -> None:
    """The summary as the loader's last log line and as its termination message."""
    out.write(json.dumps({"level": "notice", "msg": "load finished", "summary": result}) + "\n")
    out.flush()
    try:
        Path(termination_log).write_bytes(encode_summary(result))
    except OSError as exc:
        print(f"cannot write the termination message to {termination_log}: {exc}", file=sys.stderr)
