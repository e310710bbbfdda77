"""Mutating policy: give pods the cloud credentials they ask for, by reference only.

A pod asks with the `cloud-credentials` annotation (comma-separated Secret names); its
ServiceAccount can carry the same annotation for all its pods, unless the pod says
`inject-cloud-credentials: "false"` (which drops the ServiceAccount's, never the pod's own).

- `gcp-credential`: a read-only secret volume mounted at /var/run/secrets/gcp/<secret> in every
  init and regular container, and GOOGLE_APPLICATION_CREDENTIALS pointing at its key.json. A
  keyless file (workload identity federation, `credential_source.file`) also gets the pod a
  projected ServiceAccount token at exactly that path, with the provider's audience
  (gpu_admission.keyless).
- `aws-credential`: one env var per key the Secret holds, each a `secretKeyRef`; AWS_REGION is
  also exported as AWS_DEFAULT_REGION, which older SDKs read. A keyless Secret (AWS_ROLE_ARN,
  no keys) also gets the pod a projected ServiceAccount token (audience
  `credentials.aws_token_audience`, default sts.amazonaws.com) mounted read-only at
  /var/run/secrets/sts.amazonaws.com/serviceaccount/token, and AWS_WEB_IDENTITY_TOKEN_FILE
  pointing at it: every AWS SDK then assumes the role with that token and refreshes from the
  file, which the kubelet rewrites before it expires.
- `azure-credential`: one env var per key the Secret holds, each a `secretKeyRef` (the Azure
  CLI's storage names, and azidentity's AZURE_CLIENT_ID / AZURE_TENANT_ID). A keyless Secret
  also gets the workload-identity token at /var/run/secrets/azure/tokens/azure-identity-token
  (audience api://AzureADTokenExchange) and AZURE_FEDERATED_TOKEN_FILE, where Azure's SDKs
  read it (webhooks.policies.credential_tokens).
- `huggingface-credential`: HF_TOKEN as a `secretKeyRef`, which huggingface_hub (and
  transformers, datasets, vLLM through it) reads.

A container that already sets one of these variables keeps its own value, with a warning.
Containers named in the `skip-containers` annotation get nothing. Ephemeral containers do not
exist at CREATE and are left alone. Secret values are never read: the view holds key names only.

Cache misses: `references` names the ServiceAccount and the Secrets the pod names. Secrets named
by the ServiceAccount can only be known once the ServiceAccount is, so `references(request,
view)` also names those that the view's ServiceAccount lists; an edge that resolves in two rounds
calls it again with the view after the first round. Credential-typed Secrets are in the informer
cache anyway; the second round matters for a Secret created moments before the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_admission.cluster.view import ClusterView, ObjectRef, SecretInfo
from gpu_admission.config.model import Config
from gpu_admission.names import (
    AWS_CREDENTIAL_TYPE,
    AWS_DEFAULT_REGION,
    AWS_OPTIONAL_KEYS,
    AWS_REGION,
    AWS_REQUIRED_KEYS,
    AWS_ROLE_ARN,
    AWS_ROLE_SESSION_NAME,
    AZURE_CREDENTIAL_TYPE,
    AZURE_KEYS,
    AZURE_STORAGE_ACCOUNT,
    CREDENTIAL_TYPES,
    GCP_CREDENTIAL_TYPE,
    GCP_KEY_FILE,
    GCP_MOUNT_ROOT,
    GOOGLE_APPLICATION_CREDENTIALS,
    HF_TOKEN,
    HUGGINGFACE_CREDENTIAL_TYPE,
    Names,
)
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.credentials.aws import is_keyless
from webhooks.credentials.azure import is_keyless as is_azure_keyless
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.credential_tokens import (
    TokenSettings,
    azure_token_env,
    inject_aws_token,
    inject_azure_token,
    inject_gcp_token,
    mounts_at,
    volume_name,
    web_identity_env,
)
from webhooks.policies.interface import MutatingPolicy, Scope

POLICY_NAME = "cloud-credentials"
SCOPE = Scope("Pod")  # CREATE of the pod itself
INJECTED_LISTS = ("initContainers", "containers")
DEFAULT_SERVICE_ACCOUNT = "default"
AWS_KEYS = (*AWS_REQUIRED_KEYS, *AWS_OPTIONAL_KEYS, AWS_ROLE_ARN, AWS_ROLE_SESSION_NAME)


def parse_names(value: str | None) -> list[str]:
    """`"a, b,,a "` -> `["a", "b"]`: comma-separated, whitespace tolerated, duplicates collapsed."""
    names: dict[str, None] = {}
    for part in (value or "").split(","):
        if part.strip():
            names[part.strip()] = None
    return list(names)


def service_account_name(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return spec.get("serviceAccountName") or spec.get("serviceAccount") or DEFAULT_SERVICE_ACCOUNT


@dataclass(frozen=True, slots=True)
class Requested:
    """A Secret the pod will get, and who asked for it (for messages)."""

    name: str
    source: str


def _opted_out(annotations: Mapping[str, str], names: Names) -> bool:
    return annotations.get(names.inject_cloud_credentials, "").strip().lower() == "false"


def _requested(
    request: AdmissionRequest, view: ClusterView, names: Names
) -> tuple[list[Requested], list[str]]:
    """The Secrets asked for, pod's own first, and warnings."""
    annotations = request.annotations
    requested = [
        Requested(name, f"the pod annotation {names.cloud_credentials}")
        for name in parse_names(annotations.get(names.cloud_credentials))
    ]
    if _opted_out(annotations, names):
        return requested, []
    sa_name = service_account_name(request.object)
    account = view.service_account(request.namespace, sa_name)
    bound = parse_names(account.annotations.get(names.cloud_credentials)) if account else []
    warnings = []
    opt_out = annotations.get(names.inject_cloud_credentials)
    if bound and opt_out is not None and opt_out.strip().lower() not in ("true", "false"):
        # Said only where it matters: the ServiceAccount has credentials to add or not.
        warnings.append(
            f'{names.inject_cloud_credentials} must be "true" or "false"; '
            "the ServiceAccount's credentials were added"
        )
    seen = {r.name for r in requested}
    for name in bound:
        if name not in seen:
            requested.append(Requested(name, f'ServiceAccount "{sa_name}"'))
    return requested, warnings


def _problems(
    requested: list[Requested], secrets: Mapping[str, SecretInfo | None], namespace: str
) -> list[str]:
    """Why the request cannot be honoured, one entry per Secret or conflict."""
    types = ", ".join(CREDENTIAL_TYPES[:-1]) + " or " + CREDENTIAL_TYPES[-1]
    problems = []
    by_type: dict[str, list[Requested]] = {}
    for item in requested:
        info = secrets[item.name]
        named = f'Secret "{item.name}" (named by {item.source})'
        if info is None:
            problems.append(
                f'{named} does not exist in namespace "{namespace}"; create it with type '
                f"{types}, or remove the name"
            )
        elif info.type not in CREDENTIAL_TYPES:
            problems.append(
                f"{named} has type {info.type}; cloud credentials must be of type {types}"
            )
        else:
            by_type.setdefault(info.type, []).append(item)
            missing = _missing_keys(info)
            if missing:
                problems.append(
                    f"{named} lacks {', '.join(missing)}; recreate it as the documentation shows"
                )
    for secret_type, items in by_type.items():
        if len(items) > 1:
            listed = " and ".join(f'"{i.name}" (named by {i.source})' for i in items)
            problems.append(
                f"Secrets {listed} are all of type {secret_type}, which is ambiguous (they "
                "would set the same environment variables and token file); "
                "a pod can use one Secret of each type: name only one"
            )
    return problems


def _missing_keys(info: SecretInfo) -> list[str]:
    if info.type == AWS_CREDENTIAL_TYPE and is_keyless(info.keys):
        return []
    if info.type == AZURE_CREDENTIAL_TYPE:
        # The admission of the Secret checked its form; here only what the pod cannot do without.
        return [] if AZURE_STORAGE_ACCOUNT in info.keys else [AZURE_STORAGE_ACCOUNT]
    if info.type == HUGGINGFACE_CREDENTIAL_TYPE:
        return [] if HF_TOKEN in info.keys else [HF_TOKEN]
    needed = (GCP_KEY_FILE,) if info.type == GCP_CREDENTIAL_TYPE else AWS_REQUIRED_KEYS
    return [key for key in needed if key not in info.keys]


# -- gcp-credential --------------------------------------------------------------------------


def _is_volume_of(volume: Mapping[str, Any], secret: str) -> bool:
    """A plain volume of the whole Secret (any name): ours from an earlier run, or the user's."""
    source = volume.get("secret")
    return (
        isinstance(source, Mapping)
        and source.get("secretName") == secret
        and not source.get("items")
        and source.get("defaultMode", 0o644) == 0o644  # 420, what the API server defaults to
    )


def _existing_volume(pod: Mapping[str, Any], secret: str) -> str | None:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if _is_volume_of(volume, secret):
            return str(volume["name"])
    return None


def _add_volume(patch: Patch, secret: str) -> str:
    volumes = (patch.obj.get("spec") or {}).get("volumes") or []
    name = volume_name(secret, (v.get("name", "") for v in volumes))
    patch.append("/spec/volumes", {"name": name, "secret": {"secretName": secret}})
    return name


def _env_state(ref: ContainerRef, entry: Mapping[str, Any]) -> str:
    """ "absent": add it; "ours": already exactly so; "theirs": the container set its own."""
    existing = ref.env_entries(entry["name"])
    if not existing:
        return "absent"
    return "ours" if all(item == entry for item in existing) else "theirs"


def _inject_gcp(patch: Patch, secret: str, containers: list[ContainerRef]) -> None:
    mount_path = f"{GCP_MOUNT_ROOT}/{secret}"
    env = {"name": GOOGLE_APPLICATION_CREDENTIALS, "value": f"{mount_path}/{GCP_KEY_FILE}"}
    volume = _existing_volume(patch.obj, secret)
    for ref in containers:
        at_path = mounts_at(ref, mount_path)
        if not at_path:
            if volume is None:
                volume = _add_volume(patch, secret)
            patch.append(
                f"{ref.path}/volumeMounts",
                {"name": volume, "mountPath": mount_path, "readOnly": True},
            )
        elif volume is None or all(m.get("name") != volume for m in at_path):
            patch.warn(
                f"{ref.describe} already mounts another volume at {mount_path}; "
                f'Secret "{secret}" was not added to it'
            )
            continue
        state = _env_state(ref, env)
        if state == "absent":
            patch.append(f"{ref.path}/env", env)
        elif state == "theirs":
            patch.warn(
                f"{ref.describe} sets its own {GOOGLE_APPLICATION_CREDENTIALS}; kept it "
                f'(Secret "{secret}" is mounted at {mount_path})'
            )


# -- aws-credential --------------------------------------------------------------------------


def aws_env(info: SecretInfo) -> list[dict[str, Any]]:
    """The env entries for an aws-credential Secret: a secretKeyRef per known key it holds."""
    entries = []
    for key in AWS_KEYS:
        if key not in info.keys:
            continue
        names = (key, AWS_DEFAULT_REGION) if key == AWS_REGION else (key,)
        for name in names:
            entries.append(
                {"name": name, "valueFrom": {"secretKeyRef": {"name": info.name, "key": key}}}
            )
    return entries


def _inject_aws(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], settings: TokenSettings
) -> None:
    entries = aws_env(info)
    if is_keyless(info.keys):
        entries.append(web_identity_env())
        if not inject_aws_token(patch, info, containers, settings):
            return
    _inject_env(patch, info, containers, entries)


# -- azure-credential ------------------------------------------------------------------------


def azure_env(info: SecretInfo) -> list[dict[str, Any]]:
    """The env entries for an azure-credential Secret: a secretKeyRef per known key it holds."""
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": info.name, "key": key}}}
        for key in AZURE_KEYS
        if key in info.keys
    ]


def _inject_env(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], entries: list[dict[str, Any]]
) -> None:
    for ref in containers:
        kept = []
        for entry in entries:
            state = _env_state(ref, entry)
            if state == "absent":
                patch.append(f"{ref.path}/env", entry)
            elif state == "theirs":
                kept.append(entry["name"])
        if kept:
            patch.warn(
                f"{ref.describe} sets its own {', '.join(kept)}; kept "
                f'{"it" if len(kept) == 1 else "them"} instead of Secret "{info.name}"'
            )


def _inject_azure(
    patch: Patch, info: SecretInfo, containers: list[ContainerRef], settings: TokenSettings
) -> None:
    entries = azure_env(info)
    if is_azure_keyless(info.keys):
        entries.append(azure_token_env())
        if not inject_azure_token(patch, info, containers, settings.expiration_seconds):
            return
    _inject_env(patch, info, containers, entries)


# -- the policy ------------------------------------------------------------------------------


def _containers(pod: Mapping[str, Any], skipped: set[str]) -> list[ContainerRef]:
    return [ref for ref in iter_containers(pod, INJECTED_LISTS) if ref.name not in skipped]


def make_policy(names: Names, settings: TokenSettings) -> MutatingPolicy:
    def references(request: AdmissionRequest, view: ClusterView | None = None) -> list[ObjectRef]:
        namespace = request.namespace
        annotations = request.annotations
        refs = [
            ObjectRef("Secret", namespace, name)
            for name in parse_names(annotations.get(names.cloud_credentials))
        ]
        if _opted_out(annotations, names):
            return refs
        sa_name = service_account_name(request.object)
        refs.insert(0, ObjectRef("ServiceAccount", namespace, sa_name))
        account = view.service_account(namespace, sa_name) if view is not None else None
        if account is not None:
            known = set(refs)
            for name in parse_names(account.annotations.get(names.cloud_credentials)):
                ref = ObjectRef("Secret", namespace, name)
                if ref not in known:
                    refs.append(ref)
        return refs

    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict | None:
        requested, warnings = _requested(request, view, names)
        for warning in warnings:
            patch.warn(warning)
        if not requested:
            return None
        secrets = {item.name: view.secret(request.namespace, item.name) for item in requested}
        problems = _problems(requested, secrets, request.namespace)
        if problems:
            return Verdict.deny("cloud credentials cannot be added: " + "; ".join(problems) + ".")
        skipped = set(parse_names(request.annotations.get(names.skip_containers)))
        containers = _containers(request.object, skipped)
        unknown = sorted(skipped - {ref.name for ref in iter_containers(request.object)})
        if unknown:
            patch.warn(
                f"{names.skip_containers} names {', '.join(unknown)}, not containers of this pod"
            )
        if not containers:
            return None
        for item in requested:
            info = secrets[item.name]
            assert info is not None  # checked by _problems
            if info.type == GCP_CREDENTIAL_TYPE:
                _inject_gcp(patch, info.name, containers)
                if info.token is not None:
                    inject_gcp_token(patch, info, containers, settings.expiration_seconds)
            elif info.type == AWS_CREDENTIAL_TYPE:
                _inject_aws(patch, info, containers, settings)
            elif info.type == AZURE_CREDENTIAL_TYPE:
                _inject_azure(patch, info, containers, settings)
            elif info.type == HUGGINGFACE_CREDENTIAL_TYPE:
                token = {"secretKeyRef": {"name": info.name, "key": HF_TOKEN}}
                _inject_env(patch, info, containers, [{"name": HF_TOKEN, "valueFrom": token}])
        return None

    return MutatingPolicy(POLICY_NAME, SCOPE, mutate, references)


def policies(config: Config) -> list[MutatingPolicy]:
    credentials = config.credentials
    settings = TokenSettings(credentials.aws_token_audience, credentials.token_expiration_seconds)
    return [make_policy(config.names, settings)]
