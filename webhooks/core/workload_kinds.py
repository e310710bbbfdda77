"""Workload kinds and their pod templates: where each kind keeps them, and the pods they make.

A workload (Deployment, Job, JobSet, ...) never runs a container itself: its controller makes
pods from its template(s). Checking the templates when the workload is written tells the person
who typed `kubectl apply` what every pod would be told, instead of leaving the refusal in a
`FailedCreate` event on an object they never look at (a ReplicaSet, a Job of a CronJob).

The built-in kinds and JobSet are known; more come from `workloads.extra_kinds`. A template
path is dotted fields, `[]` taking every item of a list and `*` every value of a map, so one
path can name many templates (a JobSet's replicated jobs, a PyTorchJob's replica types).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from gpu_admission.config.model import Config
from webhooks.core.review import AdmissionRequest, describe_shape_error
from webhooks.core.review_shapes import PodTemplate


@dataclass(frozen=True)
class TemplateKind:
    group: str
    versions: tuple[str, ...]
    kind: str
    resource: str
    template_paths: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.kind)


_POD_TEMPLATE = ("spec.template",)
BUILT_IN: tuple[TemplateKind, ...] = (
    TemplateKind("apps", ("v1",), "Deployment", "deployments", _POD_TEMPLATE),
    TemplateKind("apps", ("v1",), "ReplicaSet", "replicasets", _POD_TEMPLATE),
    TemplateKind("apps", ("v1",), "StatefulSet", "statefulsets", _POD_TEMPLATE),
    TemplateKind("apps", ("v1",), "DaemonSet", "daemonsets", _POD_TEMPLATE),
    TemplateKind("", ("v1",), "ReplicationController", "replicationcontrollers", _POD_TEMPLATE),
    TemplateKind("batch", ("v1",), "Job", "jobs", _POD_TEMPLATE),
    TemplateKind("batch", ("v1",), "CronJob", "cronjobs", ("spec.jobTemplate.spec.template",)),
    # kubernetes-sigs/jobset: replicatedJobs[].template is a JobTemplateSpec.
    TemplateKind(
        "jobset.x-k8s.io",
        ("v1alpha2",),
        "JobSet",
        "jobsets",
        ("spec.replicatedJobs[].template.spec.template",),
    ),
)


def template_kinds(config: Config) -> tuple[TemplateKind, ...]:
    """Every kind checked through its templates: the built-in ones, then the configured ones (a
    configured kind of the same group and kind replaces the built-in one)."""
    extras = tuple(
        TemplateKind(e.group, tuple(e.versions), e.kind, e.resource, tuple(e.template_paths))
        for e in config.workloads.extra_kinds
    )
    replaced = {e.key for e in extras}
    return tuple(k for k in BUILT_IN if k.key not in replaced) + extras


def kind_index(config: Config) -> dict[tuple[str, str], TemplateKind]:
    return {k.key: k for k in template_kinds(config)}


def path_steps(path: str) -> list[str]:
    """`spec.replicatedJobs[].template` -> ["spec", "replicatedJobs", "[]", "template"]."""
    steps: list[str] = []
    for part in path.split("."):
        if part.endswith("[]"):
            steps += [part[:-2], "[]"]
        else:
            steps.append(part)
    return steps


@dataclass(frozen=True)
class Template:
    where: str  # "" for a kind's only template; else `spec.replicatedJobs[workers]`
    template: Mapping[str, Any]
    path: str = ""  # where it is in the object, as a JSON path: `spec.replicatedJobs[0]...`


def _walk(
    node: Any, steps: list[str], where: str, path: str = "", chosen: bool = False
) -> Iterator[Template]:
    """The templates below `node`; `where` names the path up to the last item chosen."""
    if not steps:
        if isinstance(node, Mapping):
            yield Template(where, node, path)
        return
    step, rest = steps[0], steps[1:]
    if step == "[]":
        for index, item in enumerate(node if isinstance(node, list) else ()):
            name = item.get("name") if isinstance(item, Mapping) else None
            label = name if isinstance(name, str) else index
            yield from _walk(item, rest, f"{where}[{label}]", f"{path}[{index}]", True)
    elif step == "*":
        for key, value in node.items() if isinstance(node, Mapping) else ():
            yield from _walk(value, rest, f"{where}.{key}", f"{path}.{key}", True)
    elif isinstance(node, Mapping) and step in node:
        below = where if chosen else (f"{where}.{step}" if where else step)
        yield from _walk(node[step], rest, below, f"{path}.{step}" if path else step, chosen)


def templates(obj: Mapping[str, Any], kind: TemplateKind) -> list[Template]:
    """Every pod template of `obj`, in the order its paths and lists give them."""
    found = [t for path in kind.template_paths for t in _walk(obj, path_steps(path), "")]
    if len(kind.template_paths) == 1 and not {"[]", "*"} & set(path_steps(kind.template_paths[0])):
        return [Template("", t.template, t.path) for t in found]  # the kind's only template
    return found


def template_shape_error(
    request: AdmissionRequest, kinds: Mapping[tuple[str, str], TemplateKind]
) -> str | None:
    """The first field of a workload's pod templates (new and old) that is not shaped as a pod
    template's (`review_shapes.PodTemplate`), as `parse_review` says it of a pod: the request is
    then refused as malformed, before any policy reads the templates."""
    kind = kinds.get((request.group, request.object_kind))
    if kind is None:
        return None
    for field, obj in (("object", request.object), ("oldObject", request.old_object)):
        for template in templates(obj or {}, kind):
            try:
                msgspec.convert(template.template, PodTemplate)
            except msgspec.ValidationError as exc:
                return describe_shape_error(exc, f"request.{field}.{template.path}")
    return None


def template_pod(template: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The pod a controller makes from `template`, as admission sees its CREATE: the template's
    metadata and spec, in the workload's namespace (`generateName` as controllers set it)."""
    meta = dict(template.get("metadata") or {})
    meta["namespace"] = namespace
    meta.pop("name", None)
    meta.setdefault("generateName", "template-")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec") or {}}


def workload_label(kind: str, name: str, obj: Mapping[str, Any]) -> str:
    """How a refusal names the workload: `Deployment "notebook"` (`Job "train-<generated>"` for a
    name the API server has yet to generate)."""
    if not name:
        name = str((obj.get("metadata") or {}).get("generateName") or "") + "<generated>"
    return f'{kind} "{name}"'
