"""No secret value ever leaves the service: not in a response, a warning or a log line.

Distinctive values are fed through every validation rule, valid ones included, over the real
HTTPS service; everything produced (response bodies, and every log record at DEBUG with its extra
fields) is scanned for each value, raw and base64-encoded.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from gpu_admission.config.model import Config
from tests.support.keys import pem
from tests.webhooks.server_helpers import (
    MutableView,
    client_context,
    issue_localhost_bundle,
    post_review,
    server_context,
    serving,
)
from webhooks.policies.credential_secrets import policies
from webhooks.policies.interface import PolicySet
from webhooks.service.server import create_app

PRIVATE_KEY_ID = "cafebabe0123456789cafebabe0123456789abcd"
CLIENT_EMAIL = "canary-sa@canary-proj-7731.iam.gserviceaccount.com"
CLIENT_ID = "998877665544332211009"
PROJECT = "canary-proj-7731"
KEY_ID = "AKIACANARY7731XQZW9K"
TEMP_KEY_ID = "ASIACANARY7731XQZW9K"
SECRET_KEY = "Canary7731SecretKeyValueXQZW9K/+abcdefgh"
SESSION_TOKEN = "CanarySessionToken7731XQZW9K"
REGION = "eu-canary-7"
ENDPOINT = "https://canary-endpoint-7731.example:9000"
AUDIENCE = "//iam.googleapis.com/projects/77317731/locations/global/workloadIdentityPools/canary"
TOKEN_FILE = "/var/run/secrets/canary-token-7731/token"


def _service_account(rsa_pem: str, **changes: Any) -> dict[str, Any]:
    return {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": PRIVATE_KEY_ID,
        "private_key": rsa_pem,
        "client_email": CLIENT_EMAIL,
        "client_id": CLIENT_ID,
        "token_uri": "https://oauth2.googleapis.com/token",
    } | changes


def _secret(secret_type: str, values: dict[str, str], name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ml"},
        "type": secret_type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }


def _cases(rsa_pem: str) -> Iterator[tuple[dict[str, Any], bool]]:
    """(Secret, expected allowed) covering each rule with distinctive values."""
    ec_pem = pem(ec.generate_private_key(ec.SECP256R1()))

    def gcp(document: Any, name: str) -> dict[str, Any]:
        text = document if isinstance(document, str) else json.dumps(document)
        return _secret("gcp-credential", {"key.json": text}, name)

    yield gcp(_service_account(rsa_pem), "gcp-valid"), True
    yield gcp(_service_account(rsa_pem, private_key=ec_pem), "gcp-ec"), False
    yield gcp(_service_account(rsa_pem, private_key=rsa_pem[:400]), "gcp-truncated"), False
    yield gcp(_service_account(rsa_pem, private_key="CanaryNotPem7731"), "gcp-not-pem"), False
    yield gcp(_service_account(rsa_pem, client_email="canary-not-an-email"), "gcp-email"), False
    yield gcp(_service_account(rsa_pem, token_uri="http://canary-7731.example"), "gcp-uri"), False
    yield gcp(_service_account(rsa_pem, type="canary-type-7731"), "gcp-type"), False
    yield gcp(_service_account(rsa_pem, project_id="Canary Project 7731"), "gcp-proj"), False
    yield gcp('{"type": "service_account", "canary-7731": ', "gcp-json"), False
    yield gcp('["canary-7731"]', "gcp-array"), False
    external = {
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": "https://sts.googleapis.com/v1/token",
        "credential_source": {"file": TOKEN_FILE},
    }
    yield gcp(external, "ext-valid"), True
    yield gcp(external | {"token_url": "http://canary-sts-7731.example"}, "ext-url"), False
    yield gcp(external | {"subject_token_type": "canary-token-type-7731"}, "ext-stt"), False
    yield gcp(external | {"audience": "canary-audience-7731"}, "ext-aud"), False
    yield (
        gcp(
            external | {"credential_source": {"executable": {"command": "canary-cmd-7731 --x"}}},
            "ext-exec",
        ),
        True,
    )
    aws = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    yield _secret("aws-credential", aws | {"AWS_REGION": REGION}, "aws-valid"), True
    yield _secret("aws-credential", aws | {"AWS_SECRET_KEY": SECRET_KEY}, "aws-typo"), False
    yield _secret("aws-credential", aws | {"AWS_ACCESS_KEY_ID": TEMP_KEY_ID}, "aws-asia"), False
    yield (
        _secret(
            "aws-credential",
            aws | {"AWS_ACCESS_KEY_ID": TEMP_KEY_ID, "AWS_SESSION_TOKEN": SESSION_TOKEN},
            "aws-temp",
        ),
        True,
    )
    yield (
        _secret("aws-credential", aws | {"AWS_ACCESS_KEY_ID": "AKIA-canary-7731"}, "aws-id"),
        False,
    )
    yield _secret("aws-credential", aws | {"AWS_SECRET_ACCESS_KEY": "Canary7731"}, "aws-sk"), False
    yield _secret("aws-credential", aws | {"AWS_REGION": "canary-region"}, "aws-reg"), False
    yield _secret("aws-credential", aws | {"AWS_ENDPOINT_URL": "canary-7731:9000"}, "aws-ep"), False
    yield (
        _secret(
            "aws-credential",
            {
                "AWS_ACCESS_KEY_ID": "canary-minio-user",
                "AWS_SECRET_ACCESS_KEY": "canary-minio-pass",
                "AWS_ENDPOINT_URL": ENDPOINT,
            },
            "aws-onprem",
        ),
        True,
    )
    yield _secret("aws-credential", aws | {"AWS_SESSION_TOKEN": SESSION_TOKEN + "\n"}, "ws"), False


def _values(obj: dict[str, Any]) -> set[str]:
    """Every value in the Secret, raw and base64, and each string inside a JSON key file, plus
    each line of a PEM body (a fragment of a key is a leak too)."""
    found: set[str] = set()
    for encoded in obj["data"].values():
        found.add(encoded)
        text = base64.b64decode(encoded).decode()
        found.add(text.strip())
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            continue
        stack = [document]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str):
                found.add(item)
                found.update(line for line in item.splitlines() if "-----" not in line)
    # Values the messages legitimately name (field names, fixed type URNs, Google's well-known
    # URLs) are not secrets and not distinctive: only check values long enough to be specific.
    public = {
        "service_account",
        "external_account",
        "urn:ietf:params:oauth:token-type:jwt",
        "https://oauth2.googleapis.com/token",
        "https://sts.googleapis.com/v1/token",
    }
    return {v for v in found if len(v) >= 8 and v not in public}


def _review(obj: dict[str, Any], uid: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Secret"},
                "resource": {"group": "", "version": "v1", "resource": "secrets"},
                "name": obj["metadata"]["name"],
                "namespace": "ml",
                "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "object": obj,
                "oldObject": None,
            },
        }
    ).encode()


async def test_no_secret_value_in_responses_or_logs(
    rsa_pem: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = Config()
    app = create_app(
        config, PolicySet(validating=tuple(policies(config))), MutableView(), None, list
    )
    bundle = issue_localhost_bundle()
    cases = list(_cases(rsa_pem))
    produced: list[str] = []
    secrets: set[str] = set()
    async with (
        serving(app, server_context(bundle)) as running,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_context(bundle))
        ) as session,
    ):
        url = running.url.replace("127.0.0.1", "localhost") + "/validate/secrets"
        for index, (obj, allowed) in enumerate(cases):
            status, payload = await post_review(session, url, _review(obj, f"uid-{index}"))
            assert status == 200
            name = obj["metadata"]["name"]
            assert payload["response"]["allowed"] is allowed, (name, payload)
            produced.append(json.dumps(payload))
            secrets |= _values(obj)
    for record in caplog.records:
        produced.append(record.getMessage())
        produced.append(repr(record.__dict__))
    denials = [text for text in produced if '"allowed": false' in text]
    assert len(denials) == sum(not allowed for _, allowed in cases)
    everything = "\n".join(produced)
    leaked = sorted(value for value in secrets if value in everything)
    assert not leaked, f"secret values found in output: {leaked}"
