"""The environment rclone runs with for each kind of source: the remote `src` is configured only
by environment (`RCLONE_CONFIG_SRC_*`); the loader Job sets what it knows from the PVC and passes
credentials by reference, and this module adds what needs the values themselves.

- S3: the provider (AWS, or a generic S3-compatible one when the Secret names an endpoint).
- Azure Blob: the Job cannot tell which way in the azure-credential Secret uses (the controller
  reads no Secret), so every way's key comes as an optional reference, and the one that is set
  decides: the account key (rclone's `key`), a SAS token (rclone's `sas_url`, built here for the
  container), or keyless (rclone's `env_auth`: azidentity's WorkloadIdentityCredential reads
  AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE).
- Web: rclone's http backend, its `url` the directory the file or listing is in. A directory is
  listed without rclone's per-file HEAD requests (`no_head`): with them, a file whose HEAD fails
  (a 5xx, a timeout) is dropped from the listing at debug level and the copy still exits 0, a
  load that "succeeds" without it. Without them a file that cannot be read fails the copy.

An empty value from an optional secretKeyRef means "not set", not "set to empty".
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_admission.datasets.source import RCLONE_BACKEND, DataSource
from gpu_admission.names import (
    AZURE_CLIENT_ID,
    AZURE_FEDERATED_TOKEN_FILE,
    AZURE_STORAGE_SAS_TOKEN,
    AZURE_TENANT_ID,
)

REMOTE = "src"  # the rclone remote the Job's environment defines (RCLONE_CONFIG_SRC_*)
PREFIX = f"RCLONE_CONFIG_{REMOTE.upper()}_"
AZURE_OPTIONAL = (AZURE_STORAGE_SAS_TOKEN, AZURE_CLIENT_ID, AZURE_TENANT_ID)
AZURE_BLOB_HOST = "blob.core.windows.net"


def rclone_env(source: DataSource, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment rclone runs with: the Job's, plus what the source's backend needs."""
    env = _remote_over_backend_flags(source, environ)
    env.setdefault(PREFIX + "TYPE", RCLONE_BACKEND[source.scheme])
    if source.scheme == "s3" and not env.get(PREFIX + "PROVIDER"):
        endpoint = env.get(PREFIX + "ENDPOINT") or env.get("RCLONE_S3_ENDPOINT")
        env[PREFIX + "PROVIDER"] = "Other" if endpoint else "AWS"
    env = {k: v for k, v in env.items() if not (k.startswith(PREFIX) and v == "")}
    if source.scheme == "az":
        env = _azure(source, env)
    elif source.is_web:
        env.setdefault(PREFIX + "URL", source.web_base)
        if source.directory:
            env.setdefault(PREFIX + "NO_HEAD", "true")
    return env


def _remote_over_backend_flags(source: DataSource, environ: Mapping[str, str]) -> dict[str, str]:
    """The Job's environment, less each backend-wide setting that the remote sets itself.

    rclone reads `RCLONE_<BACKEND>_<OPTION>` (e.g. `RCLONE_S3_ENDPOINT`) as the command-line
    flag `--s3-endpoint`, and a flag beats the remote's own `RCLONE_CONFIG_SRC_<OPTION>`
    (checked with rclone: both endpoints set, it dials the flag's). The remote's settings come
    from the PVC's Secret (its AWS_ENDPOINT_URL, say) and the backend-wide ones from the
    cluster's `dataset.loader_env`: the more specific must win."""
    env = dict(environ)
    flag = f"RCLONE_{RCLONE_BACKEND[source.scheme].upper()}_"
    for key, value in environ.items():
        if key.startswith(PREFIX) and value:
            env.pop(flag + key.removeprefix(PREFIX), None)
    return env


def azure_endpoint(env: Mapping[str, str], account: str) -> str:
    """The Blob service URL: the configured endpoint (another cloud, an emulator), else Azure's."""
    configured = env.get(PREFIX + "ENDPOINT") or env.get("RCLONE_AZUREBLOB_ENDPOINT")
    return (configured or f"https://{account}.{AZURE_BLOB_HOST}").rstrip("/")


def _azure(source: DataSource, env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in env.items() if not (k in AZURE_OPTIONAL and v == "")}
    if env.get(PREFIX + "KEY") or env.get(PREFIX + "SAS_URL") or env.get(PREFIX + "ENV_AUTH"):
        return env  # configured already: the key, or whoever set the Job's environment
    account = env.get(PREFIX + "ACCOUNT", "")
    sas = env.pop(AZURE_STORAGE_SAS_TOKEN, "")
    if sas:
        base = azure_endpoint(env, account)
        env[PREFIX + "SAS_URL"] = f"{base}/{source.bucket}?{sas.removeprefix('?')}"
    elif env.get(AZURE_CLIENT_ID):
        env[PREFIX + "ENV_AUTH"] = "true"
    else:
        # No way in from the Secret: not even a token file to read for keyless.
        env.pop(AZURE_FEDERATED_TOKEN_FILE, None)
    return env
