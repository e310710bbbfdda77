"""Loader Jobs for Azure Blob, web and Hub sources: credentials by reference only, the tokens
keyless Azure needs, the Hub's endpoint and files, a web file's digest, and a private CA."""

from __future__ import annotations

from typing import Any

from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
from gpu_admission.config.model import Config
from gpu_admission.datasets.source import parse_data_source


def job(source: str, secret: str | None = None, config: Config | None = None, **kw: Any) -> dict:
    inputs = LoaderJobInputs(
        "dl-x-0123456789", "ml", "x", "uid-1", parse_data_source(source), secret=secret, **kw
    )
    return build_loader_job(inputs, config or Config())


def container(body: dict) -> dict:
    (loader,) = body["spec"]["template"]["spec"]["containers"]
    return loader


def env(body: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(body)["env"]}


def test_az_job_takes_every_way_in_by_optional_reference_and_the_identity_token() -> None:
    body = job("az://models/llama", "blob")
    values = env(body)
    assert values["RCLONE_CONFIG_SRC_TYPE"] == "azureblob"
    for name, key in (
        ("RCLONE_CONFIG_SRC_ACCOUNT", "AZURE_STORAGE_ACCOUNT"),
        ("RCLONE_CONFIG_SRC_KEY", "AZURE_STORAGE_KEY"),
        ("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_TOKEN"),
        ("AZURE_CLIENT_ID", "AZURE_CLIENT_ID"),
        ("AZURE_TENANT_ID", "AZURE_TENANT_ID"),
    ):
        assert values[name] == {"secretKeyRef": {"name": "blob", "key": key, "optional": True}}
    token_file = "/var/run/secrets/azure/tokens/azure-identity-token"
    assert values["AZURE_FEDERATED_TOKEN_FILE"] == token_file
    spec = body["spec"]["template"]["spec"]
    token = next(v for v in spec["volumes"] if "projected" in v)
    (source,) = token["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "api://AzureADTokenExchange"
    assert source["serviceAccountToken"]["path"] == "azure-identity-token"
    assert spec["automountServiceAccountToken"] is False  # the token is for Azure alone
    mount = next(m for m in container(body)["volumeMounts"] if m["name"] == token["name"])
    assert mount["mountPath"] == "/var/run/secrets/azure/tokens" and mount["readOnly"]


def test_web_job_has_no_credentials_and_trusts_the_configured_ca() -> None:
    config = Config.model_validate({"dataset": {"trusted_ca_config_map": "trust"}})
    digest = "AB" * 32
    body = job("https://h.example/m/w.bin", config=config, sha256=digest)
    values = env(body)
    assert values["RCLONE_CONFIG_SRC_TYPE"] == "http"
    referenced = [v for v in values.values() if isinstance(v, dict)]
    assert not any("secretKeyRef" in v for v in referenced)  # no Secret referenced
    assert values["SSL_CERT_FILE"] == "/etc/gpu-admission/trusted-ca/ca.crt"
    command = container(body)["command"]
    assert command[command.index("--sha256") + 1] == digest.lower()
    assert "--sha256" not in container(job("https://h.example/m/", sha256=digest))["command"]


def test_hub_job_gets_the_token_by_reference_the_endpoint_and_the_patterns() -> None:
    config = Config.model_validate({"dataset": {"huggingface_endpoint": "https://hub.corp/"}})
    body = job("hf://acme/tiny@v1", "hub", config, include="*.json", shards=2)
    values = env(body)
    assert values["HF_TOKEN"] == {
        "secretKeyRef": {"name": "hub", "key": "HF_TOKEN", "optional": True}
    }
    assert values["HF_ENDPOINT"] == "https://hub.corp"
    assert values["HF_HOME"].startswith("/var/cache/loader/")  # the writable scratch volume
    assert "RCLONE_CONFIG_SRC_TYPE" not in values
    command = container(body)["command"]
    assert command[command.index("--include") + 1] == "*.json"
    assert command[command.index("--shard-count") + 1] == "2"
    assert "HF_TOKEN" not in env(job("hf://acme/tiny"))  # a public repository: no token
