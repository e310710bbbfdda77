"""Validating policy: credential Secrets must hold well-formed credentials.

Runs on Secret CREATE and UPDATE. Secrets of any other type pass at once, untouched. Every
problem is reported in one denial, so the user can fix everything in one go; no message ever
carries a value from the Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.model import Config
from gpu_admission.names import (
    AWS_CREDENTIAL_TYPE,
    AZURE_CREDENTIAL_TYPE,
    CREDENTIAL_TYPES,
    GCP_CREDENTIAL_TYPE,
    HUGGINGFACE_CREDENTIAL_TYPE,
)
from webhooks.core.review import ALLOW, AdmissionRequest, Verdict
from webhooks.credentials.aws import validate_aws
from webhooks.credentials.azure import validate_azure
from webhooks.credentials.gcp import validate_gcp
from webhooks.credentials.huggingface import validate_huggingface
from webhooks.credentials.problems import Problem
from webhooks.credentials.rsa_keys import RsaKeyChecker
from webhooks.credentials.secret_data import decode_secret_data
from webhooks.policies.interface import Scope, ValidatingPolicy

POLICY_NAME = "credential-secrets"
# Secrets of other types never reach the policy; the service answers them from the review's head.
SCOPE = Scope(
    "Secret",
    operations=frozenset({"CREATE", "UPDATE"}),
    object_types=frozenset(CREDENTIAL_TYPES),
)


def denial_message(name: str, secret_type: str, problems: list[Problem]) -> str:
    listed = "; ".join(str(p) for p in problems)
    return (
        f'Secret "{name}" is not a valid {secret_type}: {listed}. '
        "Fix these and apply the Secret again."
    )


def make_validator(
    max_secret_bytes: int, key_check: Callable[[bytes], str | None]
) -> Callable[[AdmissionRequest, ClusterView], Verdict]:
    validators: Mapping[str, Callable[[Mapping[str, bytes]], list[Problem]]] = {
        GCP_CREDENTIAL_TYPE: lambda data: validate_gcp(data, key_check),
        AWS_CREDENTIAL_TYPE: validate_aws,
        AZURE_CREDENTIAL_TYPE: validate_azure,
        HUGGINGFACE_CREDENTIAL_TYPE: validate_huggingface,
    }

    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        # The type of the new object decides: the API server refuses type changes anyway.
        secret_type = request.object.get("type")
        if not isinstance(secret_type, str) or secret_type not in validators:
            return ALLOW
        validator = validators[secret_type]
        data, problems = decode_secret_data(request.object, max_secret_bytes)
        if not problems:
            problems = validator(data)
        if not problems:
            return ALLOW
        return Verdict.deny(denial_message(request.name or "(unnamed)", secret_type, problems))

    return validate


def policies(config: Config) -> list[ValidatingPolicy]:
    key_check = RsaKeyChecker(config.credentials.key_check_cache_size)
    return [
        ValidatingPolicy(
            POLICY_NAME,
            SCOPE,
            make_validator(config.credentials.max_secret_bytes, key_check),
        )
    ]
