"""One configuration model, loaded from a YAML file (or a folder of layers: files.py),
environment variables and flags, in that order.

Later sources win. Environment variables are `GPU_ADMISSION_<FIELD>`, with `__` between nested
fields (`GPU_ADMISSION_MEMORY_SHARE__HEADROOM=0.9`); values are parsed as YAML scalars or lists.
A bad value stops start-up with a message that names the field.
"""

from __future__ import annotations

import fnmatch
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from gpu_admission.config.adoption import AuditConfig, PolicySettings, known_policy_names
from gpu_admission.config.base import _Model
from gpu_admission.config.environ import (
    ENV_PREFIX,
    UnknownSetting,
    own_namespace_defaults,
    read_environ,
)
from gpu_admission.config.files import ConfigFileError, Layer, merged, read_layers, source_of
from gpu_admission.config.idle import IdleConfig
from gpu_admission.config.install import InstallConfig
from gpu_admission.config.policy_modes import (
    TUNABLE_POLICIES,
    VARIANT_OF,
    PolicyMode,
    allowed_modes,
    family,
)
from gpu_admission.config.schedulers import KAI_SCHEDULER, SchedulerGpus
from gpu_admission.config.workloads import WorkloadsConfig
from gpu_admission.names import DEFAULT_PREFIX, HF_DEFAULT_ENDPOINT, Names

_TEMPLATE_FIELDS = ("fraction", "replicas", "limit_mib")


class ConfigError(Exception):
    """Raised for configuration that cannot be used; the message names the field."""


class FailureMode(StrEnum):
    """What a webhook answers when one of its policies fails with an unexpected error."""

    DENY = "deny"
    ALLOW = "allow"


class NoCandidateBehaviour(StrEnum):
    """What the memory-share policy does when no node tells it the replica count."""

    SKIP = "skip"  # admit unchanged, with a warning saying why
    DENY = "deny"


class ServerConfig(_Model):
    host: str = "0.0.0.0"
    """Listen address of every listener."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8443
    """HTTPS: webhooks, /healthz, /readyz."""
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 9090
    """Plain HTTP: /metrics; 0 turns the listener off."""
    max_body_bytes: Annotated[int, Field(ge=1024)] = 3 * 1024 * 1024
    """AdmissionReviews larger than 3 MiB get 413."""
    drain_seconds: Annotated[float, Field(ge=0, le=300)] = 5.0
    """On SIGTERM, how long the service keeps answering (unready, closing each connection after
    its answer) before it closes its listener: long enough for the endpoint's removal to reach
    every kube-proxy. The pod's terminationGracePeriodSeconds must cover it and the grace."""
    shutdown_grace_seconds: Annotated[float, Field(ge=0)] = 20.0
    """On SIGTERM, after draining, how long the last requests may take to finish."""
    # Webhook path -> failure mode when a policy raises. Validating webhooks default to deny:
    # an unchecked object must not get in. Mutating ones too: a pod that missed its
    # NVIDIA_VISIBLE_DEVICES=none would see every GPU of its node.
    failure_modes: dict[str, FailureMode] = Field(default_factory=dict)
    """Webhook path -> what a request gets when one of its policies raises an unexpected error:
    deny (refused, HTTP 500 in the answer, with a message) or allow (admitted without that
    policy's changes, with a warning). Example: {/mutate/pods: deny, /validate/secrets: allow}.
    """
    default_failure_mode: FailureMode = FailureMode.DENY
    """For every path not in failure_modes."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level: debug, info, warning or error."""
    log_format: Literal["json", "text"] = "json"
    """Log format: json (one object per line) or text."""


class CertConfig(_Model):
    cert_dir: Path | None = None
    """--cert-dir: ca.crt, ca.key, tls.crt, tls.key."""
    service_name: str = "gpu-admission"
    """The Service the certificate is issued for."""
    namespace: str = "gpu-admission"
    """The Service's namespace: the certificate names <service>.<namespace>.svc. Unset, the
    namespace the program runs in (its pod's POD_NAMESPACE), so a kustomization's `namespace:`
    moves it; gpu-admission outside a pod."""
    secret_name: str | None = None  # store certificates in this kubernetes.io/tls Secret
    """A kubernetes.io/tls Secret that every replica shares (used with cluster access; the base
    sets gpu-admission-tls); null: cert_dir only.
    """
    extra_dns: list[str] = Field(default_factory=list)
    """More DNS names for the serving certificate."""
    extra_ips: list[str] = Field(default_factory=list)
    """More IP addresses for the serving certificate."""
    key_type: Literal["ecdsa-p256", "rsa-2048", "rsa-3072"] = "ecdsa-p256"
    """Key type of the CA and the serving key: ecdsa-p256, rsa-2048 or rsa-3072."""
    renew_fraction: Annotated[float, Field(gt=0, lt=1)] = 2 / 3
    """Renew after 2/3 of a certificate's lifetime."""
    webhook_configuration_name: str = "gpu-admission"
    """The webhook configurations whose caBundle is kept current."""
    manage_ca_bundle: bool = True
    """False when cert-manager's CA injector writes caBundle."""


class DraConfig(_Model):
    """Which Dynamic Resource Allocation (resource.k8s.io/v1) DeviceClasses hand out GPUs.

    A class is a GPU class when it is named here, or when its CEL selectors require
    `device.driver == "<one of drivers>"` (so a platform team's own classes over NVIDIA's driver,
    such as one per GPU model, count too). The defaults are the classes NVIDIA's DRA driver for
    GPUs (k8s-dra-driver-gpu) installs, and its driver name.
    """

    device_classes: list[str] = Field(
        default_factory=lambda: ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    )
    """DeviceClasses that hand out GPUs, by name."""
    drivers: list[str] = Field(default_factory=lambda: ["gpu.nvidia.com"])
    """DRA drivers whose classes count as GPU classes: a class whose CEL selectors require
    `device.driver == "<driver>"`.
    """


class GpuConfig(_Model):
    resource_patterns: list[str] = Field(
        default_factory=lambda: ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*"]
    )
    """Resources that count as GPUs (shell-style patterns), for every GPU policy."""
    shared_suffixes: list[str] = Field(default_factory=lambda: [".shared"])
    """A GPU resource ending in one of these is a time-sliced replica (limit 1, memory share)."""
    companion_resources: list[str] = Field(
        default_factory=lambda: [
            "nvidia.com/gpumem",
            "nvidia.com/gpumem-percentage",
            "nvidia.com/gpucores",
        ]
    )
    """Resources that ask for a GPU without counting GPUs (shell-style patterns): a container
    naming one is a GPU container for every GPU policy (not hidden, its NVIDIA_VISIBLE_DEVICES
    guarded), but they are not GPUs in any count. Default: HAMi's memory and cores (its chart's
    `resourceMem`, `resourceMemPercentage`, `resourceCores`), to which its webhook adds
    `nvidia.com/gpu`; [] where no such scheduler runs."""
    guarded_env: list[str] = Field(default_factory=lambda: ["NVIDIA_VISIBLE_DEVICES"])
    """Env names a container that requests a GPU may not set."""
    hidden_value: Literal["none", "void"] = "none"
    """The NVIDIA_VISIBLE_DEVICES the visibility policy writes. Both give no GPU, and a container
    that already says either keeps it; `none` still makes the NVIDIA runtime inject the driver's
    libraries and tools, `void` makes it behave as runc. `void` on nodes whose default runtime is
    nvidia, where `none` makes every CPU-only container depend on the driver
    (docs/gpu-policies.md)."""
    nvidia_runtime_classes: list[str] = Field(
        default_factory=lambda: ["nvidia", "nvidia-cdi", "nvidia-legacy"]
    )
    """RuntimeClasses whose handler is NVIDIA's container runtime (the GPU Operator's): a container
    under one gets what its NVIDIA_VISIBLE_DEVICES names, from its env or its image."""
    nvidia_default_runtime: bool = False
    """The nodes' default runtime is NVIDIA's (device-plugin installs, GPU Operator before
    v25.10, vendor GPU node images): a pod without a runtime class is under it too."""
    dra: DraConfig = DraConfig()
    """Dynamic Resource Allocation: DeviceClasses that hand out GPUs, by name or by the driver
    their CEL selectors require (`device.driver == "..."`). Defaults: NVIDIA's DRA driver for
    GPUs.
    """
    visibility_policy: bool = True
    """Give every container without a GPU NVIDIA_VISIBLE_DEVICES=`hidden_value` (GPU visibility).
    false on nodes whose NVIDIA container toolkit ignores the variable in unprivileged containers
    (accept-nvidia-visible-devices-envvar-when-unprivileged=false), where it adds nothing; the
    without-gpu-visibility component sets it (docs/compatibility.md)."""
    schedulers: list[SchedulerGpus] = Field(default_factory=lambda: [KAI_SCHEDULER])
    """Schedulers that hand out GPUs themselves, without a GPU resource: a pod of one that carries
    its mark keeps the NVIDIA_VISIBLE_DEVICES the scheduler gives it (from its ConfigMap), where
    a CPU-only pod's is replaced by `hidden_value`. Default: KAI-Scheduler's GPU fractions
    (gpu_admission/config/schedulers.py)."""

    @field_validator("resource_patterns", "shared_suffixes")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value or any(not item for item in value):
            raise ValueError("must be a non-empty list of non-empty strings")
        return value

    def is_gpu_resource(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.resource_patterns)

    def asks_for_gpu(self, name: str) -> bool:
        """A GPU resource, or one that asks for a GPU without counting one (companion)."""
        return self.is_gpu_resource(name) or any(
            fnmatch.fnmatchcase(name, pattern) for pattern in self.companion_resources
        )

    def runs_under_nvidia(self, runtime_class: str | None) -> bool:
        """Whether a pod of this runtime class runs under NVIDIA's container runtime."""
        if not runtime_class:
            return self.nvidia_default_runtime
        return runtime_class in self.nvidia_runtime_classes

    def is_shared_resource(self, name: str) -> bool:
        return self.is_gpu_resource(name) and any(name.endswith(s) for s in self.shared_suffixes)

    def base_resource_name(self, name: str) -> str:
        """`nvidia.com/gpu.shared` -> `nvidia.com/gpu`: node labels keep the original name."""
        for suffix in self.shared_suffixes:
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name


class MemoryShareConfig(_Model):
    headroom: Annotated[float, Field(gt=0, le=1)] = 0.95
    """Share of GPU memory the replicas split (the rest is left for CUDA contexts)."""
    default_profile: str = "generic"
    """When a pod has no gpu-admission.io/gpu-app annotation."""
    # Custom profiles: name -> {env name -> template over {fraction}, {replicas}, {limit_mib}}.
    profiles: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Custom profiles: name -> {env name: template over {fraction}, {replicas}, {limit_mib}}."""
    on_no_candidates: NoCandidateBehaviour = NoCandidateBehaviour.SKIP
    """When no node tells the share: skip (admit unchanged, with a warning) or deny."""

    @field_validator("profiles")
    @classmethod
    def _templates_use_known_fields(
        cls, value: dict[str, dict[str, str]]
    ) -> dict[str, dict[str, str]]:
        for profile, env in value.items():
            for env_name, template in env.items():
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
                    raise ValueError(f"profile {profile!r}: {env_name!r} is not a valid env name")
                for field in re.findall(r"{([^}]*)}", template):
                    if field not in _TEMPLATE_FIELDS:
                        raise ValueError(
                            f"profile {profile!r}, env {env_name}: unknown template field "
                            f"{{{field}}}; use {', '.join('{' + f + '}' for f in _TEMPLATE_FIELDS)}"
                        )
        return value


class CredentialsConfig(_Model):
    informer_wait_seconds: Annotated[float, Field(ge=0, le=5)] = 0.2
    """Seconds to wait for the cache on a miss before one direct read (at most 5)."""
    max_secret_bytes: Annotated[int, Field(ge=1024)] = 64 * 1024
    """Larger credential Secrets are refused."""
    # RSA key checks cost tens of milliseconds; results are cached by the key's SHA-256 (0: off).
    key_check_cache_size: Annotated[int, Field(ge=0)] = 256
    """Cached RSA key verdicts, by SHA-256 of the key; 0: off."""
    # Keyless AWS (aws-credential with AWS_ROLE_ARN): the projected ServiceAccount token's
    # audience (what the IAM OIDC provider lists as its client ID) and lifetime; the kubelet
    # rewrites the file at 80% of it and the SDKs read it again for each new session.
    aws_token_audience: str = "sts.amazonaws.com"
    """Keyless AWS: the projected token's audience."""
    token_expiration_seconds: Annotated[int, Field(ge=600, le=2**32)] = 86400
    """Keyless: projected token lifetime (the kubelet renews it at 80%)."""


MAX_PARALLELISM = 100  # a sanity bound; Indexed Jobs allow far more


class DatasetCacheConfig(_Model):
    """Loaded dataset PVCs are snapshotted; new PVCs of the same source and credentials in the
    namespace start from the newest ready snapshot and only refresh what changed."""

    enabled: bool = True
    """Keep loaded PVCs as VolumeSnapshots and start new PVCs of the same source and credentials
    from them.
    """
    # null: the VolumeSnapshotClass whose driver is the PVC's StorageClass provisioner (the
    # one marked default, if several are).
    volume_snapshot_class: str | None = None
    """VolumeSnapshotClass of dataset snapshots; null: the class whose driver provisions the
    PVC's StorageClass."""
    keep_per_source: Annotated[int, Field(ge=1, le=100)] = 2  # older snapshots are deleted
    """Snapshots kept per (source, credentials) and namespace."""


class DatasetConfig(_Model):
    loader_image: str | None = None
    """Image of the loader Jobs; null: the controller's own image (what the kustomization's
    `images:` set), read from its pod at start."""
    rclone_path: str = "rclone"
    """The rclone executable inside the loader image."""
    transfers: Annotated[int, Field(ge=1, le=256)] | None = None
    """Files copied at once (rclone's --transfers; hf://: download threads); null: chosen by
    each loader from its listing (64 for many small files, up to 4 large ones at once)."""
    checkers: Annotated[int, Field(ge=1, le=256)] | None = None
    """rclone's --checkers: comparisons at once; null: as many as transfers, at least 16."""
    multi_thread_streams: Annotated[int, Field(ge=1, le=64)] | None = None
    """Ranged streams per file of 64 MiB or more (rclone's --multi-thread-streams); null: 16
    connections shared by the large files in flight, at least 4 each."""
    fast_list: bool = True
    """List the source in one recursive listing (rclone's --fast-list): fewer requests, the
    listing held in memory."""
    verify_checksums: bool = True
    """Check each copied file against the MD5 the store gives (an S3 ETag of one part, a GCS
    md5Hash, an Azure Content-MD5). False: sizes only, which saves the loader about 2 CPU
    seconds per GiB (docs/datasets.md#how-fast-a-load-goes)."""
    sync_delete: bool = False  # default copy semantics; `true` mirrors (deletes extra files)
    """True: mirror the source (delete files it lacks) for every PVC."""
    backoff_limit: Annotated[int, Field(ge=0)] = 2
    """Loader Job retries before the load is Failed."""
    active_deadline_seconds: Annotated[int, Field(ge=60)] = 6 * 3600
    """A load running longer (6 h) is Failed."""
    stall_timeout_seconds: Annotated[int, Field(ge=0)] = 600
    """A loader that receives no byte (and lists or checks nothing) for this long gives up: a
    transient failure, retried within backoff_limit, what was copied kept. 0 turns the
    watchdog off. s3://, gs://, az:// and https:// loads; hf:// loads time out reads
    themselves (huggingface_hub's HF_HUB_DOWNLOAD_TIMEOUT)."""
    ttl_seconds_after_finished: Annotated[int, Field(ge=0)] = 3600
    """Finished loader Jobs are deleted after an hour."""
    max_concurrent_loads: Annotated[int, Field(ge=1)] = 10
    """Loads running at once, cluster-wide; other PVCs wait in Pending."""
    loader_cpu_request: str = "500m"
    """CPU request of the loader container."""
    loader_memory_request: str = "512Mi"
    """Memory request of the loader container."""
    loader_cpu_limit: str = "2"
    """CPU limit of the loader container."""
    loader_memory_limit: str = "2Gi"
    """Memory limit of the loader container."""
    loader_run_as_user: Annotated[int, Field(ge=1)] = 65532
    """The uid, gid and fsGroup of the loader pod."""
    service_account: str | None = None
    """Loader pods' ServiceAccount (null: the namespace's default)."""
    reconcile_workers: Annotated[int, Field(ge=1, le=64)] = 4
    """Concurrent reconciles."""
    requeue_base_seconds: Annotated[float, Field(gt=0)] = 0.5
    """Back-off before a failed reconcile is retried; it doubles up to requeue_max_seconds."""
    requeue_max_seconds: Annotated[float, Field(gt=0)] = 300.0
    """The longest back-off between retries of a failed reconcile."""
    # Loader container command and extra env (first, so credential refs win on the same name):
    # e.g. RCLONE_CONFIG_SRC_ENDPOINT for an S3-compatible store read anonymously, or a proxy.
    loader_command: list[str] = Field(default_factory=lambda: ["gpu-admission", "load"])
    """The loader container's command; flags are appended."""
    loader_env: dict[str, str] = Field(default_factory=dict)
    """Extra env for loader containers, e.g. RCLONE_CONFIG_SRC_ENDPOINT for an S3-compatible store
    read anonymously, or HTTPS_PROXY. Credential references win on the same name, and over a
    backend-wide RCLONE_<BACKEND>_<OPTION> here (RCLONE_S3_ENDPOINT beside a Secret's
    AWS_ENDPOINT_URL: the Secret's endpoint is used).
    """
    # Over max_concurrent_loads, a PVC stays Pending and is looked at again after this long.
    capacity_requeue_seconds: Annotated[float, Field(gt=0)] = 5.0
    """Seconds after which a PVC waiting for a free load slot is looked at again."""
    # Shards (Indexed Job indexes) per load: the default when a PVC asks for none, and the most
    # one may ask for. Each shard is one loader pod with the loader_* resources.
    default_parallelism: Annotated[int, Field(ge=1, le=MAX_PARALLELISM)] = 1
    """Loader shards for a ReadWriteMany PVC that asks for none."""
    max_parallelism: Annotated[int, Field(ge=1, le=MAX_PARALLELISM)] = 16
    """The most shards a PVC may ask for (each is a loader pod)."""
    # Retries of one shard before the load fails (the Job's backoffLimitPerIndex).
    backoff_limit_per_shard: Annotated[int, Field(ge=0)] = 2
    """Retries of one shard (backoffLimitPerIndex) before Failed."""
    # How often a running load's progress is read (one pods/log per running loader pod) and
    # written to its PVC (at most one status write); also the loader's stats interval.
    progress_interval_seconds: Annotated[float, Field(gt=0, le=30)] = 20.0
    """Progress is read and written this often, in seconds (at most 30)."""
    trusted_ca_config_map: str | None = None
    """A ConfigMap, in each dataset PVC's namespace, with the CA bundle loaders trust instead of
    the image's: for object stores and token services behind a private CA (trust-manager can
    put one in every namespace). It must hold every CA the loaders need, public ones included.
    Null: the image's bundle."""
    trusted_ca_key: str = "ca.crt"
    """The key of trusted_ca_config_map that holds the PEM bundle."""
    huggingface_endpoint: str = HF_DEFAULT_ENDPOINT
    """The Hugging Face Hub that hf:// sources are read from: a mirror or an on-premises hub
    (given to loaders as HF_ENDPOINT); its CA, if private, goes in trusted_ca_config_map."""
    allow_http: bool = False
    """Accept plain http:// data sources. Off by default: anyone on the network path can read or
    change what an http:// load copies; https:// is always accepted."""
    # Exported as a metric so the DatasetLoadStuck alert reads it: no threshold in the rules.
    load_stuck_after_seconds: Annotated[float, Field(gt=0)] = 2 * 3600.0
    """How long a load may be Pending or Loading before the GpuAdmissionDatasetLoadStuck alert
    fires; exported as `gpu_admission_dataset_load_stuck_after_seconds`, so the alert rule holds
    no number of its own.
    """
    cache: DatasetCacheConfig = DatasetCacheConfig()
    """Loaded PVCs kept as VolumeSnapshots; new ones cloned from them."""

    @model_validator(mode="after")
    def _parallelism_bounds(self) -> DatasetConfig:
        if self.default_parallelism > self.max_parallelism:
            raise ValueError(
                f"default_parallelism ({self.default_parallelism}) is above max_parallelism "
                f"({self.max_parallelism})"
            )
        return self

    @field_validator("huggingface_endpoint")
    @classmethod
    def _hub_endpoint(cls, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.query:
            raise ValueError(
                "must be the hub's base URL, like https://huggingface.co or "
                "https://hub.internal.example"
            )
        return value.rstrip("/")


class LeaderElectionConfig(_Model):
    enabled: bool = True
    """False: every controller replica reconciles (then run one replica)."""
    lease_name: str = "gpu-admission-controller"
    """Name of the Lease the controller replicas campaign for."""
    namespace: str = "gpu-admission"
    """Where the Lease lives. Unset, the namespace the controller runs in (POD_NAMESPACE);
    gpu-admission outside a pod."""
    lease_duration_seconds: Annotated[float, Field(gt=0)] = 15.0
    """A standby takes over this long after the leader vanished."""
    renew_deadline_seconds: Annotated[float, Field(gt=0)] = 10.0
    """The leader stops acting if it cannot renew within this."""
    retry_period_seconds: Annotated[float, Field(gt=0)] = 2.0
    """How often candidates try to acquire or renew."""


class Config(_Model):
    annotation_prefix: str = DEFAULT_PREFIX
    """Prefix of every annotation, label and scheduling gate. The admission objects the controller
    writes follow it (the webhook configurations' namespaceSelector and matchConditions, the
    policies' CEL).
    """
    exempt_namespace_label: str | None = None  # default: `<prefix>exempt`
    """Namespace label that exempts a namespace; null means "<annotation_prefix>exempt". In the
    cluster the webhook configurations' namespaceSelector does the skipping; `review` reads
    this.
    """
    kubeconfig: Path | None = None
    """Cluster access (--kubeconfig); null: the in-cluster ServiceAccount, or offline without
    one."""
    server: ServerConfig = ServerConfig()
    """The webhook service's listeners, request limits and logging."""
    certs: CertConfig = CertConfig()
    """The serving certificate: where it is kept, what it names, when it renews."""
    gpu: GpuConfig = GpuConfig()
    """Which resources and DeviceClasses count as GPUs, for every GPU policy."""
    memory_share: MemoryShareConfig = MemoryShareConfig()
    """The memory share told to containers on time-sliced GPUs."""
    credentials: CredentialsConfig = CredentialsConfig()
    """Credential Secrets: their checks and keyless tokens."""
    dataset: DatasetConfig = DatasetConfig()
    """The dataset controller and its loader Jobs."""
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    """The controller's Lease: only the replica holding it reconciles."""
    policies: dict[str, PolicySettings] = Field(default_factory=dict)
    """Policy name -> its settings, e.g. {gpu-env-guard: {mode: warn}}. Names: gpu-env-guard,
    shared-gpu-limit, credential-secrets, dataset-pvc (validating: enforce, warn, audit);
    cloud-credentials, gpu-visibility, gpu-memory-share, dataset-gate, dataset-pvc-cache
    (mutating: enforce, audit). Unnamed policies enforce."""
    audit: AuditConfig = AuditConfig()
    """The controller's background scan of what the cluster already holds."""
    idle: IdleConfig = IdleConfig()
    """Idle GPUs: the controller's GPUIdle Events and, where a namespace opts in, their return."""
    workloads: WorkloadsConfig = WorkloadsConfig()
    """Workloads (Deployments, Jobs, JobSets, ...) checked through their pod templates."""
    install: InstallConfig = InstallConfig()
    """What the install is made of: its layout and kustomize components (the components write
    it)."""

    @field_validator("policies", mode="before")
    @classmethod
    def _policy_names(cls, value: Any) -> Any:
        return known_policy_names(value)

    @model_validator(mode="after")
    def _modes_allowed(self) -> Config:
        for name, settings in self.policies.items():
            if settings.mode not in allowed_modes(name):
                raise ValueError(
                    f"policies.{name}.mode: {name} changes objects, so its modes are enforce "
                    "(change them) and audit (record what it would change); warn is for "
                    "policies that refuse"
                )
        return self

    @field_validator("annotation_prefix")
    @classmethod
    def _prefix_shape(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/", value):
            raise ValueError("must be a DNS subdomain followed by '/', like 'gpu-admission.io/'")
        return value

    @property
    def names(self) -> Names:
        return Names(self.annotation_prefix)

    @property
    def exempt_label(self) -> str:
        return self.exempt_namespace_label or self.names.exempt_label

    def mode_of(self, policy: str) -> PolicyMode:
        settings = self.policies.get(family(policy))
        return settings.mode if settings is not None else PolicyMode.ENFORCE

    def relaxed_modes(self) -> dict[str, PolicyMode]:
        """Every policy (variants included) that does not enforce, with its mode."""
        names = (*TUNABLE_POLICIES, *VARIANT_OF)
        return {n: self.mode_of(n) for n in names if self.mode_of(n) is not PolicyMode.ENFORCE}

    @property
    def refuses_nothing(self) -> bool:
        """No policy enforces (audit mode): nothing this configuration runs may refuse a request,
        so nothing may refuse one because the service is down either (webhooks `Ignore`)."""
        return all(self.mode_of(n) is not PolicyMode.ENFORCE for n in TUNABLE_POLICIES)

    def failure_mode(self, path: str) -> FailureMode:
        return self.server.failure_modes.get(path, self.server.default_failure_mode)


def describe_validation_error(error: ValidationError, layers: Sequence[Layer]) -> str:
    """Each bad field, with the layer that set it (or "defaults")."""
    sources = ", ".join(layer.source for layer in layers) or "defaults"
    lines = [f"invalid configuration ({sources}):"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        where = source_of(item["loc"], layers) if len(layers) > 1 else None
        lines.append(f"  {field}: {item['msg']}" + (f" (set in {where})" if where else ""))
    return "\n".join(lines)


def load_config(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the config from a YAML file or a folder of layers (gpu_admission/config/files.py),
    then `GPU_ADMISSION_*` variables, then flag overrides; each merged over the ones before, all
    over the namespace the program runs in (POD_NAMESPACE) for the settings that name it."""
    environ = os.environ if environ is None else environ
    try:
        layers = read_layers(Path(path)) if path is not None else []
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from None
    try:
        env_values = read_environ(environ, Config.model_fields)
    except UnknownSetting as exc:
        raise ConfigError(
            f"invalid configuration ({ENV_PREFIX}* environment variables):\n{exc}"
        ) from None
    if env_values:
        layers.append(Layer(f"{ENV_PREFIX}* environment variables", env_values))
    if overrides:
        layers.append(Layer("command-line flags", dict(overrides)))
    # Below every layer, as the models' defaults are: the namespace the program runs in.
    data: dict[str, Any] = own_namespace_defaults(environ)
    for layer in layers:
        data = merged(data, layer.data)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, layers)) from exc
