"""What the pod policies would refuse of the pods an existing workload makes: the audit's reading
of Deployments, Jobs, JobSets, ... next to their pods.

A workload whose template breaks a policy cannot make pods (a Deployment stuck at 0/1 with a
`FailedCreate` on a ReplicaSet nobody reads), or will not the next time it makes them (a CronJob
at 3 a.m.). Each template's pod is put to every pod policy, as a CREATE: a refusal is a finding
on the workload, named by its kind. A change is not: the pods are audited themselves, and
templates are never changed. Workloads another workload owns (a Deployment's ReplicaSets, a
CronJob's or JobSet's Jobs) are left out: their owner carries the same template and the finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.admission.findings import COULD_NOT_CHECK, WOULD_REFUSE, Finding
from gpu_admission.cluster.view import ClusterView
from gpu_admission.config.policy_modes import PolicyMode
from webhooks.core.patch import Patch
from webhooks.core.pod_defaults import default_pod
from webhooks.core.workload_kinds import TemplateKind, template_pod, templates
from webhooks.offline.review import review_request
from webhooks.policies.interface import PolicySet

AUDIT_UID = "gpu-admission-audit"


def api_version(kind: TemplateKind) -> str:
    version = kind.versions[0]
    return f"{kind.group}/{version}" if kind.group else version


def owned_by_workload(
    obj: Mapping[str, Any], kinds: Mapping[tuple[str, str], TemplateKind]
) -> bool:
    """Whether a workload of a checked kind controls `obj` (and carries its template)."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if owner.get("controller"):
            group = str(owner.get("apiVersion") or "").rpartition("/")[0]
            if (group, str(owner.get("kind"))) in kinds:
                return True
    return False


def audit_workload(
    obj: Mapping[str, Any],
    kind: TemplateKind,
    policies: PolicySet,
    view: ClusterView,
    modes: Mapping[str, PolicyMode] | None = None,
) -> list[Finding]:
    """Every pod policy's refusal of a pod of `obj`'s templates, one finding per policy."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    uid = str(meta.get("uid") or "")
    relaxed = modes or {}
    refusals: dict[str, list[str]] = {}
    failures: dict[str, str] = {}
    for template in templates(obj, kind):
        where = f" ({template.where})" if template.where else ""
        pod = default_pod(template_pod(template.template, namespace))
        for policy in (*policies.mutating_for("Pod"), *policies.validating_for("Pod")):
            # A copy each (default_pod copies): a mutating policy changes what it is given.
            request = review_request(default_pod(pod), "Pod", namespace, AUDIT_UID)
            if not policy.scope.matches(request):
                continue
            try:
                if hasattr(policy, "mutate"):
                    verdict = policy.mutate(request, Patch(request.object), view)
                else:
                    verdict = policy.validate(request, view)
            except Exception as error:  # a policy bug must not end the audit; it is reported
                failures[policy.name] = f"{type(error).__name__}: {error}"
                continue
            if verdict is not None and not verdict.allowed:
                refusals.setdefault(policy.name, []).append(
                    f"its pods would be refused{where}: {verdict.message}"
                )
    findings = [
        Finding(
            policy,
            WOULD_REFUSE,
            kind.kind,
            namespace,
            name,
            "; ".join(messages),
            str(relaxed.get(policy, PolicyMode.ENFORCE)),
            uid,
            api_version(kind),
        )
        for policy, messages in refusals.items()
    ]
    findings += [
        Finding(
            policy,
            COULD_NOT_CHECK,
            kind.kind,
            namespace,
            name,
            message,
            str(relaxed.get(policy, PolicyMode.ENFORCE)),
            uid,
            api_version(kind),
        )
        for policy, message in failures.items()
    ]
    return findings
