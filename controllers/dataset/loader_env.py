"""The loader's environment: what rclone or huggingface_hub reads to reach the source, with every
credential by reference (secretKeyRef), never copied: the controller never reads a Secret.

Keyless S3: the controller cannot tell a key Secret from a keyless one (it reads no Secret), so
every S3 loader with credentials gets both ways, each of which works only with its own keys:
the access keys as optional references (rclone uses them when present), and rclone's env_auth
with AWS_ROLE_ARN (an optional reference) and a projected token of the loader pod's
ServiceAccount (`dataset.service_account`, else the namespace's `default`), audience
`credentials.aws_token_audience`. That token is no escalation: any pod in the namespace may run
as that ServiceAccount and project the same token; its audience is the cloud's STS alone (the
API server refuses it), automounting stays off so the loader holds no Kubernetes API access,
and the cloud grants only what the role's trust policy gives that ServiceAccount.

Azure Blob works the same way: every azure-credential key comes as an optional reference, with a
projected token (audience api://AzureADTokenExchange, where Azure's webhook puts it) for the
keyless form; the loader uses whichever the Secret holds (loaders.sources). A web source
(https://) takes no credentials; a private CA is trusted through `trusted_ca_config_map`.
A Hugging Face Hub source (hf://) gets HF_TOKEN by reference and the configured hub as
HF_ENDPOINT; huggingface_hub keeps its home in the scratch volume.
"""

from __future__ import annotations

from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.datasets.source import RCLONE_BACKEND, DataSource
from gpu_admission.keyless import TokenRequest
from gpu_admission.names import (
    AWS_ACCESS_KEY_ID,
    AWS_ENDPOINT_URL,
    AWS_REGION,
    AWS_ROLE_ARN,
    AWS_ROLE_SESSION_NAME,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
    AWS_TOKEN_PATH,
    AWS_WEB_IDENTITY_TOKEN_FILE,
    AZURE_CLIENT_ID,
    AZURE_FEDERATED_TOKEN_FILE,
    AZURE_STORAGE_ACCOUNT,
    AZURE_STORAGE_KEY,
    AZURE_STORAGE_SAS_TOKEN,
    AZURE_TENANT_ID,
    AZURE_TOKEN_PATH,
    GCP_KEY_FILE,
    GCP_MOUNT_ROOT,
    GOOGLE_APPLICATION_CREDENTIALS,
    HF_ENDPOINT,
    HF_TOKEN,
    NVIDIA_VISIBLE_DEVICES,
)

SCRATCH_PATH = "/var/cache/loader"
REMOTE_ENV = "RCLONE_CONFIG_SRC_"
# rclone option <- aws-credential Secret key. Only the keys are required; the rest are optional.
S3_SECRET_ENV = (
    ("ACCESS_KEY_ID", AWS_ACCESS_KEY_ID),
    ("SECRET_ACCESS_KEY", AWS_SECRET_ACCESS_KEY),
    ("SESSION_TOKEN", AWS_SESSION_TOKEN),
    ("REGION", AWS_REGION),
    ("ENDPOINT", AWS_ENDPOINT_URL),
)
# What the AWS SDK inside rclone reads for web identity (env_auth), by reference too.
S3_KEYLESS_ENV = (AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME, AWS_REGION)
# rclone option (or, for what the loader turns into an option, the Secret's own name) <-
# azure-credential Secret key; all optional: which way in is used is the loader's choice.
AZURE_SECRET_ENV = (
    (REMOTE_ENV + "ACCOUNT", AZURE_STORAGE_ACCOUNT),
    (REMOTE_ENV + "KEY", AZURE_STORAGE_KEY),
    (AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_SAS_TOKEN),
    (AZURE_CLIENT_ID, AZURE_CLIENT_ID),
    (AZURE_TENANT_ID, AZURE_TENANT_ID),
)
# huggingface_hub, in a read-only root: its home in scratch, no progress bars, no telemetry.
HUB_ENV = (
    ("HF_HOME", f"{SCRATCH_PATH}/huggingface"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
)


def _secret_env(name: str, secret: str, key: str, optional: bool) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def loader_env(
    source: DataSource, secret: str | None, config: Config, token: TokenRequest | None
) -> list[dict[str, Any]]:
    env = [{"name": k, "value": v} for k, v in config.dataset.loader_env.items()]
    env += [
        {"name": NVIDIA_VISIBLE_DEVICES, "value": config.gpu.hidden_value},
        {"name": "HOME", "value": SCRATCH_PATH},
        {"name": "TMPDIR", "value": SCRATCH_PATH},  # the root filesystem is read-only
        {"name": "RCLONE_CONFIG", "value": f"{SCRATCH_PATH}/rclone.conf"},
        {"name": "RCLONE_CACHE_DIR", "value": f"{SCRATCH_PATH}/cache"},
    ]
    if source.scheme == "hf":
        env += [{"name": k, "value": v} for k, v in HUB_ENV]
        env.append({"name": HF_ENDPOINT, "value": config.dataset.huggingface_endpoint})
        if secret:
            env.append(_secret_env(HF_TOKEN, secret, HF_TOKEN, True))
        return env
    env.append({"name": REMOTE_ENV + "TYPE", "value": RCLONE_BACKEND[source.scheme]})
    if source.is_web:
        return env  # read without credentials; the loader sets the http backend's url
    if source.scheme == "az":
        if secret:
            env += [_secret_env(name, secret, key, True) for name, key in AZURE_SECRET_ENV]
            env.append({"name": AZURE_FEDERATED_TOKEN_FILE, "value": AZURE_TOKEN_PATH})
        return env
    if source.scheme == "s3":
        # Without a Secret (and env_auth off, rclone's default) rclone reads anonymously.
        if secret:
            env += [_secret_env(REMOTE_ENV + o, secret, k, True) for o, k in S3_SECRET_ENV]
            env.append({"name": REMOTE_ENV + "ENV_AUTH", "value": "true"})
            env += [_secret_env(k, secret, k, True) for k in S3_KEYLESS_ENV]
            env.append({"name": AWS_WEB_IDENTITY_TOKEN_FILE, "value": AWS_TOKEN_PATH})
    elif secret and token is not None:
        # A keyless Google file: rclone's service_account_file takes service-account keys only,
        # but application default credentials (env_auth) exchange the projected token.
        env.append({"name": REMOTE_ENV + "ENV_AUTH", "value": "true"})
        env.append({"name": GOOGLE_APPLICATION_CREDENTIALS, "value": gcp_key_path(secret)})
    elif secret:
        env.append({"name": REMOTE_ENV + "SERVICE_ACCOUNT_FILE", "value": gcp_key_path(secret)})
    else:
        env.append({"name": REMOTE_ENV + "ANONYMOUS", "value": "true"})
    return env


def gcp_key_path(secret: str) -> str:
    return f"{GCP_MOUNT_ROOT}/{secret}/{GCP_KEY_FILE}"
