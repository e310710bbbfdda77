"""huggingface-credential Secrets: HF_TOKEN's shape, never echoed; and pods get it by reference."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.cluster.view import SecretInfo, ServiceAccountInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policies.test_credential_secrets import denial, secret, validate
from tests.webhooks.policy_helpers import make_request
from webhooks.core.patch import Patch
from webhooks.policies.credential_injection import policies as injection_policies

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"[:34]


def hf_secret(**values: str) -> dict[str, Any]:
    return secret("huggingface-credential", dict(values))


@pytest.mark.parametrize("token", [TOKEN, "api_" + "x" * 30])
def test_a_token_is_admitted(token: str) -> None:
    assert validate(hf_secret(HF_TOKEN=token)).allowed


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({}, 'key "HF_TOKEN": is required'),
        ({"HF_TOKEN": "my-password-123"}, "must be a Hugging Face access token: hf_ followed"),
        ({"HF_TOKEN": "hf_short"}, "must be a Hugging Face access token"),
        ({"HF_TOKEN": TOKEN + "\n"}, "leading or trailing whitespace"),
        ({"HF_TOKEN": TOKEN, "HUGGING_FACE_HUB_TOKEN": TOKEN}, "the only key is HF_TOKEN"),
    ],
)
def test_each_problem_says_what_to_fix_without_the_token(
    values: dict[str, str], fragment: str
) -> None:
    message = denial(hf_secret(**values))
    assert message.startswith('Secret "creds" is not a valid huggingface-credential: ')
    assert fragment in message
    for value in values.values():
        assert value.strip() not in message


def test_pods_that_ask_get_hf_token_by_reference() -> None:
    view = StaticClusterView(
        secrets=[SecretInfo("ml", "hub", "huggingface-credential", frozenset({"HF_TOKEN"}))],
        service_accounts=[ServiceAccountInfo("ml", "default")],
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "serve",
            "namespace": "ml",
            "annotations": {"gpu-admission.io/cloud-credentials": "hub"},
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]},
    }
    (policy,) = injection_policies(Config())
    request = make_request(pod)
    patch = Patch(request.object)
    assert policy.mutate(request, patch, view) is None
    assert patch.obj["spec"]["containers"][0]["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub", "key": "HF_TOKEN"}}}
    ]
