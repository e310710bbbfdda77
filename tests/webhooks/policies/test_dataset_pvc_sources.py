"""Dataset PVC admission for Azure Blob and web sources: the Secret type az:// needs, web sources
taking no credentials, plain http only where configured, and data-sha256's shape and scope."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_admission.cluster.view import SecretInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policies.test_dataset_pvc import fixture_request, with_annotations
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.dataset_pvc import policies
from webhooks.policies.interface import ValidatingPolicy

AZURE = SecretInfo("ml", "blob-reader", "azure-credential", frozenset({"AZURE_STORAGE_ACCOUNT"}))
S3 = SecretInfo("ml", "s3-reader", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID"}))
VIEW = StaticClusterView(secrets=[AZURE, S3])
DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def request(**annotations: str | None) -> AdmissionRequest:
    base = {"data_credentials": None, "data_source": None}
    return with_annotations(fixture_request("pvc-dataset.validating.json"), **(base | annotations))


def validate(req: AdmissionRequest, config: Config | None = None) -> Verdict:
    policy = next(p for p in policies(config or Config()) if isinstance(p, ValidatingPolicy))
    return policy.validate(req, VIEW)


def test_az_source_with_an_azure_credential_is_admitted() -> None:
    verdict = validate(request(data_source="az://models/llama", data_credentials="blob-reader"))
    assert verdict.allowed


def test_az_source_with_another_type_names_the_type_it_needs() -> None:
    verdict = validate(request(data_source="az://models/llama", data_credentials="s3-reader"))
    assert not verdict.allowed
    assert "az:// (Azure Blob Storage) data needs a Secret of type 'azure-credential'" in (
        verdict.message
    )


def test_az_source_needs_credentials_to_name_its_account() -> None:
    verdict = validate(request(data_source="az://public-sets"))
    assert not verdict.allowed
    assert "az:// data needs gpu-admission.io/data-credentials naming an azure-credential" in (
        verdict.message
    )


def test_bad_container_name_is_refused() -> None:
    verdict = validate(request(data_source="az://My_Models"))
    assert not verdict.allowed
    assert "Azure Blob Storage container name 'My_Models'" in verdict.message


def test_web_sources_take_no_credentials() -> None:
    verdict = validate(
        request(data_source="https://h.example/f.bin", data_credentials="blob-reader")
    )
    assert not verdict.allowed
    assert "https:// sources are read without credentials; remove the annotation" in (
        verdict.message
    )


def test_plain_http_is_refused_unless_the_configuration_allows_it() -> None:
    req = request(data_source="http://mirror.internal/f.bin")
    verdict = validate(req)
    assert not verdict.allowed
    assert "plain http:// is not allowed here" in verdict.message
    assert "dataset.allow_http" in verdict.message
    allowing = Config.model_validate({"dataset": {"allow_http": True}})
    assert validate(request(data_source="http://mirror.internal/f.bin"), allowing).allowed


def test_a_digest_on_a_single_file_is_admitted_in_either_case() -> None:
    for digest in (DIGEST, DIGEST.upper()):
        req = request(data_source="https://h.example/m/model.bin", data_sha256=digest)
        assert validate(req).allowed


@pytest.mark.parametrize(
    ("source", "digest", "fragment"),
    [
        ("https://h.example/m/", DIGEST, "only for one file from an https:// source"),
        ("az://models/m", DIGEST, "only for one file"),
        ("https://h.example/m.bin", DIGEST[:-1], "64 hexadecimal digits"),
        ("https://h.example/m.bin", "sha256:" + DIGEST, "not a value of 71 characters"),
        ("https://h.example/m.bin", "", "64 hexadecimal digits"),
    ],
)
def test_a_digest_that_cannot_be_checked_is_refused(
    source: str, digest: str, fragment: str
) -> None:
    verdict = validate(request(data_source=source, data_sha256=digest))
    assert not verdict.allowed
    assert verdict.message.startswith("gpu-admission.io/data-sha256: ")
    assert fragment in verdict.message


def test_changing_only_the_digest_is_checked_again_on_update() -> None:
    old = request(data_source="https://h.example/m.bin", data_sha256=DIGEST)
    new = request(data_source="https://h.example/m.bin", data_sha256="nope")
    update = replace(new, operation="UPDATE", old_object=old.object)
    assert not validate(update).allowed


HUB_READER = SecretInfo("ml", "hub-reader", "huggingface-credential", frozenset({"HF_TOKEN"}))
HUB_VIEW = StaticClusterView(secrets=[HUB_READER, S3])


def validate_hub(req: AdmissionRequest) -> Verdict:
    policy = next(p for p in policies(Config()) if isinstance(p, ValidatingPolicy))
    return policy.validate(req, HUB_VIEW)


def test_hub_sources_with_a_huggingface_credential_and_patterns_are_admitted() -> None:
    for source in ("hf://meta-llama/Llama-3.1-8B@main", "hf://datasets/acme/web-text"):
        req = request(
            data_source=source, data_credentials="hub-reader", data_include="*.safetensors, *.json"
        )
        assert validate_hub(req).allowed


def test_hub_source_with_an_aws_secret_names_the_type_it_needs() -> None:
    verdict = validate_hub(request(data_source="hf://acme/m", data_credentials="s3-reader"))
    assert not verdict.allowed
    assert "hf:// (the Hugging Face Hub) data needs a Secret of type 'huggingface-credential'" in (
        verdict.message
    )


@pytest.mark.parametrize(
    ("source", "include", "fragment"),
    [
        ("s3://bucket-1/x", "*.json", "file patterns apply to hf:// sources only"),
        ("hf://acme/m", " , ", "give at least one glob pattern"),
        ("hf://acme/m", "../secrets/*", "relative to the repository's root"),
    ],
)
def test_data_include_problems(source: str, include: str, fragment: str) -> None:
    verdict = validate_hub(request(data_source=source, data_include=include))
    assert not verdict.allowed
    assert verdict.message.startswith("gpu-admission.io/data-include: ")
    assert fragment in verdict.message


def test_a_bad_hub_name_is_refused_saying_which_part() -> None:
    verdict = validate_hub(request(data_source="hf://acme/llama--7b"))
    assert not verdict.allowed
    assert "the Hugging Face Hub name 'llama--7b' must not contain '--'" in verdict.message
