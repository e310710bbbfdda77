"""Validation of a `gcp-credential` Secret: one key, `key.json`, a Google credentials file.

Two kinds of file are accepted: a service-account key (`type: service_account`, as `gcloud iam
service-accounts keys create` writes it) and a workload identity federation configuration
(`type: external_account`, as `gcloud iam workload-identity-pools create-cred-config` writes it;
see google.aip.dev/auth/4117). Problems name the field and what is expected, never the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from gpu_admission.keyless import path_problem
from gpu_admission.names import GCP_KEY_FILE
from webhooks.credentials.checks import is_email, is_text, is_url
from webhooks.credentials.problems import Problem
from webhooks.credentials.rsa_keys import rsa_key_problem

SERVICE_ACCOUNT = "service_account"
EXTERNAL_ACCOUNT = "external_account"

# Other Google credential types, named so a user who picked the wrong file learns which it is.
# These are fixed type names, not secrets, so saying them back is safe.
_OTHER_TYPES = {
    "authorized_user": "a user's gcloud login (application default credentials)",
    "external_account_authorized_user": "a workforce user's gcloud login",
    "impersonated_service_account": "an impersonation configuration",
    "gdch_service_account": "a Google Distributed Cloud service account",
}

_PROJECT_ID = re.compile(r"([a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_HEX = re.compile(r"[0-9a-fA-F]+")
_DIGITS = re.compile(r"[0-9]+")

SUBJECT_TOKEN_TYPES = frozenset(
    {
        "urn:ietf:params:oauth:token-type:jwt",
        "urn:ietf:params:oauth:token-type:id_token",
        "urn:ietf:params:oauth:token-type:saml2",
        "urn:ietf:params:aws:token-type:aws4_request",
        "urn:ietf:params:oauth:token-type:mtls",
    }
)

KeyCheck = Callable[[bytes], str | None]


def validate_gcp(data: Mapping[str, bytes], key_check: KeyCheck = rsa_key_problem) -> list[Problem]:
    """Problems with a gcp-credential Secret's decoded data; empty when it is well formed."""
    problems = [
        Problem(
            key,
            "",
            f"a gcp-credential Secret holds only {GCP_KEY_FILE}; remove this key "
            f"(or, if it is the key file, name it {GCP_KEY_FILE})",
        )
        for key in sorted(data)
        if key != GCP_KEY_FILE
    ]
    if GCP_KEY_FILE not in data:
        problems.append(
            Problem(
                GCP_KEY_FILE,
                "",
                "is missing; create the Secret with --from-file=key.json=<your key file>",
            )
        )
        return problems
    document, problem = _parse_json(data[GCP_KEY_FILE])
    if problem is not None:
        return [*problems, problem]
    assert document is not None
    kind = document.get("type")
    if kind == SERVICE_ACCOUNT:
        problems += _service_account(document, key_check)
    elif kind == EXTERNAL_ACCOUNT:
        problems += _external_account(document)
    else:
        problems.append(_wrong_type(kind))
    return problems


def _parse_json(raw: bytes) -> tuple[dict[str, Any] | None, Problem | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, Problem(GCP_KEY_FILE, "", "must be a UTF-8 JSON file; this is binary data")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        # The position and parser message help find the fault and hold no content.
        return None, Problem(
            GCP_KEY_FILE,
            "",
            f"is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            "use the file exactly as Google issued it",
        )
    if not isinstance(document, dict):
        return None, Problem(GCP_KEY_FILE, "", "must be a JSON object, as Google issues it")
    return document, None


def _wrong_type(kind: object) -> Problem:
    accepted = (
        f"{SERVICE_ACCOUNT} (a service-account key) or {EXTERNAL_ACCOUNT} (workload identity)"
    )
    if kind is None:
        return Problem(GCP_KEY_FILE, "type", f"is missing; expected {accepted}")
    if isinstance(kind, str) and kind in _OTHER_TYPES:
        return Problem(
            GCP_KEY_FILE,
            "type",
            f"is {kind}, {_OTHER_TYPES[kind]}, which cannot be shared with pods; "
            f"expected {accepted}",
        )
    return Problem(GCP_KEY_FILE, "type", f"is not a supported credential type; expected {accepted}")


def _field(field: str, expected: str) -> Problem:
    return Problem(GCP_KEY_FILE, field, expected)


def _require(
    document: Mapping[str, Any], field: str, ok: Callable[[object], bool], expected: str
) -> list[Problem]:
    if field not in document:
        return [_field(field, f"is missing; expected {expected}")]
    if not ok(document[field]):
        return [_field(field, f"must be {expected}")]
    return []


def _optional(
    document: Mapping[str, Any], field: str, ok: Callable[[object], bool], expected: str
) -> list[Problem]:
    return _require(document, field, ok, expected) if field in document else []


def _matches(pattern: re.Pattern[str]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and pattern.fullmatch(value) is not None


def _service_account(document: Mapping[str, Any], key_check: KeyCheck) -> list[Problem]:
    problems = [
        *_require(
            document,
            "project_id",
            _matches(_PROJECT_ID),
            "a Google Cloud project ID (6-30 lowercase letters, digits and hyphens)",
        ),
        *_require(
            document, "private_key_id", _matches(_HEX), "the key's ID, a string of hex digits"
        ),
        *_private_key(document, key_check),
        *_require(
            document,
            "client_email",
            is_email,
            "the service account's email, like name@project.iam.gserviceaccount.com",
        ),
        *_require(
            document, "client_id", _matches(_DIGITS), "the service account's numeric client ID"
        ),
        *_require(
            document, "token_uri", is_url, "an https URL, like https://oauth2.googleapis.com/token"
        ),
    ]
    for field in ("auth_uri", "auth_provider_x509_cert_url", "client_x509_cert_url"):
        problems += _optional(document, field, is_url, "an https URL")
    problems += _optional(document, "universe_domain", is_text, "a domain name")
    return problems


def _private_key(document: Mapping[str, Any], key_check: KeyCheck) -> list[Problem]:
    expected = "an RSA private key in PEM form"
    if "private_key" not in document:
        return [_field("private_key", f"is missing; expected {expected}")]
    value = document["private_key"]
    if not is_text(value):
        return [_field("private_key", f"must be {expected}")]
    problem = key_check(value.encode())
    return [] if problem is None else [_field("private_key", problem)]


def _external_account(document: Mapping[str, Any]) -> list[Problem]:
    problems = [
        *_require(
            document,
            "audience",
            lambda v: isinstance(v, str) and v.startswith("//") and len(v) > 2,
            "the workload identity provider's resource name, like "
            "//iam.googleapis.com/projects/<number>/locations/global/workloadIdentityPools/"
            "<pool>/providers/<provider>",
        ),
        *_require(
            document,
            "subject_token_type",
            lambda v: v in SUBJECT_TOKEN_TYPES,
            "one of " + ", ".join(sorted(SUBJECT_TOKEN_TYPES)),
        ),
        *_require(
            document, "token_url", is_url, "an https URL, like https://sts.googleapis.com/v1/token"
        ),
        *_credential_source(document),
    ]
    problems += _optional(document, "service_account_impersonation_url", is_url, "an https URL")
    problems += _optional(document, "token_info_url", is_url, "an https URL")
    for field in ("client_id", "client_secret", "quota_project_id", "workforce_pool_user_project"):
        problems += _optional(document, field, is_text, "a non-empty string")
    impersonation = document.get("service_account_impersonation")
    if impersonation is not None:
        lifetime = (
            impersonation.get("token_lifetime_seconds") if isinstance(impersonation, dict) else None
        )
        if not isinstance(impersonation, dict) or (
            lifetime is not None
            and (
                isinstance(lifetime, bool)
                or not isinstance(lifetime, int)
                or not 600 <= lifetime <= 43200
            )
        ):
            problems.append(
                _field(
                    "service_account_impersonation",
                    "must be an object whose token_lifetime_seconds, if set, is 600 to 43200",
                )
            )
    return problems


_SOURCE_KINDS = ("file", "url", "executable", "certificate")


def _credential_source(document: Mapping[str, Any]) -> list[Problem]:
    field = "credential_source"
    expected = (
        "an object with exactly one of file, url, executable, environment_id (AWS) or certificate"
    )
    source = document.get(field)
    if field not in document:
        return [_field(field, f"is missing; expected {expected}")]
    if not isinstance(source, dict):
        return [_field(field, f"must be {expected}")]
    # An AWS source also carries `url` (the metadata server), so environment_id decides first.
    kinds = (
        ["environment_id"]
        if "environment_id" in source
        else [k for k in _SOURCE_KINDS if k in source]
    )
    if len(kinds) != 1:
        return [_field(field, f"must be {expected}")]
    kind = kinds[0]
    if kind == "file":
        problems = _nested(source, "file", is_text, "the path of the subject token file")
        path = source.get("file")
        problem = path_problem(path) if is_text(path) else None
        if problem is not None:
            # The pod's ServiceAccount token is projected at this path: it must be servable.
            problems.append(_field("credential_source.file", problem))
        return problems + _token_format(source)
    if kind == "url":
        problems = _nested(source, "url", lambda v: is_url(v, ("http", "https")), "an http(s) URL")
        headers = source.get("headers")
        if headers is not None and not (
            isinstance(headers, dict) and all(isinstance(v, str) for v in headers.values())
        ):
            problems.append(_field(f"{field}.headers", "must be an object of string values"))
        return problems + _token_format(source)
    if kind == "executable":
        return _executable(source.get("executable"))
    if kind == "environment_id":
        return _aws_source(source)
    return _certificate(source.get("certificate"))


def _nested(
    source: Mapping[str, Any], name: str, ok: Callable[[object], bool], expected: str
) -> list[Problem]:
    return (
        [] if ok(source.get(name)) else [_field(f"credential_source.{name}", f"must be {expected}")]
    )


def _token_format(source: Mapping[str, Any]) -> list[Problem]:
    fmt = source.get("format")
    if fmt is None:
        return []
    field = "credential_source.format"
    if not isinstance(fmt, dict) or fmt.get("type", "text") not in ("text", "json"):
        return [_field(field, 'must be an object with type "text" or "json"')]
    if fmt.get("type") == "json" and not is_text(fmt.get("subject_token_field_name")):
        return [_field(f"{field}.subject_token_field_name", 'is required when type is "json"')]
    return []


def _executable(executable: object) -> list[Problem]:
    field = "credential_source.executable"
    if not isinstance(executable, dict):
        return [_field(field, "must be an object with a command")]
    problems = []
    if not is_text(executable.get("command")):
        problems.append(
            _field(f"{field}.command", "must be the command to run, a non-empty string")
        )
    timeout = executable.get("timeout_millis")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or not 5000 <= timeout <= 120000
    ):
        problems.append(_field(f"{field}.timeout_millis", "must be an integer from 5000 to 120000"))
    if "output_file" in executable and not is_text(executable["output_file"]):
        problems.append(_field(f"{field}.output_file", "must be a file path"))
    return problems


def _aws_source(source: Mapping[str, Any]) -> list[Problem]:
    field = "credential_source"
    problems = []
    environment_id = source.get("environment_id")
    if not (isinstance(environment_id, str) and re.fullmatch(r"aws[0-9]+", environment_id)):
        problems.append(_field(f"{field}.environment_id", 'must be "aws1" for AWS credentials'))
    if not is_url(source.get("regional_cred_verification_url"), ("http", "https")):
        problems.append(
            _field(
                f"{field}.regional_cred_verification_url",
                "is required: the AWS GetCallerIdentity URL with a {region} placeholder",
            )
        )
    for name in ("region_url", "url", "imdsv2_session_token_url"):
        if name in source and not is_url(source[name], ("http", "https")):
            problems.append(_field(f"{field}.{name}", "must be an http(s) URL"))
    return problems


def _certificate(certificate: object) -> list[Problem]:
    field = "credential_source.certificate"
    if not isinstance(certificate, dict):
        return [_field(field, "must be an object")]
    uses_default = certificate.get("use_default_certificate_config") is True
    location = certificate.get("certificate_config_location")
    if uses_default == (location is not None) or (location is not None and not is_text(location)):
        return [
            _field(
                field,
                "must set exactly one of use_default_certificate_config: true or "
                "certificate_config_location (a path)",
            )
        ]
    return []
