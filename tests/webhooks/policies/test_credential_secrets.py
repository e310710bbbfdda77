"""The credential Secret validating policy: every rule, on real captures and built Secrets."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from tests.support.keys import pem
from tests.webhooks.policy_helpers import FIXTURES, make_request
from webhooks.core.review import AdmissionRequest, Verdict, parse_review
from webhooks.credentials.aws import closest_key
from webhooks.credentials.rsa_keys import RsaKeyChecker
from webhooks.policies.credential_secrets import POLICY_NAME, policies

VIEW = StaticClusterView()
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def service_account_file(rsa_pem: str, **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": "service_account",
        "project_id": "ml-platform-demo",
        "private_key_id": "3f1c2a9b7e6d5c4b3a2918f7e6d5c4b3a2918f7e",
        "private_key": rsa_pem,
        "client_email": "loader@ml-platform-demo.iam.gserviceaccount.com",
        "client_id": "104729384756102938475",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/loader",
        "universe_domain": "googleapis.com",
    }
    for field, value in changes.items():
        if value is None:
            document.pop(field, None)
        else:
            document[field] = value
    return document


def external_account_file(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/123456789/locations/global/"
        "workloadIdentityPools/onprem/providers/k8s",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": "https://sts.googleapis.com/v1/token",
        "service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/"
        "-/serviceAccounts/loader@p.iam.gserviceaccount.com:generateAccessToken",
        "credential_source": {
            "file": "/var/run/secrets/tokens/gcp-token",
            "format": {"type": "text"},
        },
    }
    for field, value in changes.items():
        if value is None:
            document.pop(field, None)
        else:
            document[field] = value
    return document


def secret(
    secret_type: str,
    data: dict[str, str | bytes] | None = None,
    string_data: dict[str, str] | None = None,
    name: str = "creds",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ml"},
        "type": secret_type,
    }
    if data is not None:
        obj["data"] = {
            k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode()
            for k, v in data.items()
        }
    if string_data is not None:
        obj["stringData"] = string_data
    return obj


def gcp_secret(document: dict[str, Any] | str) -> dict[str, Any]:
    text = document if isinstance(document, str) else json.dumps(document, indent=2)
    return secret("gcp-credential", {"key.json": text})


def aws_secret(**values: str) -> dict[str, Any]:
    return secret("aws-credential", dict(values))


def validate(obj: dict[str, Any], config: Config | None = None, **fields: Any) -> Verdict:
    """The policy's verdict. Secrets of other types are out of its scope (the service answers
    them without it), and the policy itself passes them too."""
    (policy,) = policies(config or Config())
    request = make_request(obj, **fields)
    verdict = policy.validate(request, VIEW)
    if not policy.scope.matches(request):
        assert verdict.allowed
    return verdict


def denial(obj: dict[str, Any], **fields: Any) -> str:
    verdict = validate(obj, **fields)
    assert not verdict.allowed, "expected a denial"
    return verdict.message


def fixture_request(name: str) -> AdmissionRequest:
    return parse_review((FIXTURES / name).read_bytes(), "Secret")


# -- real captures -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "secret-gcp-stringdata.validating.json",
        "secret-aws-data.validating.json",
        "secret-update.validating.json",
        "secret-denied.validating.json",
    ],
)
def test_captured_secrets_are_admitted(name: str) -> None:
    (policy,) = policies(Config())
    assert policy.validate(fixture_request(name), VIEW).allowed


def test_scope_is_the_credential_types_only() -> None:
    (policy,) = policies(Config())
    for secret_type in ("gcp-credential", "aws-credential"):
        assert policy.scope.matches(make_request(secret(secret_type, {})))
    for secret_type in ("Opaque", "kubernetes.io/tls", "gcp-credentials"):
        assert not policy.scope.matches(make_request(secret(secret_type, {})))
    untyped = secret("Opaque", {})
    del untyped["type"]
    assert not policy.scope.matches(make_request(untyped))


def test_captured_update_is_validated_like_a_create() -> None:
    (policy,) = policies(Config())
    request = fixture_request("secret-update.validating.json")
    assert request.operation == "UPDATE"
    request.object["data"]["AWS_REGION"] = base64.b64encode(b"mars-north").decode()
    verdict = policy.validate(request, VIEW)
    assert not verdict.allowed
    assert 'key "AWS_REGION"' in verdict.message


def test_captured_opaque_secret_passes_untouched() -> None:
    (policy,) = policies(Config())
    request = fixture_request("secret-denied.validating.json")
    before = copy.deepcopy(request.object)
    assert policy.validate(request, VIEW) == Verdict(True)
    assert request.object == before


def test_other_types_pass_even_with_nonsense_data() -> None:
    for secret_type in ("Opaque", "kubernetes.io/tls", "kubernetes.io/dockerconfigjson"):
        obj = secret(secret_type, {"key.json": b"\xff\x00not json"})
        obj["data"]["bad"] = "%%%not base64%%%"
        assert validate(obj).allowed


def test_secret_without_type_passes() -> None:
    obj = secret("Opaque", {"x": "y"})
    del obj["type"]
    assert validate(obj).allowed


def test_scope_is_create_and_update_only() -> None:
    (policy,) = policies(Config())
    obj = aws_secret(AWS_ACCESS_KEY_ID="bad")
    assert policy.name == POLICY_NAME
    assert policy.scope.matches(make_request(obj, operation="UPDATE"))
    assert not policy.scope.matches(make_request(obj, operation="DELETE"))
    assert not policy.scope.matches(make_request(obj, operation="CONNECT"))


def test_type_change_validates_the_new_object(rsa_pem: str) -> None:
    old = secret("Opaque", {"token": "x"})
    new = secret("gcp-credential", {"token": "x"})
    message = denial(new, operation="UPDATE", old_object=old)
    assert 'key "key.json": is missing' in message
    # From a credential type to Opaque: the new object is what counts.
    old = gcp_secret(service_account_file(rsa_pem))
    assert validate(secret("Opaque", {"a": "b"}), operation="UPDATE", old_object=old).allowed


# -- gcp-credential ----------------------------------------------------------------------------


def test_valid_service_account_key(rsa_pem: str) -> None:
    assert validate(gcp_secret(service_account_file(rsa_pem))).allowed


def test_minimal_service_account_key_without_optional_fields(rsa_pem: str) -> None:
    document = service_account_file(
        rsa_pem,
        auth_uri=None,
        auth_provider_x509_cert_url=None,
        client_x509_cert_url=None,
        universe_domain=None,
    )
    assert validate(gcp_secret(document)).allowed


def test_string_data_is_validated(rsa_pem: str) -> None:
    obj = secret(
        "gcp-credential", string_data={"key.json": json.dumps(service_account_file(rsa_pem))}
    )
    assert validate(obj).allowed
    obj = secret("gcp-credential", string_data={"key.json": "{}"})
    assert 'key "key.json", field "type": is missing' in denial(obj)


def test_string_data_overrides_data_per_key(rsa_pem: str) -> None:
    good = json.dumps(service_account_file(rsa_pem))
    obj = secret("gcp-credential", {"key.json": "not json"}, string_data={"key.json": good})
    assert validate(obj).allowed
    obj = secret("gcp-credential", {"key.json": good}, string_data={"key.json": "not json"})
    assert "is not valid JSON" in denial(obj)
    # A bad base64 value under data is overridden by stringData too.
    obj = secret("gcp-credential", string_data={"key.json": good})
    obj["data"] = {"key.json": "@@not-base64@@"}
    assert validate(obj).allowed


def test_bad_base64_is_denied() -> None:
    obj = secret("gcp-credential", {})
    obj["data"] = {"key.json": "@@not-base64@@"}
    message = denial(obj)
    assert 'key "key.json": the value under data must be base64-encoded' in message


def test_non_string_string_data_is_denied() -> None:
    obj = secret("aws-credential", {"AWS_SECRET_ACCESS_KEY": AWS_SECRET})
    obj["stringData"] = {"AWS_ACCESS_KEY_ID": 12}
    assert 'key "AWS_ACCESS_KEY_ID": the value under stringData must be a string' in denial(obj)


def test_missing_key_json() -> None:
    message = denial(secret("gcp-credential", {"credentials.json": "{}"}))
    assert 'key "key.json": is missing' in message
    assert 'key "credentials.json": a gcp-credential Secret holds only key.json' in message


def test_extra_keys_next_to_key_json(rsa_pem: str) -> None:
    obj = secret(
        "gcp-credential",
        {"key.json": json.dumps(service_account_file(rsa_pem)), "project": "x"},
    )
    assert 'key "project": a gcp-credential Secret holds only key.json' in denial(obj)


def test_empty_gcp_secret() -> None:
    assert 'key "key.json": is missing' in denial(secret("gcp-credential"))


def test_invalid_json_names_the_position() -> None:
    message = denial(gcp_secret('{\n  "type": "service_account",\n  oops\n}'))
    assert 'key "key.json": is not valid JSON' in message
    assert "line 3" in message


def test_binary_key_json() -> None:
    obj = secret("gcp-credential", {"key.json": b"\xff\xfe\x00\x01"})
    assert 'key "key.json": must be a UTF-8 JSON file' in denial(obj)


def test_json_that_is_not_an_object() -> None:
    assert "must be a JSON object" in denial(gcp_secret("[1, 2]"))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (None, 'field "type": is missing'),
        ("authorized_user", "is authorized_user, a user's gcloud login"),
        ("impersonated_service_account", "is impersonated_service_account"),
        ("robot", 'field "type": is not a supported credential type'),
        (7, 'field "type": is not a supported credential type'),
    ],
)
def test_wrong_type(rsa_pem: str, kind: Any, expected: str) -> None:
    document = service_account_file(rsa_pem)
    if kind is None:
        del document["type"]
    else:
        document["type"] = kind
    message = denial(gcp_secret(document))
    assert expected in message
    assert "service_account" in message and "external_account" in message


REQUIRED_SERVICE_ACCOUNT_FIELDS = [
    "project_id",
    "private_key_id",
    "private_key",
    "client_email",
    "client_id",
    "token_uri",
]


@pytest.mark.parametrize("field", REQUIRED_SERVICE_ACCOUNT_FIELDS)
def test_each_missing_service_account_field(rsa_pem: str, field: str) -> None:
    message = denial(gcp_secret(service_account_file(rsa_pem, **{field: None})))
    assert f'key "key.json", field "{field}": is missing; expected' in message


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("project_id", "ML Platform!", "a Google Cloud project ID"),
        ("project_id", "", "a Google Cloud project ID"),
        ("private_key_id", "not-hex-zz", "a string of hex digits"),
        ("private_key_id", 42, "a string of hex digits"),
        ("client_email", "loader-at-example", "the service account's email"),
        ("client_id", "abc", "numeric client ID"),
        ("token_uri", "http://oauth2.googleapis.com/token", "an https URL"),
        ("token_uri", "oauth2.googleapis.com/token", "an https URL"),
        ("auth_uri", "ftp://accounts.google.com", "an https URL"),
        ("client_x509_cert_url", "", "an https URL"),
        ("universe_domain", "", "a domain name"),
        ("private_key", "", "an RSA private key in PEM form"),
        ("private_key", 123, "an RSA private key in PEM form"),
        ("private_key", "MIIEvAIBADANBgkqhkiG9w0BAQEFAASC", "must be a PEM private key"),
    ],
)
def test_each_malformed_service_account_field(
    rsa_pem: str, field: str, value: Any, expected: str
) -> None:
    message = denial(gcp_secret(service_account_file(rsa_pem, **{field: value})))
    assert f'key "key.json", field "{field}": ' in message
    assert expected in message


def test_truncatedpem(rsa_pem: str) -> None:
    truncated = rsa_pem[: len(rsa_pem) // 2] + "\n-----END PRIVATE KEY-----\n"
    message = denial(gcp_secret(service_account_file(rsa_pem, private_key=truncated)))
    assert 'field "private_key": could not be read as a PEM private key' in message


def test_pem_cut_off_without_end_line(rsa_pem: str) -> None:
    message = denial(gcp_secret(service_account_file(rsa_pem, private_key=rsa_pem[:300])))
    assert 'field "private_key": could not be read as a PEM private key' in message


def test_ec_key_where_rsa_is_expected(rsa_pem: str) -> None:
    ec_pem = pem(ec.generate_private_key(ec.SECP256R1()))
    message = denial(gcp_secret(service_account_file(rsa_pem, private_key=ec_pem)))
    assert 'field "private_key": is an EC key; a Google service-account key must be an RSA' in (
        message
    )


def test_encrypted_key(rsa_pem: str) -> None:
    key = serialization.load_pem_private_key(rsa_pem.encode(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"hunter2"),
    ).decode()
    message = denial(gcp_secret(service_account_file(rsa_pem, private_key=encrypted)))
    assert 'field "private_key": is encrypted with a password' in message


def test_every_problem_in_one_denial(rsa_pem: str) -> None:
    document = service_account_file(
        rsa_pem, client_email="nope", token_uri="http://x", private_key="garbage", client_id=None
    )
    message = denial(gcp_secret(document))
    for field in ("client_email", "token_uri", "private_key", "client_id"):
        assert f'field "{field}"' in message
    assert message.startswith('Secret "creds" is not a valid gcp-credential: ')
    assert message.endswith("Fix these and apply the Secret again.")


def test_valid_external_account_variants() -> None:
    variants = [
        external_account_file(),
        external_account_file(service_account_impersonation_url=None),
        external_account_file(
            credential_source={
                "url": "http://metadata.internal/token",
                "headers": {"Metadata": "True"},
                "format": {"type": "json", "subject_token_field_name": "access_token"},
            }
        ),
        external_account_file(
            subject_token_type="urn:ietf:params:aws:token-type:aws4_request",
            credential_source={
                "environment_id": "aws1",
                "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone",
                "url": "http://169.254.169.254/latest/meta-data/iam/security-credentials",
                "regional_cred_verification_url": "https://sts.{region}.amazonaws.com"
                "?Action=GetCallerIdentity&Version=2011-06-15",
            },
        ),
        external_account_file(
            credential_source={
                "executable": {"command": "/usr/bin/fetch-token --json", "timeout_millis": 5000}
            }
        ),
        external_account_file(
            subject_token_type="urn:ietf:params:oauth:token-type:mtls",
            credential_source={"certificate": {"use_default_certificate_config": True}},
        ),
        external_account_file(service_account_impersonation={"token_lifetime_seconds": 3600}),
    ]
    for document in variants:
        verdict = validate(gcp_secret(document))
        assert verdict.allowed, verdict.message


@pytest.mark.parametrize(
    "field", ["audience", "subject_token_type", "token_url", "credential_source"]
)
def test_external_account_missing_field(field: str) -> None:
    message = denial(gcp_secret(external_account_file(**{field: None})))
    assert f'key "key.json", field "{field}": is missing' in message


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        ({"audience": "projects/1/pools/x"}, "audience", "workload identity provider"),
        (
            {"subject_token_type": "jwt"},
            "subject_token_type",
            "urn:ietf:params:oauth:token-type:jwt",
        ),
        ({"token_url": "http://sts.googleapis.com/v1/token"}, "token_url", "https URL"),
        (
            {"service_account_impersonation_url": "http://iamcredentials.googleapis.com/x"},
            "service_account_impersonation_url",
            "https URL",
        ),
        ({"credential_source": "file"}, "credential_source", "exactly one of"),
        (
            {"credential_source": {"file": "/a", "url": "https://b"}},
            "credential_source",
            "exactly one of",
        ),
        ({"credential_source": {"file": ""}}, "credential_source.file", "path"),
        ({"credential_source": {"url": "file:///etc/token"}}, "credential_source.url", "http(s)"),
        (
            {"credential_source": {"file": "/t", "format": {"type": "xml"}}},
            "credential_source.format",
            '"text" or "json"',
        ),
        (
            {"credential_source": {"file": "/t", "format": {"type": "json"}}},
            "credential_source.format.subject_token_field_name",
            "required",
        ),
        (
            {"credential_source": {"executable": {"command": ""}}},
            "credential_source.executable.command",
            "command",
        ),
        (
            {"credential_source": {"executable": {"command": "x", "timeout_millis": 10}}},
            "credential_source.executable.timeout_millis",
            "5000 to 120000",
        ),
        (
            {"credential_source": {"environment_id": "aws1"}},
            "credential_source.regional_cred_verification_url",
            "required",
        ),
        (
            {
                "credential_source": {
                    "environment_id": "azure",
                    "regional_cred_verification_url": "https://sts.amazonaws.com",
                }
            },
            "credential_source.environment_id",
            '"aws1"',
        ),
        (
            {"credential_source": {"certificate": {}}},
            "credential_source.certificate",
            "exactly one of",
        ),
        (
            {"service_account_impersonation": {"token_lifetime_seconds": 5}},
            "service_account_impersonation",
            "600 to 43200",
        ),
    ],
)
def test_external_account_bad_fields(changes: dict[str, Any], field: str, expected: str) -> None:
    message = denial(gcp_secret(external_account_file(**changes)))
    assert f'field "{field}": ' in message
    assert expected in message


# -- aws-credential ----------------------------------------------------------------------------


def test_valid_aws_secrets() -> None:
    assert validate(aws_secret(AWS_ACCESS_KEY_ID=AWS_KEY_ID, AWS_SECRET_ACCESS_KEY=AWS_SECRET))
    full = aws_secret(
        AWS_ACCESS_KEY_ID="ASIAIOSFODNN7EXAMPLE",
        AWS_SECRET_ACCESS_KEY=AWS_SECRET,
        AWS_SESSION_TOKEN="FwoGZXIvYXdzEBYaDH",
        AWS_REGION="us-gov-west-1",
    )
    assert validate(full).allowed
    on_premises = aws_secret(
        AWS_ACCESS_KEY_ID="minioadmin",
        AWS_SECRET_ACCESS_KEY="minio-secret",
        AWS_REGION="garage",
        AWS_ENDPOINT_URL="http://minio.storage.svc:9000",
    )
    assert validate(on_premises).allowed


@pytest.mark.parametrize("key", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_required_aws_keys(key: str) -> None:
    values = {"AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    del values[key]
    assert f'key "{key}": is required' in denial(aws_secret(**values))


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("AWS_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"),
        ("AWS_ACCESS_KEY", "AWS_ACCESS_KEY_ID"),
        ("aws_session_token", "AWS_SESSION_TOKEN"),
        ("AWS_DEFAULT_REGION", "AWS_REGION"),
        ("AWS_ENDPOINT", "AWS_ENDPOINT_URL"),
    ],
)
def test_unknown_key_suggests_the_closest(typo: str, suggestion: str) -> None:
    message = denial(
        aws_secret(AWS_ACCESS_KEY_ID=AWS_KEY_ID, AWS_SECRET_ACCESS_KEY=AWS_SECRET, **{typo: "x"})
    )
    assert f'key "{typo}": is not an aws-credential key; did you mean {suggestion}?' in message
    assert closest_key(typo) == suggestion


def test_unrelated_key_lists_the_allowed_ones() -> None:
    message = denial(
        aws_secret(AWS_ACCESS_KEY_ID=AWS_KEY_ID, AWS_SECRET_ACCESS_KEY=AWS_SECRET, bucket="x")
    )
    assert 'key "bucket": is not an aws-credential key; allowed keys: AWS_ACCESS_KEY_ID' in message


def test_typo_of_required_key_is_reported_twice_usefully() -> None:
    message = denial(aws_secret(AWS_ACCESS_KEY_ID=AWS_KEY_ID, AWS_SECRET_KEY=AWS_SECRET))
    assert 'key "AWS_SECRET_KEY": is not an aws-credential key; did you mean' in message
    assert 'key "AWS_SECRET_ACCESS_KEY": is required' in message


@pytest.mark.parametrize("key", ["AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AWS_REGION"])
def test_empty_values(key: str) -> None:
    values = {"AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, key: ""}
    assert f'key "{key}": is empty' in denial(aws_secret(**values))


def test_trailing_newline_is_denied() -> None:
    message = denial(
        aws_secret(AWS_ACCESS_KEY_ID=AWS_KEY_ID + "\n", AWS_SECRET_ACCESS_KEY=AWS_SECRET)
    )
    assert 'key "AWS_ACCESS_KEY_ID": has leading or trailing whitespace' in message


def test_binary_aws_value() -> None:
    obj = secret(
        "aws-credential", {"AWS_ACCESS_KEY_ID": b"\xff\xfe", "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    )
    assert 'key "AWS_ACCESS_KEY_ID": must be text' in denial(obj)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"AWS_ACCESS_KEY_ID": "AKIA123"}, 'key "AWS_ACCESS_KEY_ID": must be AKIA or ASIA'),
        ({"AWS_ACCESS_KEY_ID": "akiaiosfodnn7example"}, 'key "AWS_ACCESS_KEY_ID": must be AKIA'),
        ({"AWS_ACCESS_KEY_ID": "ABIAIOSFODNN7EXAMPLE"}, 'key "AWS_ACCESS_KEY_ID": must be AKIA'),
        ({"AWS_SECRET_ACCESS_KEY": "short"}, 'key "AWS_SECRET_ACCESS_KEY": must be 40 characters'),
        (
            {"AWS_SECRET_ACCESS_KEY": AWS_SECRET[:-1] + "!"},
            'key "AWS_SECRET_ACCESS_KEY": must be 40 characters',
        ),
        ({"AWS_ACCESS_KEY_ID": "ASIAIOSFODNN7EXAMPLE"}, 'key "AWS_SESSION_TOKEN": is required'),
        ({"AWS_REGION": "us-east"}, 'key "AWS_REGION": must be an AWS region, like us-east-1'),
        ({"AWS_REGION": "US-EAST-1"}, 'key "AWS_REGION": must be an AWS region'),
        ({"AWS_ENDPOINT_URL": "minio:9000"}, 'key "AWS_ENDPOINT_URL": must be an http(s) URL'),
        ({"AWS_ENDPOINT_URL": "s3://bucket"}, 'key "AWS_ENDPOINT_URL": must be an http(s) URL'),
    ],
)
def test_aws_formats(values: dict[str, str], expected: str) -> None:
    base = {"AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET}
    assert expected in denial(aws_secret(**(base | values)))


def test_formats_are_relaxed_with_an_endpoint() -> None:
    obj = aws_secret(
        AWS_ACCESS_KEY_ID="ASIA-not-aws",
        AWS_SECRET_ACCESS_KEY="s",
        AWS_REGION="on-prem",
        AWS_ENDPOINT_URL="https://ceph.example:7480",
    )
    assert validate(obj).allowed


def test_all_aws_problems_in_one_denial() -> None:
    message = denial(aws_secret(AWS_ACCESS_KEY_ID="AKIA1", AWS_REGION="", AWS_SECRET_KEY="x"))
    for expected in (
        'key "AWS_SECRET_KEY"',
        'key "AWS_SECRET_ACCESS_KEY": is required',
        'key "AWS_REGION": is empty',
        'key "AWS_ACCESS_KEY_ID": must be AKIA',
    ):
        assert expected in message


# -- size ---------------------------------------------------------------------------------------


def test_size_bound() -> None:
    config = Config.model_validate({"credentials": {"max_secret_bytes": 2048}})
    big = aws_secret(
        AWS_ACCESS_KEY_ID=AWS_KEY_ID,
        AWS_SECRET_ACCESS_KEY=AWS_SECRET,
        AWS_SESSION_TOKEN="T" * 4096,
    )
    verdict = validate(big, config)
    assert not verdict.allowed
    assert "too large" in verdict.message and "2048 bytes" in verdict.message
    assert validate(big).allowed  # the default bound (64 KiB) leaves room for session tokens


def test_size_bound_counts_string_data() -> None:
    config = Config.model_validate({"credentials": {"max_secret_bytes": 2048}})
    obj = secret("gcp-credential", string_data={"key.json": "x" * 4096})
    assert "too large" in validate(obj, config).message


# -- the RSA check cache ------------------------------------------------------------------------


def test_key_checker_caches_by_content_and_is_bounded(rsa_pem: str) -> None:
    checker = RsaKeyChecker(maxsize=2)
    ec_pem = pem(ec.generate_private_key(ec.SECP256R1()))
    assert checker(rsa_pem.encode()) is None
    assert checker(rsa_pem.encode()) is None
    assert len(checker) == 1
    assert checker(ec_pem.encode()) is not None
    assert checker(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert len(checker) == 2
    assert checker(ec_pem.encode()) is not None  # still right after eviction of the first


def test_key_checker_without_cache(rsa_pem: str) -> None:
    checker = RsaKeyChecker(maxsize=0)
    assert checker(rsa_pem.encode()) is None
    assert len(checker) == 0
