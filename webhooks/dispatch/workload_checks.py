"""Workloads judged by their pod templates: every pod policy, run on the pods a workload's
controller would make, as a validating policy of the workloads webhook.

Each pod policy gets a workload twin of the same name, so it keeps its mode (enforce, warn,
audit), its metrics and its failure handling (`chain.run_validating`). What a twin says:

- A refusal that needs nothing but the template (the stateless checks: `policy_denial`, the
  ValidatingAdmissionPolicy's own reading) would meet every pod, so the workload is refused, in
  the pod's words, after the workload's name. Where the policy `gpu-admission-workloads` carries
  these checks (`workloads.pod_checks: policy`, the default manifests), the API server refuses
  before this webhook is called, and the twin leaves them to it.
- A refusal that depends on cluster state (a Secret not there yet, a DRA claim, the nodes'
  labels) may not meet the pods, which are made later: it is a warning on the workload, naming
  what is missing (an audit-mode policy records it instead).
- An UPDATE that leaves every template as it was is never judged: scaling, labelling, or the
  controllers' own writes to a workload made before the install always pass.

Templates are never changed: the pods get the changes when they are made, so what a GitOps tool
applied is what the cluster keeps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from gpu_admission.config.workloads import PodChecksIn
from webhooks.apiserver_policies.pod_checks import POD_CHECKS, policy_denial
from webhooks.core.patch import Patch
from webhooks.core.pod_defaults import default_pod
from webhooks.core.review import WORKLOAD, AdmissionRequest, Verdict
from webhooks.core.workload_kinds import (
    Template,
    TemplateKind,
    kind_index,
    template_pod,
    templates,
    workload_label,
)
from webhooks.policies.interface import MutatingPolicy, PolicySet, Scope, ValidatingPolicy

# Said before a refusal the pods would get as the cluster is now, which may change before they
# are made: a warning on the workload, not a refusal.
STATE_DEPENDENT = "its pods would be refused as the cluster is now"
WORKLOAD_SCOPE = Scope(WORKLOAD, operations=frozenset({"CREATE", "UPDATE"}))
# The pod's own verdict on one template: (refusal or None, warnings).
PodJudge = Callable[[AdmissionRequest, ClusterView], tuple[str | None, tuple[str, ...]]]


def _applies_to_new_pods(scope: Scope) -> bool:
    return scope.kind == "Pod" and "CREATE" in scope.operations and "" in scope.subresources


def pod_request(workload: AdmissionRequest, pod: dict[str, Any]) -> AdmissionRequest:
    """The CREATE of one of the workload's pods, as the API server would send it."""
    return AdmissionRequest(
        uid=workload.uid,
        kind="Pod",
        resource="pods",
        sub_resource="",
        operation="CREATE",
        namespace=workload.namespace,
        name="",
        object=pod,
        old_object=None,
        dry_run=True,
        username=workload.username,
    )


def _templates_changed(request: AdmissionRequest, kind: TemplateKind) -> bool:
    if request.operation != "UPDATE" or request.old_object is None:
        return True
    return templates(request.object, kind) != templates(request.old_object, kind)


class WorkloadReader:
    """The pods a workload request would lead to, or none when there is nothing to judge. Every
    twin asks for the same request in turn: the last answer is kept (the pods are only read)."""

    def __init__(self, config: Config) -> None:
        self.kinds = kind_index(config)
        self._last: tuple[AdmissionRequest, list[tuple[Template, AdmissionRequest]]] | None = None

    def pods(self, request: AdmissionRequest) -> list[tuple[Template, AdmissionRequest]]:
        if self._last is not None and self._last[0] is request:
            return self._last[1]
        kind = self.kinds.get((request.group, request.object_kind))
        made = []
        if kind is not None and _templates_changed(request, kind):
            made = [
                (t, pod_request(request, default_pod(template_pod(t.template, request.namespace))))
                for t in templates(request.object, kind)
            ]
        self._last = (request, made)
        return made


def _mutating_judge(policy: MutatingPolicy) -> PodJudge:
    def judge(pod: AdmissionRequest, view: ClusterView) -> tuple[str | None, tuple[str, ...]]:
        # On a copy: a template is never changed, and the next policy must see it as written.
        trial = copy.copy(pod)
        trial.object = copy.deepcopy(pod.object)
        verdict = policy.mutate(trial, Patch(trial.object), view)
        return (None if verdict is None or verdict.allowed else verdict.message), ()

    return judge


def _validating_judge(policy: ValidatingPolicy) -> PodJudge:
    def judge(pod: AdmissionRequest, view: ClusterView) -> tuple[str | None, tuple[str, ...]]:
        verdict = policy.validate(pod, view)
        return (None if verdict.allowed else verdict.message), verdict.warnings

    return judge


def _where(template: Template) -> str:
    return f" ({template.where})" if template.where else ""


def workload_twin(
    name: str,
    judge: PodJudge,
    references: Callable[[AdmissionRequest, ClusterView | None], Iterable[ObjectRef]],
    reader: WorkloadReader,
    config: Config,
) -> ValidatingPolicy:
    mode = config.mode_of(name)
    stateless_here = name in POD_CHECKS and config.workloads.pod_checks is PodChecksIn.WEBHOOK

    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        label = workload_label(request.object_kind, request.name, request.object)
        certain: list[str] = []
        depends: list[str] = []
        warnings: list[str] = []
        for template, pod in reader.pods(request):
            refusal, said = judge(pod, view)
            warnings.extend(f"{label}{_where(template)}: {w}" for w in said)
            if refusal is None:
                continue
            if name in POD_CHECKS and policy_denial(pod.object, config, (name,)) is not None:
                if stateless_here:
                    certain.append(refusal)
                # else the ValidatingAdmissionPolicy refuses the workload in the same words
            else:
                depends.append(f"{label}{_where(template)}: {STATE_DEPENDENT}: {refusal}")
        if certain:
            return Verdict.deny(f"{label}: " + "; ".join(certain))
        if depends and mode is PolicyMode.AUDIT:
            return Verdict.deny("; ".join(depends))  # recorded, never refused, by the chain
        return Verdict.allow(*warnings, *depends)

    def referenced(request: AdmissionRequest, view: ClusterView | None) -> Iterable[ObjectRef]:
        for _, pod in reader.pods(request):
            yield from references(pod, view)

    return ValidatingPolicy(name, WORKLOAD_SCOPE, validate, references=referenced)


def workload_policies(config: Config, pods: PolicySet) -> list[ValidatingPolicy]:
    """A workload twin of every pod policy that judges new pods, in the order they run."""
    reader = WorkloadReader(config)
    twins = []
    for mutating in pods.mutating:
        if _applies_to_new_pods(mutating.scope):
            judge = _mutating_judge(mutating)
            twins.append(workload_twin(mutating.name, judge, mutating.references, reader, config))
    for validating in pods.validating:
        if _applies_to_new_pods(validating.scope):
            judge = _validating_judge(validating)
            twins.append(
                workload_twin(validating.name, judge, validating.references, reader, config)
            )
    return twins
