"""Every name users type or read: annotations, labels, gates, conditions, Secret types and keys.

The annotation prefix is configurable, so names that carry it are built by `Names(prefix)`; names
that belong to Kubernetes or NVIDIA are plain constants. Nothing else in the code spells these out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

DEFAULT_PREFIX = "gpu-admission.io/"

# Kubernetes and NVIDIA names.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
# On every object the programs create in users' namespaces (reports, dataset cache snapshots,
# loader and source-check Jobs): what one uninstall command selects (docs/install.md).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-admission"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VISIBLE_DEVICES_NONE = "none"
# The values that give a container no GPU, as NVIDIA's container toolkit reads the variable:
# `none` mounts no device node but still injects the driver's libraries and tools; `void` (like
# an unset variable) makes the runtime behave as runc. Both mean hidden; `gpu.hidden_value`
# says which one the policy writes.
VISIBLE_DEVICES_VOID = "void"
HIDDEN_VALUES = (VISIBLE_DEVICES_NONE, VISIBLE_DEVICES_VOID)

# gpu-feature-discovery node labels, read under a resource's base name (it keeps the original
# name when a shared resource is renamed): `nvidia.com/gpu.replicas`, `nvidia.com/gpu.memory`.
GPU_REPLICAS_LABEL_SUFFIX = ".replicas"
GPU_MEMORY_LABEL_SUFFIX = ".memory"  # MiB per GPU (or per MIG slice)
# `none`, or how a shared GPU is shared (replicas > 1): the device plugin's two strategies.
GPU_SHARING_STRATEGY_LABEL_SUFFIX = ".sharing-strategy"
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"

# Memory-share profiles (pod annotation `<prefix>gpu-app`) and the env they write.
PROFILE_GENERIC = "generic"
PROFILE_PYTORCH = "pytorch"
PROFILE_JAX = "jax"
PROFILE_TENSORFLOW = "tensorflow"
GPU_MEMORY_FRACTION = "GPU_MEMORY_FRACTION"
GPU_SHARED_REPLICAS = "GPU_SHARED_REPLICAS"
GPU_MEMORY_LIMIT_MIB = "GPU_MEMORY_LIMIT_MIB"
GPU_SHARING_STRATEGY = "GPU_SHARING_STRATEGY"
PYTORCH_CUDA_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
PYTORCH_MEMORY_FRACTION_OPTION = "per_process_memory_fraction"
XLA_PYTHON_CLIENT_MEM_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
XLA_CLIENT_MEM_FRACTION = "XLA_CLIENT_MEM_FRACTION"
TF_FORCE_GPU_ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"

# Secret types and their keys.
GCP_CREDENTIAL_TYPE = "gcp-credential"
AWS_CREDENTIAL_TYPE = "aws-credential"
AZURE_CREDENTIAL_TYPE = "azure-credential"
HUGGINGFACE_CREDENTIAL_TYPE = "huggingface-credential"
CREDENTIAL_TYPES = (
    GCP_CREDENTIAL_TYPE,
    AWS_CREDENTIAL_TYPE,
    AZURE_CREDENTIAL_TYPE,
    HUGGINGFACE_CREDENTIAL_TYPE,
)
GCP_KEY_FILE = "key.json"
GCP_MOUNT_ROOT = "/var/run/secrets/gcp"
GOOGLE_APPLICATION_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"
AWS_REGION = "AWS_REGION"
AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_REQUIRED_KEYS = (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
AWS_OPTIONAL_KEYS = (AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL)
# Keyless (web identity): every AWS SDK, and rclone's S3 backend with env_auth, reads these.
AWS_ROLE_ARN = "AWS_ROLE_ARN"
AWS_ROLE_SESSION_NAME = "AWS_ROLE_SESSION_NAME"
AWS_WEB_IDENTITY_TOKEN_FILE = "AWS_WEB_IDENTITY_TOKEN_FILE"
AWS_KEYLESS_OPTIONAL_KEYS = (AWS_ROLE_SESSION_NAME, AWS_REGION, AWS_ENDPOINT_URL)
# Where the projected token goes, named after its audience as Kubernetes names its own.
AWS_TOKEN_DIR = "/var/run/secrets/sts.amazonaws.com/serviceaccount"
AWS_TOKEN_FILE = "token"
AWS_TOKEN_PATH = f"{AWS_TOKEN_DIR}/{AWS_TOKEN_FILE}"

# azure-credential: the storage account, then one way in: a shared key, a SAS token, or keyless
# (Azure workload identity). The names are the ones the Azure CLI reads for a storage account
# and the ones Azure's SDKs (azidentity's WorkloadIdentityCredential, and rclone through it) read
# for workload identity.
AZURE_STORAGE_ACCOUNT = "AZURE_STORAGE_ACCOUNT"
AZURE_STORAGE_KEY = "AZURE_STORAGE_KEY"
AZURE_STORAGE_SAS_TOKEN = "AZURE_STORAGE_SAS_TOKEN"
AZURE_CLIENT_ID = "AZURE_CLIENT_ID"
AZURE_TENANT_ID = "AZURE_TENANT_ID"
AZURE_FEDERATED_TOKEN_FILE = "AZURE_FEDERATED_TOKEN_FILE"
AZURE_KEYS = (
    AZURE_STORAGE_ACCOUNT,
    AZURE_STORAGE_KEY,
    AZURE_STORAGE_SAS_TOKEN,
    AZURE_CLIENT_ID,
    AZURE_TENANT_ID,
)
# Where Azure's workload-identity webhook projects the token, and the audience Entra ID expects
# (azure-workload-identity pkg/webhook/consts.go: TokenFileMountPath, TokenFilePathName,
# DefaultAudience).
AZURE_TOKEN_DIR = "/var/run/secrets/azure/tokens"
AZURE_TOKEN_PATH = f"{AZURE_TOKEN_DIR}/azure-identity-token"
AZURE_TOKEN_AUDIENCE = "api://AzureADTokenExchange"

# huggingface-credential: the access token huggingface_hub reads (utils/_auth.py, from the env).
HF_TOKEN = "HF_TOKEN"
HF_ENDPOINT = "HF_ENDPOINT"
HF_DEFAULT_ENDPOINT = "https://huggingface.co"  # huggingface_hub's own default

# Dataset loading.
LOADING_CONDITION = "Loading"
PHASE_PENDING = "Pending"
PHASE_LOADING = "Loading"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
# `gpu-admission load` exits with this when trying again cannot help (credentials, access, no
# such source, volume full); the loader Job's podFailurePolicy fails the Job at once on it.
LOADER_PERMANENT_EXIT_CODE = 10
DATA_MOUNT_PATH = "/data"
# The loader container's memory limit in bytes, from the Downward API (a resourceFieldRef).
LOADER_MEMORY_LIMIT_ENV = "LOADER_MEMORY_LIMIT"

# Idle GPUs: Kubeflow's stop annotation (notebook-controller, pkg/culler: "The value of the
# annotation will be a timestamp of when the Resource was stopped/culled", RFC 3339; the Notebook
# controller scales the Notebook's StatefulSet to 0 while it is set, back to 1 when removed).
KUBEFLOW_STOP_ANNOTATION = "kubeflow-resource-stopped"
GPU_IDLE_REASON = "GPUIdle"
GPUS_RETURNED_REASON = "GPUsReturned"
GPU_RETURN_FAILED_REASON = "GPUReturnFailed"

# Object names in the cluster.
WEBHOOK_CONFIGURATION_NAME = "gpu-admission"
LEADER_LEASE_NAME = "gpu-admission-controller"
# The controller's ClusterRole (manifests/base/rbac.yaml): the owner of the admission objects the
# controller writes, so that deleting the install deletes them.
CONTROLLER_CLUSTER_ROLE = "gpu-admission-controller"


@dataclass(frozen=True)
class Names:
    """Names under the configurable prefix (default `gpu-admission.io/`). Each is made once
    per instance (cached_property: the informers read a dozen of them for every object)."""

    prefix: str = DEFAULT_PREFIX

    def _key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    # Pods and ServiceAccounts.
    @cached_property
    def cloud_credentials(self) -> str:
        return self._key("cloud-credentials")

    @cached_property
    def inject_cloud_credentials(self) -> str:
        return self._key("inject-cloud-credentials")

    @cached_property
    def skip_containers(self) -> str:
        return self._key("skip-containers")

    @cached_property
    def gpu_app(self) -> str:
        return self._key("gpu-app")

    @cached_property
    def gpu_memory_fraction(self) -> str:
        return self._key("gpu-memory-fraction")

    @cached_property
    def gpu_sharing(self) -> str:
        return self._key("gpu-sharing")

    @cached_property
    def gpu_replicas(self) -> str:
        return self._key("gpu-replicas")

    @cached_property
    def dataset_writable(self) -> str:
        return self._key("dataset-writable")

    # PVCs.
    @cached_property
    def data_source(self) -> str:
        return self._key("data-source")

    @cached_property
    def results_omitted(self) -> str:
        """Report annotation (written): results left out of a full report, still summarised."""
        return self._key("results-omitted")

    @cached_property
    def data_credentials(self) -> str:
        return self._key("data-credentials")

    @cached_property
    def data_load_phase(self) -> str:
        return self._key("data-load-phase")

    @cached_property
    def data_load_bytes(self) -> str:
        return self._key("data-load-bytes")

    @cached_property
    def data_load_files(self) -> str:
        return self._key("data-load-files")

    @cached_property
    def data_load_duration(self) -> str:
        return self._key("data-load-duration-seconds")

    @cached_property
    def data_load_job(self) -> str:
        return self._key("data-load-job")

    @cached_property
    def data_load_sync(self) -> str:
        """PVC annotation `"true"`: mirror the source (delete files that are not in it)."""
        return self._key("data-load-sync")

    @cached_property
    def data_cache(self) -> str:
        """PVC annotation `"false"`: never clone this PVC from a snapshot, nor snapshot it."""
        return self._key("data-cache")

    @cached_property
    def data_snapshot(self) -> str:
        """Written on a loaded PVC: the VolumeSnapshot that holds its data for later PVCs."""
        return self._key("data-snapshot")

    @cached_property
    def data_cloned_from(self) -> str:
        """Written at admission on a PVC cloned from a dataset snapshot: which one."""
        return self._key("data-cloned-from")

    @cached_property
    def data_storage_class(self) -> str:
        """On a dataset snapshot: the StorageClass of the PVC it was taken from."""
        return self._key("data-storage-class")

    @cached_property
    def dataset_cache_label(self) -> str:
        """On dataset snapshots (value "true"); the webhook and controller select by it."""
        return self._key("dataset-cache")

    @cached_property
    def dataset_key_label(self) -> str:
        """On dataset snapshots: a hash of the source and the credentials they were loaded with."""
        return self._key("dataset-key")

    @cached_property
    def data_token_audience(self) -> str:
        """Written by the PVC webhook when the PVC's credentials are a keyless Google file: the
        audience of the token its loader needs (the controller reads no Secret)."""
        return self._key("data-token-audience")

    @cached_property
    def data_token_path(self) -> str:
        """Written with data-token-audience: where the file reads its subject token."""
        return self._key("data-token-path")

    @cached_property
    def data_sha256(self) -> str:
        """PVC annotation on a single-file https:// source: the file's SHA-256, checked after
        the copy."""
        return self._key("data-sha256")

    @cached_property
    def data_include(self) -> str:
        """PVC annotation on an hf:// source: comma-separated glob patterns of the files to get."""
        return self._key("data-include")

    @cached_property
    def data_commit(self) -> str:
        """Written on a loaded hf:// PVC: the commit its revision resolved to."""
        return self._key("data-commit")

    @cached_property
    def data_digest(self) -> str:
        """Written on a loaded PVC and on the snapshot kept of it: `sha256:<hex>` of the
        source's listing as the load read it (paths, sizes, versions)."""
        return self._key("data-digest")

    @cached_property
    def data_digest_files(self) -> str:
        """Written beside data-digest: how many files the listing held, and its bytes."""
        return self._key("data-digest-files")

    @cached_property
    def data_digest_bytes(self) -> str:
        return self._key("data-digest-bytes")

    @cached_property
    def data_cloned_digest(self) -> str:
        """Written by admission on a PVC cloned from a snapshot: the digest that snapshot's load
        read, which the clone's loader compares with the source's digest now."""
        return self._key("data-cloned-digest")

    @cached_property
    def data_load_retry(self) -> str:
        """PVC annotation, any new value: load the same source again (after a failure)."""
        return self._key("data-load-retry")

    @cached_property
    def data_load_parallelism(self) -> str:
        """PVC annotation `"N"`: load with N shards (an Indexed Job); ReadWriteMany PVCs only."""
        return self._key("data-load-parallelism")

    @cached_property
    def data_load_progress(self) -> str:
        """Written while a load runs: an annotation in words, and a label of the same name in
        label-safe form (`kubectl get pvc -L` shows labels only)."""
        return self._key("data-load-progress")

    # Labels.
    @cached_property
    def source_check_label(self) -> str:
        """On the Jobs of `gpu-admission audit --sources` and their pods: the audit run's id."""
        return self._key("source-check")

    @cached_property
    def data_load_label(self) -> str:
        """On dataset PVCs (value "true") and on loader Jobs; the controller selects by it."""
        return self._key("data-load")

    @cached_property
    def data_wait_label(self) -> str:
        """On pods gated for a dataset (value "true"), so the controller finds them by selector."""
        return self._key("data-wait")

    @cached_property
    def exempt_label(self) -> str:
        return self._key("exempt")

    @cached_property
    def serviceaccount_credentials_label(self) -> str:
        """On namespaces (value "true") whose ServiceAccounts may be bound to cloud credentials:
        every pod there is sent to the webhook (apiserver_policies/credential_namespaces.py)."""
        return self._key("serviceaccount-credentials")

    # Idle GPUs (docs/idle-gpus.md).
    @cached_property
    def return_idle_gpus_label(self) -> str:
        """On namespaces (value "true"): the controller gives idle workloads' GPUs back."""
        return self._key("return-idle-gpus")

    @cached_property
    def keep_idle_gpus_label(self) -> str:
        """On a workload (value "true"): it is announced when idle, never given back."""
        return self._key("keep-idle-gpus")

    @cached_property
    def replicas_before_idle(self) -> str:
        """Written on a Deployment or StatefulSet scaled to zero: its replicas before."""
        return self._key("replicas-before-idle")

    @cached_property
    def idle_announced(self) -> str:
        """Written on an idle workload with its GPUIdle Event (the time, RFC 3339); removed
        when the stretch ends (it used its GPUs, or the figures went) or it is given back."""
        return self._key("idle-gpus-announced")

    # Scheduling gate.
    @cached_property
    def data_load_gate(self) -> str:
        return self._key("data-load")
