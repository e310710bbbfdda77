"""The loader Job for one (PVC, source): a pure function of the PVC and the config.

Credentials are passed by reference only (secretKeyRef env for S3, a secret volume for a Google
key file), never copied: the controller never reads a Secret. The pod runs non-root with a
read-only root filesystem; rclone's config and cache go to an emptyDir.

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

from controllers.dataset.trusted_ca import trusted_ca
from gpu_admission.config import Config
from gpu_admission.datasource import RCLONE_BACKEND, DataSource
from gpu_admission.keyless import TokenRequest, aws_web_identity, azure_workload_identity
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
    DATA_MOUNT_PATH,
    GCP_KEY_FILE,
    GCP_MOUNT_ROOT,
    GOOGLE_APPLICATION_CREDENTIALS,
    HF_ENDPOINT,
    HF_TOKEN,
    LOADER_PERMANENT_EXIT_CODE,
    NVIDIA_VISIBLE_DEVICES,
    VISIBLE_DEVICES_NONE,
)

CONTAINER_NAME = "loader"


def pod_failure_policy() -> dict[str, Any]:
    """Permanent failures end the Job at once; disruptions (eviction, preemption, node drain)
    are not the load's fault and do not use up its retries; anything else is retried up to the
    backoff limit, the Job controller waiting 10 s, doubling, before each new pod. A new dict
    each time: a literal costs a tenth of a deepcopy of a shared one."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "In",
                    "values": [LOADER_PERMANENT_EXIT_CODE],
                },
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


LOADER_STATS_SECONDS = 5.0  # rclone's stats (and progress line) interval, at most
DATA_VOLUME = "data"
SCRATCH_VOLUME = "scratch"
SCRATCH_PATH = "/var/cache/loader"
CREDENTIALS_VOLUME = "credentials"
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
TOKEN_VOLUME = "web-identity-token"


def _secret_env(name: str, secret: str, key: str, optional: bool) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _env(
    source: DataSource, secret: str | None, config: Config, token: TokenRequest | None
) -> list[dict[str, Any]]:
    env = [{"name": k, "value": v} for k, v in config.dataset.loader_env.items()]
    env += [
        {"name": NVIDIA_VISIBLE_DEVICES, "value": VISIBLE_DEVICES_NONE},
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


def loader_args(
    source: DataSource,
    sync: bool,
    config: Config,
    shards: int = 1,
    sha256: str | None = None,
    include: str | None = None,
    cloned_from: str | None = None,
    cloned_digest: str | None = None,
) -> list[str]:
    args = [
        *config.dataset.loader_command,
        "--source",
        source.url,
        "--dest",
        DATA_MOUNT_PATH,
        "--transfers",
        str(config.dataset.transfers),
        "--checkers",
        str(config.dataset.checkers),
        "--stats-seconds",  # fresh figures whenever the controller reads them
        f"{min(LOADER_STATS_SECONDS, config.dataset.progress_interval_seconds):g}",
    ]
    if shards > 1:  # the index comes from JOB_COMPLETION_INDEX, set by the Job controller
        args += ["--shard-count", str(shards)]
    if sha256 and source.single_file:
        args += ["--sha256", sha256.lower()]
    if include and source.scheme == "hf":
        args += ["--include", include]
    if source.scheme != "hf":  # the Hub loader times out its own reads
        args += ["--stall-timeout", str(config.dataset.stall_timeout_seconds)]
    if cloned_from and source.scheme != "hf":  # a hub clone is pinned to its commit
        args += ["--clone-of", cloned_from]
        if cloned_digest:
            args += ["--clone-digest", cloned_digest]
    if config.dataset.rclone_path != "rclone":
        args += ["--rclone", config.dataset.rclone_path]
    return [*args, "--sync"] if sync else args


def build_loader_job(
    *,
    job_name: str,
    pvc_namespace: str,
    pvc_name: str,
    pvc_uid: str,
    source: DataSource,
    secret: str | None,
    sync: bool,
    config: Config,
    shards: int = 1,
    token: TokenRequest | None = None,
    sha256: str | None = None,
    include: str | None = None,
    cloned_from: str | None = None,
    cloned_digest: str | None = None,
) -> dict[str, Any]:
    """`shards` > 1: an Indexed Job, one pod per shard, each index retried alone."""
    names, ds = config.names, config.dataset
    labels = {names.data_load_label: "true"}
    mounts: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "mountPath": DATA_MOUNT_PATH},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": pvc_name}},
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
    ]
    # A projected ServiceAccount token for keyless credentials: any S3 Secret may be keyless
    # (see the module docstring); a Google one is, when the PVC webhook recorded its token.
    needed = {
        "s3": aws_web_identity(config.credentials.aws_token_audience),
        "az": azure_workload_identity(),
    }.get(source.scheme, token)
    if secret and needed is not None:
        mounts.append({"name": TOKEN_VOLUME, "mountPath": needed.directory, "readOnly": True})
        volumes.append(needed.volume(TOKEN_VOLUME, config.credentials.token_expiration_seconds))
    if secret and source.scheme == "gs":
        mounts.append(
            {
                "name": CREDENTIALS_VOLUME,
                "mountPath": f"{GCP_MOUNT_ROOT}/{secret}",
                "readOnly": True,
            }
        )
        volumes.append(
            {
                "name": CREDENTIALS_VOLUME,
                "secret": {
                    "secretName": secret,
                    "items": [{"key": GCP_KEY_FILE, "path": GCP_KEY_FILE}],
                    "defaultMode": 0o440,
                },
            }
        )
    env = _env(source, secret, config, token)
    trust = trusted_ca(config)
    if trust is not None:
        mounts.append(trust.mount)
        volumes.append(trust.volume)
        env.append(trust.env)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": ds.loader_run_as_user,
            "runAsGroup": ds.loader_run_as_user,
            "fsGroup": ds.loader_run_as_user,  # so the loader can write the volume
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER_NAME,
                "image": ds.loader_image,
                "command": loader_args(
                    source, sync, config, shards, sha256, include, cloned_from, cloned_digest
                ),
                "env": env,
                "resources": {
                    "requests": {"cpu": ds.loader_cpu_request, "memory": ds.loader_memory_request},
                    "limits": {"cpu": ds.loader_cpu_limit, "memory": ds.loader_memory_limit},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": mounts,
                "terminationMessagePath": "/dev/termination-log",
                # The wrapper writes a summary; if it could not, the log tail tells the cause.
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "volumes": volumes,
    }
    if ds.service_account:
        pod_spec["serviceAccountName"] = ds.service_account
    spec: dict[str, Any] = {
        "backoffLimit": ds.backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        "activeDeadlineSeconds": ds.active_deadline_seconds,
        "ttlSecondsAfterFinished": ds.ttl_seconds_after_finished,
        "template": {
            "metadata": {
                "labels": dict(labels),
                "annotations": {names.dataset_writable: "true"},
            },
            "spec": pod_spec,
        },
    }
    if shards > 1:
        # Each index copies its own part; one failing shard is retried alone
        # (backoffLimitPerIndex needs restartPolicy Never, which the template has). Without a
        # backoffLimit of its own the API server defaults it to MaxInt32: the per-index limit
        # governs.
        del spec["backoffLimit"]
        spec.update(
            completionMode="Indexed",
            completions=shards,
            parallelism=shards,
            backoffLimitPerIndex=ds.backoff_limit_per_shard,
        )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": pvc_namespace,
            "labels": dict(labels),
            "annotations": {names.data_source: source.url},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "name": pvc_name,
                    "uid": pvc_uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }
