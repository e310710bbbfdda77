"""The `workloads` configuration section: which kinds hold pod templates, and where the stateless
pod checks judge them."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from gpu_admission.config.base import _Model

# A template path: dotted field names; `[]` after a name takes every item of a list, `.*` every
# value of a map: `spec.replicatedJobs[].template.spec.template`,
# `spec.pytorchReplicaSpecs.*.template`.
_PATH_STEP = r"(\*|[A-Za-z_][A-Za-z0-9_]*(\[\])?)"
TEMPLATE_PATH = re.compile(rf"{_PATH_STEP}(\.{_PATH_STEP})*")
_RESOURCE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_GROUP = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class PodChecksIn(StrEnum):
    """Where the stateless pod checks (gpu-env-guard, shared-gpu-limit) judge workloads."""

    POLICY = "policy"  # the ValidatingAdmissionPolicy of the default manifests (Kubernetes 1.30+)
    WEBHOOK = "webhook"  # the workloads webhook (the webhook-pod-checks overlay)


class WorkloadKind(_Model):
    group: str
    """The API group, e.g. kubeflow.org ("" for the core group)."""
    versions: Annotated[list[str], Field(min_length=1)]
    """The versions to check, e.g. [v1]."""
    kind: str
    """The kind, e.g. PyTorchJob."""
    resource: str
    """The resource (plural, lower case), e.g. pytorchjobs."""
    template_paths: Annotated[list[str], Field(min_length=1)]
    """Where its pod templates are: dotted fields, `[]` for every item of a list, `*` for every
    value of a map, e.g. spec.pytorchReplicaSpecs.*.template."""

    @field_validator("template_paths")
    @classmethod
    def _paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not TEMPLATE_PATH.fullmatch(path):
                raise ValueError(
                    f"{path!r} is not a template path: write dotted field names, with [] after "
                    "a list field and * for every value of a map, like "
                    "spec.replicatedJobs[].template.spec.template"
                )
        return paths

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str) -> str:
        if not _RESOURCE.fullmatch(value):
            raise ValueError("must be the lower-case plural resource name, like pytorchjobs")
        return value

    @field_validator("group")
    @classmethod
    def _group(cls, value: str) -> str:
        if value and not _GROUP.fullmatch(value):
            raise ValueError("must be an API group, like kubeflow.org")
        return value


class WorkloadsConfig(_Model):
    pod_checks: PodChecksIn = PodChecksIn.POLICY
    """Where the stateless pod checks judge workload templates: policy (the
    ValidatingAdmissionPolicy gpu-admission-workloads, Kubernetes 1.30+) or webhook (the
    webhook-pod-checks overlay sets this, for older API servers). The workloads webhook always
    warns of what depends on cluster state."""
    extra_kinds: list[WorkloadKind] = Field(default_factory=list)
    """More kinds with pod templates, checked like Deployments (see docs/workloads.md); add
    each to the workloads webhook's rules and regenerate the policy."""

    @model_validator(mode="after")
    def _distinct(self) -> WorkloadsConfig:
        seen: set[tuple[str, str]] = set()
        for extra in self.extra_kinds:
            key = (extra.group, extra.kind)
            if key in seen:
                raise ValueError(f"extra_kinds names {extra.kind}.{extra.group} twice")
            seen.add(key)
        return self
