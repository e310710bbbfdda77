"""Admission offline: the chain of mutating and validating policies run over one manifest as
the API server would run it on CREATE, with no cluster call. What `gpu-admission review` runs.

A Pod is first defaulted as the API server defaults it (`pod_defaults`); the stateless pod checks
run as the default manifests install them (the ValidatingAdmissionPolicy, then the validating
webhook for pods with DRA claims) or as the webhook-for-every-pod overlay does; Secrets have
`stringData` merged into `data` first.

A workload (Deployment, Job, JobSet, ...) is admitted as the API server admits it: its templates
judged by the workload policy (or the workloads webhook) and the pod policies' twins, where what
depends on cluster state is a warning (`workload_checks`). What is printed is then each
template as its pods will get it: the cluster never changes a template, the pods get the changes.
"""

from __future__ import annotations

import base64
import copy
import uuid
from typing import Any, cast

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.apiserver_policies.bindings import (
    failed_policies,
    workload_check_policies,
)
from webhooks.apiserver_policies.webhook_routing import mutating_webhook_sees, webhook_sees
from webhooks.apiserver_policies.workload_templates import workload_denial
from webhooks.core.pod_defaults import default_pod
from webhooks.core.review import WORKLOAD, AdmissionRequest
from webhooks.core.workload_kinds import (
    TemplateKind,
    kind_index,
    template_pod,
    template_shape_error,
    templates,
)
from webhooks.dispatch import chain
from webhooks.dispatch.registry import webhook_for
from webhooks.offline.apiserver import (
    admit_service_account,
    policy_failed,
    unseen_binding,
    visibility_policy,
)
from webhooks.offline.state import ClusterState, Document, Result
from webhooks.policies.interface import PolicySet

# Dynamic Resource Allocation objects: read as cluster state by the pods that name them.
CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})


# Where the stateless pod checks run: the ValidatingAdmissionPolicy of the default manifests
# (Kubernetes 1.30+), or the validating webhook for every pod (the webhook-pod-checks overlay).
POD_CHECKS_POLICY, POD_CHECKS_WEBHOOK = "policy", "webhook"
# Where the stateless pod changes are made: the MutatingAdmissionPolicy of the default manifests,
# with the mutating webhook only for the pods that need cluster state (Kubernetes 1.36+), or the
# mutating webhook for every pod (the webhook-pod-mutations overlay, and webhook-pod-checks).
POD_MUTATIONS_POLICY, POD_MUTATIONS_WEBHOOK = "policy", "webhook"

REVIEWED_KINDS = {"Pod", "Secret", "PersistentVolumeClaim"}


def _webhook_path(kind: str) -> str:
    """The validating webhook path for `kind`, as the service routes it."""
    webhook = webhook_for(kind, mutating=False)
    assert webhook is not None, kind
    return webhook.path


def _group(obj: dict[str, Any]) -> str:
    """The API group of `obj`'s apiVersion ("" for the core group)."""
    api_version = str(obj.get("apiVersion") or "")
    return api_version.rpartition("/")[0]


# -- running the chain -----------------------------------------------------------------------


def merged_string_data(secret: dict[str, Any]) -> dict[str, Any]:
    """`secret` (changed in place) as webhooks see it: the API server turns stringData into
    base64 data first."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {}) or {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data
    return secret


def review_request(
    obj: dict[str, Any], kind: str, namespace: str, uid: str | None = None
) -> AdmissionRequest:
    """A dry-run CREATE of `obj`, as the API server sends it to the webhooks (a fresh uid
    unless one is given)."""
    meta = obj.get("metadata") or {}
    return AdmissionRequest(
        uid=uid or str(uuid.uuid4()),
        kind=kind,
        resource={"Pod": "pods", "Secret": "secrets"}.get(kind, "persistentvolumeclaims"),
        sub_resource="",
        operation="CREATE",
        namespace=namespace,
        name=meta.get("name", ""),
        object=obj,
        old_object=None,
        dry_run=True,
    )


async def _admit(
    obj: dict[str, Any],
    kind: str,
    namespace: str,
    policies: PolicySet,
    state: ClusterState,
    config: Config,
    result: Result,
    pod_checks: str,
    changes_only: bool = False,
    pod_mutations: str = POD_MUTATIONS_POLICY,
) -> dict[str, Any]:
    """Mutating then validating, as the API server runs them; returns the admitted object.
    `changes_only`: the mutating policies alone, their refusals left out (a template's
    preview: the workload's own review has said all there is to say)."""
    routed = True  # the mutating webhook is called
    if kind == "Pod":
        obj = default_pod(obj)
    received, counted = copy.deepcopy(obj), result.changes
    if kind == "Pod" and pod_mutations == POD_MUTATIONS_POLICY:
        # As installed on 1.36+: the MutatingAdmissionPolicy, then the mutating webhook for
        # the pods that need cluster state only.
        obj = visibility_policy(obj, config, result)
        labelled = namespace in state.credential_namespaces
        routed = mutating_webhook_sees(obj, "CREATE", labelled, config)
        if not routed:
            unseen_binding(obj, namespace, state, config, result)
    original = copy.deepcopy(obj)
    modes = config.relaxed_modes()
    for mutating in (True,) if changes_only else (True, False):
        webhook = webhook_for(kind, mutating)
        if webhook is None or (mutating and not routed):
            continue
        if kind == "Pod" and not mutating and pod_checks == POD_CHECKS_POLICY:
            # As installed on 1.30+: the ValidatingAdmissionPolicy first, then the validating
            # webhook for pods with DRA claims only.
            for policy, message in failed_policies(obj, config):
                policy_failed(result, policy, message)
            if not result.allowed:
                return obj
            if not webhook_sees(obj, config.gpu):
                continue
        request = review_request(obj, kind, namespace)
        selected = policies.mutating_for(kind) if mutating else policies.validating_for(kind)
        if state.resolver is not None:
            await chain.resolve_references(request, selected, state.view, state.resolver)
        if mutating:
            outcome = chain.run_mutating(
                request,
                selected,  # type: ignore[arg-type]
                state.view,
                config.failure_mode(webhook.path),
                lambda: copy.deepcopy(original),
                modes,
            )
            obj = request.object
            result.changes += len(outcome.ops)
        else:
            outcome = chain.run_validating(
                request,
                selected,  # type: ignore[arg-type]
                state.view,
                config.failure_mode(webhook.path),
                modes,
            )
        if changes_only and not outcome.allowed:
            # Its pods would be refused: no change of theirs to show, the policy's neither.
            result.changes = counted
            return received
        if not _webhook_answered(result, outcome, modes):
            return obj
    return obj


def _webhook_answered(result: Result, outcome: chain.Outcome, modes: dict[str, PolicyMode]) -> bool:
    """A webhook's answer taken into `result`; whether it admitted."""
    result.warnings.extend(outcome.warnings)
    # Warn-mode findings are in the warnings already; a record the in-process policy made in the
    # same words is said once.
    result.recorded.extend(
        line
        for name, would in outcome.audit_annotations.items()
        if modes[name] is PolicyMode.AUDIT
        and (line := f"{name} (audit): {would}") not in result.recorded
    )
    if not outcome.allowed:
        result.allowed = False
        result.denials.append(outcome.message)
    return outcome.allowed


def _workload_request(obj: dict[str, Any], kind: TemplateKind, namespace: str) -> AdmissionRequest:
    request = review_request(obj, WORKLOAD, namespace)
    request.resource, request.group, request.object_kind = kind.resource, kind.group, kind.kind
    return request


async def _admit_workload(
    obj: dict[str, Any],
    kind: TemplateKind,
    namespace: str,
    policies: PolicySet,
    state: ClusterState,
    config: Config,
    result: Result,
    pod_checks: str,
) -> None:
    """The workload's CREATE as the API server judges it: the workload policy (as installed on
    1.30+), then the workloads webhook. A template no pod could be made of (a field of the wrong
    shape) is refused first, as the webhook refuses it."""
    problem = template_shape_error(_workload_request(obj, kind, namespace), {kind.key: kind})
    if problem is not None:
        result.allowed = False
        result.denials.append(f"not a valid {kind.kind}: {problem.removeprefix('request.object.')}")
        return
    if pod_checks == POD_CHECKS_POLICY:
        for policy in workload_check_policies(config):
            message = workload_denial(obj, kind, config, policy.checks)
            if message is not None:
                policy_failed(result, policy, message)
        if not result.allowed:
            return
    request = _workload_request(obj, kind, namespace)
    selected = policies.validating_for(WORKLOAD)
    if state.resolver is not None:
        await chain.resolve_references(request, selected, state.view, state.resolver)
    modes = config.relaxed_modes()
    outcome = chain.run_validating(
        request, selected, state.view, config.failure_mode(_webhook_path(WORKLOAD)), modes
    )
    _webhook_answered(result, outcome, modes)


async def review_document(
    document: Document,
    policies: PolicySet,
    state: ClusterState,
    config: Config,
    pod_checks: str = POD_CHECKS_POLICY,
    pod_mutations: str = POD_MUTATIONS_POLICY,
) -> Result:
    """`pod_checks`, `pod_mutations`: what the cluster's install runs in the API server
    (`policy`, the base manifests) or in the webhooks (`webhook`, the overlays)."""
    obj = copy.deepcopy(document.obj)
    result = Result(Document(document.source, obj))
    kind = obj.get("kind")
    meta = obj.setdefault("metadata", {}) or {}
    namespace = meta.get("namespace") or "default"
    if kind in CLAIM_KINDS:
        result.skipped = "not reviewed; read as cluster state by the pods that use it"
        return result
    workload = kind_index(config).get((_group(obj), str(kind)))
    guarded = kind == "ServiceAccount" and pod_mutations == POD_MUTATIONS_POLICY
    if kind not in REVIEWED_KINDS and workload is None and not guarded:
        result.skipped = "no gpu-admission webhook reviews this kind"
        return result
    if namespace in state.exempt_namespaces:
        result.skipped = f"namespace {namespace} is exempt"
        return result
    if kind == "Secret":
        merged_string_data(obj)
    if guarded:
        admit_service_account(obj, namespace, state, config, result)
    elif workload is not None:
        await _admit_workload(obj, workload, namespace, policies, state, config, result, pod_checks)
        if not result.allowed:
            return result
        for template in templates(obj, workload):
            pod = template_pod(template.template, namespace)
            pod["metadata"].pop("generateName")
            admitted = await _admit(
                pod,
                "Pod",
                namespace,
                policies,
                state,
                config,
                result,
                pod_checks,
                True,
                pod_mutations,
            )
            changed = dict(admitted.get("metadata") or {})
            changed.pop("namespace", None)
            if "namespace" in (template.template.get("metadata") or {}):
                changed["namespace"] = namespace
            held = cast(dict[str, Any], template.template)  # the template inside `obj`
            held.clear()
            held.update(metadata=changed, spec=admitted.get("spec"))
    else:
        result.document.obj = await _admit(
            obj,
            kind,
            namespace,
            policies,
            state,
            config,
            result,
            pod_checks,
            False,
            pod_mutations,
        )
    return result
