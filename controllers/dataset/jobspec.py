"""The loader Job for one (PVC, content): a pure function of its inputs and the config.

Credentials are passed by reference only (`loader_env`: secretKeyRef env, a secret volume for a
Google key file, projected tokens for the keyless forms), never copied: the controller never
reads a Secret. The pod runs non-root with a read-only root filesystem and no Kubernetes API
access; rclone's config and cache go to an emptyDir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controllers.dataset.loader_env import SCRATCH_PATH, loader_env
from controllers.dataset.records import PvcRecord
from controllers.dataset.trusted_ca import trusted_ca
from gpu_admission.cluster.own_image import BUILT_IMAGE
from gpu_admission.config.model import Config, DatasetConfig
from gpu_admission.datasets.source import DataSource
from gpu_admission.keyless import TokenRequest, aws_web_identity, azure_workload_identity
from gpu_admission.names import (
    DATA_MOUNT_PATH,
    GCP_KEY_FILE,
    GCP_MOUNT_ROOT,
    LOADER_MEMORY_LIMIT_ENV,
    LOADER_PERMANENT_EXIT_CODE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
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
CREDENTIALS_VOLUME = "credentials"
TOKEN_VOLUME = "web-identity-token"


@dataclass(frozen=True, slots=True)
class LoaderJobInputs:
    """What one loader Job is made from, besides the configuration: the PVC it fills and what
    it copies into it."""

    job_name: str
    namespace: str
    pvc_name: str
    pvc_uid: str
    source: DataSource
    secret: str | None = None  # the credential Secret, by name
    sync: bool = False  # mirror: delete what the source does not have
    shards: int = 1  # > 1: an Indexed Job, one pod per shard, each index retried alone
    token: TokenRequest | None = None  # a keyless Google credential's projected token
    sha256: str | None = None  # a single web file's expected digest
    include: str | None = None  # a Hub source's file patterns
    cloned_from: str | None = None  # the snapshot the volume starts from (loaders.reuse)
    cloned_digest: str | None = None  # the digest that snapshot's load read

    @classmethod
    def of(cls, pvc: PvcRecord, *, sync: bool = False) -> LoaderJobInputs:
        """The inputs of `pvc`'s current load; `sync`: mirror even if the PVC does not ask.
        Only for a source that parses (decide() fails the PVC of one that does not)."""
        assert pvc.parsed_source is not None, pvc.source_error
        return cls(
            job_name=pvc.current_job,
            namespace=pvc.namespace,
            pvc_name=pvc.name,
            pvc_uid=pvc.uid,
            source=pvc.parsed_source,
            secret=pvc.credentials,
            sync=pvc.sync or sync,
            shards=pvc.shards,
            token=pvc.token,
            sha256=pvc.sha256,
            include=pvc.include,
            cloned_from=pvc.cloned_from,
            cloned_digest=pvc.cloned_digest,
        )


def loader_args(inputs: LoaderJobInputs, config: Config) -> list[str]:
    """The loader's command line (`gpu-admission load ...`)."""
    source = inputs.source
    args = [
        *config.dataset.loader_command,
        "--source",
        source.url,
        "--dest",
        DATA_MOUNT_PATH,
        "--stats-seconds",  # fresh figures whenever the controller reads them
        f"{min(LOADER_STATS_SECONDS, config.dataset.progress_interval_seconds):g}",
    ]
    args += tuning_args(config.dataset, source.scheme)
    if inputs.shards > 1:  # the index comes from JOB_COMPLETION_INDEX, set by the Job controller
        args += ["--shard-count", str(inputs.shards)]
    if inputs.sha256 and source.single_file:
        args += ["--sha256", inputs.sha256.lower()]
    if inputs.include and source.scheme == "hf":
        args += ["--include", inputs.include]
    if source.scheme != "hf":  # the Hub loader times out its own reads
        args += ["--stall-timeout", str(config.dataset.stall_timeout_seconds)]
    if inputs.cloned_from and source.scheme != "hf":  # a hub clone is pinned to its commit
        args += ["--clone-of", inputs.cloned_from]
        if inputs.cloned_digest:
            args += ["--clone-digest", inputs.cloned_digest]
    if config.dataset.rclone_path != "rclone":
        args += ["--rclone", config.dataset.rclone_path]
    return [*args, "--sync"] if inputs.sync else args


def tuning_args(ds: DatasetConfig, scheme: str) -> list[str]:
    """What the configuration fixes of how the loader copies; the rest it chooses itself from
    its listing (loaders.tuning)."""
    args: list[str] = []
    for flag, value in (
        ("--transfers", ds.transfers),
        ("--checkers", ds.checkers),
        ("--multi-thread-streams", ds.multi_thread_streams),
    ):
        if value is not None and (scheme != "hf" or flag == "--transfers"):
            args += [flag, str(value)]
    if scheme != "hf":  # rclone's flags; the Hub loader lists and checks in its own way
        args += [] if ds.fast_list else ["--no-fast-list"]
        args += [] if ds.verify_checksums else ["--no-verify"]
    return args


def build_loader_job(inputs: LoaderJobInputs, config: Config) -> dict[str, Any]:
    """The loader Job: its pod fills the PVC from the source, then ends."""
    labels = {config.names.data_load_label: "true", MANAGED_BY_LABEL: MANAGED_BY}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": inputs.job_name,
            "namespace": inputs.namespace,
            "labels": dict(labels),
            "annotations": {config.names.data_source: inputs.source.url},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "name": inputs.pvc_name,
                    "uid": inputs.pvc_uid,
                    "controller": True,
                }
            ],
        },
        "spec": _job_spec(inputs, config, _pod_spec(inputs, config), labels),
    }


def _mounts_and_volumes(
    inputs: LoaderJobInputs, config: Config
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The PVC, the scratch space, and what the credentials need: a projected token for the
    keyless forms, a Google key file's Secret."""
    source, secret = inputs.source, inputs.secret
    mounts: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "mountPath": DATA_MOUNT_PATH},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": inputs.pvc_name}},
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
    ]
    # A projected ServiceAccount token for keyless credentials: any S3 Secret may be keyless
    # (see the module docstring); a Google one is, when the PVC webhook recorded its token.
    needed = {
        "s3": aws_web_identity(config.credentials.aws_token_audience),
        "az": azure_workload_identity(),
    }.get(source.scheme, inputs.token)
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
    return mounts, volumes


def _pod_spec(inputs: LoaderJobInputs, config: Config) -> dict[str, Any]:
    """Non-root, a read-only root filesystem, no Kubernetes API access."""
    ds = config.dataset
    mounts, volumes = _mounts_and_volumes(inputs, config)
    env = loader_env(inputs.source, inputs.secret, config, inputs.token)
    # The loader keeps its read-ahead buffers within its own limit (loaders.tuning).
    limit = {"containerName": CONTAINER_NAME, "resource": "limits.memory"}
    env.append({"name": LOADER_MEMORY_LIMIT_ENV, "valueFrom": {"resourceFieldRef": limit}})
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
                "image": ds.loader_image or BUILT_IMAGE,
                "command": loader_args(inputs, config),
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
    return pod_spec


def _job_spec(
    inputs: LoaderJobInputs, config: Config, pod_spec: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    """Retries, deadlines and clean-up; shards as an Indexed Job."""
    ds = config.dataset
    spec: dict[str, Any] = {
        "backoffLimit": ds.backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        "activeDeadlineSeconds": ds.active_deadline_seconds,
        "ttlSecondsAfterFinished": ds.ttl_seconds_after_finished,
        "template": {
            "metadata": {
                "labels": dict(labels),
                "annotations": {config.names.dataset_writable: "true"},
            },
            "spec": pod_spec,
        },
    }
    if inputs.shards > 1:
        # Each index copies its own part; one failing shard is retried alone
        # (backoffLimitPerIndex needs restartPolicy Never, which the template has). Without a
        # backoffLimit of its own the API server defaults it to MaxInt32: the per-index limit
        # governs.
        del spec["backoffLimit"]
        spec.update(
            completionMode="Indexed",
            completions=inputs.shards,
            parallelism=inputs.shards,
            backoffLimitPerIndex=ds.backoff_limit_per_shard,
        )
    return spec
