"""azure-credential Secrets: the three ways in (key, SAS token, keyless), each rule's message,
and no value ever echoed; and what a pod that asks for one gets injected."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from gpu_admission.cluster.view import SecretInfo, ServiceAccountInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policies.test_credential_secrets import denial, secret, validate
from tests.webhooks.policy_helpers import make_request
from webhooks.core.patch import Patch
from webhooks.policies.credential_injection import policies as injection_policies

ACCOUNT = "mlmodels01"
KEY = base64.b64encode(b"k" * 64).decode()  # an account key is 64 random bytes, base64
SAS = "sv=2024-11-04&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&sig=c2VjcmV0c2lnbmF0dXJl%3D"
CLIENT = "8d2e7c1a-5b3f-4c9e-a1d2-3e4f5a6b7c8d"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def azure_secret(**values: str) -> dict[str, Any]:
    return secret("azure-credential", dict(values))


@pytest.mark.parametrize(
    "values",
    [
        {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY},
        {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": SAS},
        {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": "?" + SAS},
        {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_CLIENT_ID": CLIENT, "AZURE_TENANT_ID": TENANT},
        {
            "AZURE_STORAGE_ACCOUNT": ACCOUNT,
            "AZURE_CLIENT_ID": CLIENT,
            "AZURE_TENANT_ID": "contoso.onmicrosoft.com",
        },
    ],
)
def test_each_way_in_is_admitted(values: dict[str, str]) -> None:
    assert validate(azure_secret(**values)).allowed


@pytest.mark.parametrize(
    ("values", "fragments"),
    [
        ({"AZURE_STORAGE_KEY": KEY}, ['key "AZURE_STORAGE_ACCOUNT": is required']),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT},
            ["holds no way in; add AZURE_STORAGE_KEY", "AZURE_CLIENT_ID with AZURE_TENANT_ID"],
        ),
        (
            {
                "AZURE_STORAGE_ACCOUNT": ACCOUNT,
                "AZURE_STORAGE_KEY": KEY,
                "AZURE_STORAGE_SAS_TOKEN": SAS,
            },
            ["more than one way in (AZURE_STORAGE_KEY and AZURE_STORAGE_SAS_TOKEN)"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY, "AZURE_CLIENT_ID": CLIENT},
            ["more than one way in", "keep exactly one"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_CLIENT_ID": CLIENT},
            ['key "AZURE_TENANT_ID": is required: keyless access names both'],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": "ML_Models", "AZURE_STORAGE_KEY": KEY},
            ["3 to 24 lowercase letters and digits"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": "https://ml.blob.core.windows.net", "AZURE_STORAGE_KEY": KEY},
            ["not its URL"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": "not base64 at all!"},
            ['key "AZURE_STORAGE_KEY": must be base64'],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": "sv=2024-11-04&sp=rl"},
            ["no sig= field"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": "sig=abc"},
            ["no sv= field"],
        ),
        (
            {
                "AZURE_STORAGE_ACCOUNT": ACCOUNT,
                "AZURE_STORAGE_SAS_TOKEN": f"https://{ACCOUNT}.blob.core.windows.net/c?{SAS}",
            },
            ["the SAS token alone", "not the whole URL"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": TENANT},
            ['key "AZURE_CLIENT_ID": must be', "a GUID"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_CLIENT_ID": CLIENT, "AZURE_TENANT_ID": "x y"},
            ['key "AZURE_TENANT_ID"', "contoso.onmicrosoft.com"],
        ),
        (
            {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY + "\n"},
            ["leading or trailing whitespace"],
        ),
        (
            {
                "AZURE_STORAGE_ACCOUNT": ACCOUNT,
                "AZURE_STORAGE_KEY": KEY,
                "AZURE_STORAGE_ACCESS_KEY": "x",
            },
            ['"AZURE_STORAGE_ACCESS_KEY": is not an azure-credential key; did you mean'],
        ),
    ],
)
def test_each_problem_says_what_to_fix(values: dict[str, str], fragments: list[str]) -> None:
    message = denial(azure_secret(**values))
    assert message.startswith('Secret "creds" is not a valid azure-credential: ')
    for fragment in fragments:
        assert fragment in message
    for value in values.values():  # never the value (account names are not secret, but checked)
        if len(value) > 8 and value not in ("AZURE_STORAGE_KEY",):
            assert value not in message


def test_no_secret_value_is_echoed_in_any_denial() -> None:
    marker = "hunter2SECRETxyz"
    bad = {
        "AZURE_STORAGE_ACCOUNT": marker,
        "AZURE_STORAGE_KEY": marker + "!",
        "AZURE_STORAGE_SAS_TOKEN": f"sv=1&x={marker}",
        "AZURE_CLIENT_ID": marker,
        "AZURE_TENANT_ID": marker + " x",
    }
    message = denial(azure_secret(**bad))
    assert marker not in message


# -- injection into pods ----------------------------------------------------------------------


def _pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "trainer:1"}]},
    }


def _inject(keys: set[str], pod: dict[str, Any] | None = None) -> Patch:
    view = StaticClusterView(
        secrets=[SecretInfo("ml", "blob", "azure-credential", frozenset(keys))],
        service_accounts=[ServiceAccountInfo("ml", "default")],
    )
    (policy,) = injection_policies(Config())
    request = make_request(pod or _pod({"gpu-admission.io/cloud-credentials": "blob"}))
    patch = Patch(request.object)
    assert policy.mutate(request, patch, view) is None
    return patch


def _env(patch: Patch) -> dict[str, Any]:
    return {e["name"]: e for e in patch.obj["spec"]["containers"][0].get("env", [])}


def test_a_key_secret_gives_each_key_by_reference() -> None:
    patch = _inject({"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"})
    env = _env(patch)
    assert set(env) == {"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"}
    assert env["AZURE_STORAGE_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "blob",
        "key": "AZURE_STORAGE_KEY",
    }
    assert "volumes" not in patch.obj["spec"]


def test_a_keyless_secret_gets_the_workload_identity_token() -> None:
    patch = _inject({"AZURE_STORAGE_ACCOUNT", "AZURE_CLIENT_ID", "AZURE_TENANT_ID"})
    env = _env(patch)
    token_file = "/var/run/secrets/azure/tokens/azure-identity-token"
    assert env["AZURE_FEDERATED_TOKEN_FILE"] == {
        "name": "AZURE_FEDERATED_TOKEN_FILE",
        "value": token_file,
    }
    assert {"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_STORAGE_ACCOUNT"} <= set(env)
    (volume,) = patch.obj["spec"]["volumes"]
    assert volume["name"] == "azure-identity-token"
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "api://AzureADTokenExchange"
    assert source["serviceAccountToken"]["path"] == "azure-identity-token"
    mount = patch.obj["spec"]["containers"][0]["volumeMounts"][0]
    assert mount == {
        "name": "azure-identity-token",
        "mountPath": "/var/run/secrets/azure/tokens",
        "readOnly": True,
    }


def test_a_pod_azure_webhook_already_changed_keeps_its_token_volume() -> None:
    pod = _pod({"gpu-admission.io/cloud-credentials": "blob"})
    theirs = {
        "name": "azure-identity-token",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": "api://AzureADTokenExchange",
                        "expirationSeconds": 3600,
                        "path": "azure-identity-token",
                    }
                }
            ],
            "defaultMode": 420,
        },
    }
    pod["spec"]["volumes"] = [theirs]
    patch = _inject({"AZURE_STORAGE_ACCOUNT", "AZURE_CLIENT_ID", "AZURE_TENANT_ID"}, pod)
    assert patch.obj["spec"]["volumes"] == [theirs]
    assert "AZURE_FEDERATED_TOKEN_FILE" in _env(patch)
    assert not patch.warnings


def test_another_volume_of_that_name_is_never_overwritten() -> None:
    pod = _pod({"gpu-admission.io/cloud-credentials": "blob"})
    pod["spec"]["volumes"] = [{"name": "azure-identity-token", "emptyDir": {}}]
    patch = _inject({"AZURE_STORAGE_ACCOUNT", "AZURE_CLIENT_ID", "AZURE_TENANT_ID"}, pod)
    assert patch.obj["spec"]["volumes"] == [{"name": "azure-identity-token", "emptyDir": {}}]
    assert "no token was added" in " ".join(patch.warnings)
    assert "AZURE_CLIENT_ID" not in _env(patch)
