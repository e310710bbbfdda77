"""Validation of an `aws-credential` Secret, in one of two forms:

- access keys: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`;
- keyless (web identity): `AWS_ROLE_ARN`, optionally `AWS_ROLE_SESSION_NAME`; pods get a projected
  ServiceAccount token that the SDKs exchange for the role's credentials.

Both may add `AWS_REGION` and `AWS_ENDPOINT_URL`. A Secret that mixes the forms is refused: which
one the SDK would use depends on its credential chain, not on what the user meant. With an
endpoint (S3-compatible storage such as MinIO or Ceph) key, region and ARN formats are the
store's own business, so AWS's formats are enforced only without one. Problems name the key and
what is expected, never the value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from gpu_admission.names import (
    AWS_ACCESS_KEY_ID,
    AWS_DEFAULT_REGION,
    AWS_ENDPOINT_URL,
    AWS_OPTIONAL_KEYS,
    AWS_REGION,
    AWS_REQUIRED_KEYS,
    AWS_ROLE_ARN,
    AWS_ROLE_SESSION_NAME,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
)
from webhooks.credentials.checks import is_url
from webhooks.credentials.problems import Problem
from webhooks.credentials.secret_data import text_values

ALLOWED_KEYS = (*AWS_REQUIRED_KEYS, *AWS_OPTIONAL_KEYS, AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME)
KEY_FORM = (*AWS_REQUIRED_KEYS, AWS_SESSION_TOKEN)
KEYLESS_FORM = (AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME)

_ACCESS_KEY_ID = re.compile(r"(AKIA|ASIA)[A-Z0-9]{16}")
_SECRET_ACCESS_KEY = re.compile(r"[A-Za-z0-9/+]{40}")
# us-east-1, eu-central-2, us-gov-west-1, us-isob-east-1, ap-southeast-5 ...
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]{1,2}")
_ROLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}")
_SESSION_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]{2,64}")


def is_keyless(keys: Iterable[str]) -> bool:
    """The keyless form: a role to assume with the pod's token, and no access keys."""
    keys = set(keys)
    return AWS_ROLE_ARN in keys and not keys & set(AWS_REQUIRED_KEYS)


def closest_key(key: str) -> str | None:
    """The allowed key a misspelt one most likely meant."""
    if key.upper() == AWS_DEFAULT_REGION:
        return AWS_REGION
    matches = difflib.get_close_matches(key.upper(), ALLOWED_KEYS, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unknown_key(key: str) -> Problem:
    suggestion = closest_key(key)
    hint = f"did you mean {suggestion}? " if suggestion else ""
    return Problem(
        key,
        "",
        f"is not an aws-credential key; {hint}allowed keys: {', '.join(ALLOWED_KEYS)}",
    )


def validate_aws(data: Mapping[str, bytes]) -> list[Problem]:
    """Problems with an aws-credential Secret's decoded data; empty when it is well formed."""
    problems = [_unknown_key(key) for key in sorted(data) if key not in ALLOWED_KEYS]
    problems += _form_problems(set(data))
    text, unreadable = text_values(data, ALLOWED_KEYS)
    problems += unreadable
    if AWS_ENDPOINT_URL in text:
        if not is_url(text[AWS_ENDPOINT_URL], ("http", "https")):
            problems.append(
                Problem(
                    AWS_ENDPOINT_URL, "", "must be an http(s) URL, like https://minio.example:9000"
                )
            )
        return problems
    return problems + _aws_formats(text)


def _form_problems(keys: set[str]) -> list[Problem]:
    """Which of the two forms the Secret is, and what it lacks (or mixes)."""
    has_keys = keys & set(KEY_FORM)
    has_role = keys & set(KEYLESS_FORM)
    if has_keys and has_role:
        return [
            Problem(
                AWS_ROLE_ARN if AWS_ROLE_ARN in keys else AWS_ROLE_SESSION_NAME,
                "",
                f"belongs to the keyless form, but the Secret also holds access keys "
                f"({', '.join(sorted(has_keys))}); keep one form: access keys, or "
                f"{AWS_ROLE_ARN} alone",
            )
        ]
    if has_role:
        if AWS_ROLE_ARN not in keys:
            return [
                Problem(
                    AWS_ROLE_ARN,
                    "",
                    f"is required with {AWS_ROLE_SESSION_NAME}: the keyless form names the role "
                    "to assume",
                )
            ]
        return []
    return [
        Problem(
            key,
            "",
            f"is required (or, for keyless access with the pod's ServiceAccount token, give "
            f"{AWS_ROLE_ARN} instead of access keys)",
        )
        for key in AWS_REQUIRED_KEYS
        if key not in keys
    ]


_ELSEWHERE = f"(for S3-compatible storage, set {AWS_ENDPOINT_URL})"
# AWS's own formats: key -> (pattern, what it must be).
_FORMATS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        AWS_ACCESS_KEY_ID,
        _ACCESS_KEY_ID,
        f"must be AKIA or ASIA followed by 16 uppercase letters or digits {_ELSEWHERE}",
    ),
    (
        AWS_SECRET_ACCESS_KEY,
        _SECRET_ACCESS_KEY,
        f"must be 40 characters of letters, digits, / and + {_ELSEWHERE}",
    ),
    (AWS_REGION, _REGION, "must be an AWS region, like us-east-1"),
    (
        AWS_ROLE_ARN,
        _ROLE_ARN,
        f"must be an IAM role ARN, like arn:aws:iam::123456789012:role/dataset-reader {_ELSEWHERE}",
    ),
    (
        AWS_ROLE_SESSION_NAME,
        _SESSION_NAME,
        "must be 2 to 64 characters of letters, digits and +=,.@_-",
    ),
)


def _aws_formats(text: Mapping[str, str]) -> list[Problem]:
    """AWS's own formats, for Secrets that talk to AWS itself (no endpoint)."""
    problems = [
        Problem(key, "", expected)
        for key, pattern, expected in _FORMATS
        if key in text and not pattern.fullmatch(text[key])
    ]
    key_id = text.get(AWS_ACCESS_KEY_ID)
    if key_id is not None and key_id.startswith("ASIA") and AWS_SESSION_TOKEN not in text:
        problems.append(
            Problem(
                AWS_SESSION_TOKEN,
                "",
                f"is required: the {AWS_ACCESS_KEY_ID} is a temporary (ASIA) key, "
                "which works only with its session token",
            )
        )
    return problems
