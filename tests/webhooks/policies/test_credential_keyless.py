"""Keyless AWS credentials: an aws-credential Secret that names a role instead of holding keys,
validated as such, and injected as a projected ServiceAccount token plus the env every AWS SDK
reads for web identity."""

from __future__ import annotations

import base64
import re

import pytest

from gpu_admission.cluster.view import SecretInfo, secret_info
from gpu_admission.config.model import Config
from gpu_admission.keyless import TokenRequest, gcp_token_request, path_problem
from tests.commands.test_review import run
from tests.webhooks.policies.test_credential_injection import (
    CREDS,
    NS,
    env_of,
    mounts_of,
    pod,
    secret_ref,
    view,
)
from tests.webhooks.policies.test_credential_secrets import aws_secret, denial, gcp_secret, validate
from tests.webhooks.policy_helpers import mutate_twice
from webhooks.credentials.aws import is_keyless
from webhooks.policies.credential_injection import policies

ROLE = "arn:aws:iam::123456789012:role/dataset-reader"
TOKEN_DIR = "/var/run/secrets/sts.amazonaws.com/serviceaccount"
KEYS = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})


def keyless(name: str = "s3-role", *extra: str) -> SecretInfo:
    return SecretInfo(NS, name, "aws-credential", frozenset({"AWS_ROLE_ARN", *extra}))


def test_the_keyless_form_is_valid_alone_or_with_region_endpoint_and_session_name() -> None:
    assert validate(aws_secret(AWS_ROLE_ARN=ROLE)).allowed
    assert validate(
        aws_secret(AWS_ROLE_ARN=ROLE, AWS_REGION="eu-west-1", AWS_ROLE_SESSION_NAME="loader")
    ).allowed
    # An S3-compatible store (MinIO's STS) has its own ARN formats.
    assert validate(
        aws_secret(AWS_ROLE_ARN="arn:minio:iam:::role/x", AWS_ENDPOINT_URL="https://minio:9000")
    ).allowed


KEYLESS_HINT = "or, for keyless access with the pod's ServiceAccount token, give AWS_ROLE_ARN"
CASES = [
    (
        {"AWS_ROLE_ARN": ROLE, "AWS_ACCESS_KEY_ID": "AKIAABCDEFGHIJKLMNOP"},
        "belongs to the keyless form, but the Secret also holds access keys "
        "(AWS_ACCESS_KEY_ID); keep one form",
    ),
    ({"AWS_ROLE_SESSION_NAME": "x1"}, "AWS_ROLE_ARN: is required with AWS_ROLE_SESSION_NAME"),
    (
        {"AWS_ROLE_ARN": "bogus-role-value"},
        "must be an IAM role ARN, like arn:aws:iam::123456789012:role/",
    ),
    ({"AWS_ROLE_ARN": ROLE, "AWS_ROLE_SESSION_NAME": "a b"}, "2 to 64 characters"),
    ({"AWS_REGION": "us-east-1"}, KEYLESS_HINT),
]


@pytest.mark.parametrize(("values", "words"), CASES)
def test_what_is_wrong_with_a_form_is_said(values: dict[str, str], words: str) -> None:
    message = denial(aws_secret(**values))
    assert words.replace('"', "") in message.replace('"', "")
    assert "bogus-role-value" not in message and "AKIAABCDEFGHIJKLMNOP" not in message


def test_is_keyless() -> None:
    assert is_keyless({"AWS_ROLE_ARN", "AWS_REGION"})
    assert not is_keyless({"AWS_ROLE_ARN", "AWS_ACCESS_KEY_ID"})
    assert not is_keyless({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})


def test_a_pod_gets_the_token_volume_and_the_web_identity_env() -> None:
    obj = pod(
        {CREDS: "s3-role"}, containers=[{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]
    )
    _ops, warnings, verdict, patched = mutate_twice(
        policies(Config()), obj, view(keyless("s3-role", "AWS_REGION"))
    )
    assert verdict is None and warnings == []
    [volume] = patched["spec"]["volumes"]
    assert volume == {
        "name": "aws-web-identity-token",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": "sts.amazonaws.com",
                        "expirationSeconds": 86400,
                        "path": "token",
                    }
                }
            ]
        },
    }
    for container in patched["spec"]["containers"]:
        assert mounts_of(container) == {TOKEN_DIR: "aws-web-identity-token"}
        assert env_of(container) == {
            "AWS_ROLE_ARN": secret_ref("s3-role", "AWS_ROLE_ARN"),
            "AWS_REGION": secret_ref("s3-role", "AWS_REGION"),
            "AWS_DEFAULT_REGION": secret_ref("s3-role", "AWS_REGION"),
            "AWS_WEB_IDENTITY_TOKEN_FILE": f"{TOKEN_DIR}/token",
        }
        assert [m["readOnly"] for m in container["volumeMounts"]] == [True]


def test_the_audience_and_lifetime_come_from_the_config() -> None:
    config = Config.model_validate(
        {"credentials": {"aws_token_audience": "minio", "token_expiration_seconds": 3600}}
    )
    _, _, _, patched = mutate_twice(policies(config), pod({CREDS: "s3-role"}), view(keyless()))
    token = patched["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    assert (token["audience"], token["expirationSeconds"]) == ("minio", 3600)


def test_a_key_secret_gets_no_token() -> None:
    keys = SecretInfo(
        NS, "s3", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
    )
    _, _, _, patched = mutate_twice(policies(Config()), pod({CREDS: "s3"}), view(keys))
    assert "volumes" not in patched["spec"]
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" not in env_of(patched["spec"]["containers"][0])


def test_a_volume_or_mount_in_the_way_is_reported_not_overwritten() -> None:
    taken = [{"name": "aws-web-identity-token", "emptyDir": {}}]
    _, warnings, _, patched = mutate_twice(
        policies(Config()), pod({CREDS: "s3-role"}, volumes=taken), view(keyless())
    )
    assert patched["spec"]["volumes"] == taken
    assert "already has a volume named aws-web-identity-token" in warnings[0]
    mine = [{"name": "main", "image": "i", "volumeMounts": [{"name": "x", "mountPath": TOKEN_DIR}]}]
    _, warnings, _, _ = mutate_twice(
        policies(Config()),
        pod({CREDS: "s3-role"}, containers=mine, volumes=[{"name": "x", "emptyDir": {}}]),
        view(keyless()),
    )
    assert f"already mounts another volume at {TOKEN_DIR}" in warnings[0]


def test_two_aws_secrets_one_keyless_are_refused_naming_both() -> None:
    keys = SecretInfo(
        NS, "s3", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
    )
    _, _, verdict, _ = mutate_twice(
        policies(Config()), pod({CREDS: "s3, s3-role"}), view(keys, keyless())
    )
    assert verdict is not None and not verdict.allowed
    assert '"s3"' in verdict.message and '"s3-role"' in verdict.message
    assert "both" not in verdict.message or "AWS_" in verdict.message


# -- keyless Google (workload identity federation) -------------------------------------------

PROVIDER = (
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/k8s/providers/ml"
)
TOKEN_PATH = "/var/run/secrets/tokens/gcp-ksa/token"
KUBE = "/var/run/secrets/kubernetes.io"
STS = "/var/run/secrets/sts.amazonaws.com"


def external_account(path: str = TOKEN_PATH) -> dict:
    return {
        "type": "external_account",
        "audience": PROVIDER,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": "https://sts.googleapis.com/v1/token",
        "credential_source": {"file": path, "format": {"type": "text"}},
    }


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (TOKEN_PATH, None),
        ("/var/run/secrets/gcp-ksa/token", None),
        ("/tmp/token", "must be a file in a directory of its own under /var/run/secrets/"),
        ("/var/run/secrets/token", "must be a file in a directory of its own"),
        ("/var/run/secrets/tokens/../x/token", "must be a file in a directory of its own"),
        ("/var/run/secrets/kubernetes.io/serviceaccount/token", "must not be under " + KUBE),
        ("/var/run/secrets/gcp/reader/token", "must not be under /var/run/secrets/gcp"),
        ("/var/run/secrets/sts.amazonaws.com/serviceaccount/x", "must not be under " + STS),
    ],
)  # fmt: skip
def test_token_paths_the_injector_can_serve(path: str, problem: str | None) -> None:
    found = path_problem(path)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_the_token_audience_is_the_provider_as_an_https_url() -> None:
    request = gcp_token_request(external_account())
    assert request is not None
    assert request.audience == "https:" + PROVIDER
    assert (request.directory, request.file) == ("/var/run/secrets/tokens/gcp-ksa", "token")
    assert gcp_token_request({"type": "service_account"}) is None


def test_a_file_naming_a_path_the_injector_cannot_serve_is_refused_saying_which_it_can() -> None:
    message = denial(gcp_secret(external_account("/etc/token")))
    assert "credential_source.file" in message
    assert "like /var/run/secrets/tokens/gcp-workload-identity/token" in message


def test_the_view_keeps_only_the_token_path_and_audience_of_a_keyless_file() -> None:
    secret = gcp_secret(external_account())
    info = secret_info({**secret, "metadata": {"name": "gcs-wif", "namespace": NS}})
    assert info.token == TokenRequest(TOKEN_PATH, "https:" + PROVIDER)


def test_a_pod_gets_the_subject_token_where_the_file_reads_it() -> None:
    info = SecretInfo(
        NS, "gcs-wif", "gcp-credential", frozenset({"key.json"}),
        TokenRequest(TOKEN_PATH, "https:" + PROVIDER),
    )  # fmt: skip
    _, warnings, verdict, patched = mutate_twice(
        policies(Config()), pod({CREDS: "gcs-wif"}), view(info)
    )
    assert verdict is None and warnings == []
    volumes = {v["name"]: v for v in patched["spec"]["volumes"]}
    token_volume = volumes["gcp-token-gcs-wif"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token_volume == {
        "audience": "https:" + PROVIDER,
        "expirationSeconds": 86400,
        "path": "token",
    }
    [container] = patched["spec"]["containers"]
    assert mounts_of(container) == {
        "/var/run/secrets/gcp/gcs-wif": "gcp-gcs-wif",
        "/var/run/secrets/tokens/gcp-ksa": "gcp-token-gcs-wif",
    }
    assert (
        env_of(container)["GOOGLE_APPLICATION_CREDENTIALS"]
        == "/var/run/secrets/gcp/gcs-wif/key.json"
    )


def test_review_shows_what_keyless_pods_get_and_never_a_token(tmp_path) -> None:
    """The offline review renders the token volumes; no token exists to show, and none does."""
    state = tmp_path / "state.yaml"
    state.write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s3-role, namespace: ml}\n"
        "type: aws-credential\ndata: {AWS_ROLE_ARN: "
        + base64.b64encode(ROLE.encode()).decode()
        + "}\n"
    )
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: trainer\n  namespace: ml\n"
        "  annotations: {gpu-admission.io/cloud-credentials: s3-role}\n"
        "spec:\n  containers: [{name: main, image: python}]\n"
    )
    code, out, err = run(
        ["review", "-f", str(manifest), "--cluster-state", str(state), "-o", "yaml"]
    )
    assert code == 0, err
    assert "aws-web-identity-token" in out and "AWS_WEB_IDENTITY_TOKEN_FILE" in out
    assert not re.search(r"eyJ[A-Za-z0-9_-]{10,}\.", out + err)
