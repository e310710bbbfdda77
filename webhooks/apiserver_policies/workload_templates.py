"""The stateless pod checks on workloads' pod templates, as a ValidatingAdmissionPolicy.

The same CEL as the pod policy (`admission_policy`), run over every template of a Deployment,
ReplicaSet, StatefulSet, DaemonSet, ReplicationController, Job, CronJob or JobSet (and the kinds
of `workloads.extra_kinds`), so kube-apiserver refuses, when the workload is written, what it
would refuse of each of its pods, in the pod's words after the workload's name:
`Deployment "notebook": container "nb" asks for 2 of nvidia.com/gpu.shared in limits and
requests: ...`.

- Templates are read before the API server defaults a pod from them, so a limit with no request
  counts as both, as it will in the pod (`shared_limit_problems(defaulted=True)`).
- An UPDATE whose templates equal the old object's is not judged: scaling a workload, or a
  controller's write to one made before the install, always passes.
- Each template's message is the pod's; several templates' are joined with "; ".

`workload_denial` is the same in Python, for `review` and for the tests that hold the CEL to it
on a real API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_admission.config.model import Config
from webhooks.apiserver_policies.cel import cel_string
from webhooks.apiserver_policies.pod_checks import (
    ENV_GUARD,
    ENV_GUARD_ADVICE_CEL,
    POD_CHECKS,
    SHARED_GPU_LIMIT,
    capped,
    check_messages,
    env_guard_problems,
    policy_object,
    shared_limit_problems,
    validation,
)
from webhooks.core.pod_defaults import default_pod
from webhooks.core.workload_kinds import (
    TemplateKind,
    path_steps,
    template_kinds,
    template_pod,
    templates,
    workload_label,
)

WORKLOAD_POLICY_NAME = "gpu-admission-workloads"
WORKLOAD_FALLBACK_MESSAGE = (
    "a pod template of this workload asks for more than one time-sliced GPU, or requests a GPU "
    "and sets an env name the device plugin owns; run `gpu-admission review -f` on the manifest "
    "for every problem"
)
_TEMPLATE_LISTS = ("initContainers", "containers")  # a template has no ephemeral containers


def _template_list(lst: str) -> str:
    if lst not in _TEMPLATE_LISTS:
        return "[]"
    return f"(has(t.spec) && has(t.spec.{lst}) ? t.spec.{lst} : [])"


def _present(base: str, fields: list[str]) -> str:
    """CEL true when every field of the chain below `base` is there."""
    tests, at = [], base
    for field in fields:
        tests.append(f"has({at}.{field})")
        at = f"{at}.{field}"
    return " && ".join(tests) or "true"


def _path_list(root: str, steps: list[str], depth: int = 0) -> str:
    """A CEL list of what `steps` name below `root` (each template as a map)."""
    fields: list[str] = []
    for i, step in enumerate(steps):
        if step in ("[]", "*"):
            holder = ".".join([root, *fields])
            present = _present(root, fields)
            var = f"x{depth}"
            item = var if step == "[]" else f"{holder}[{var}]"
            rest = _path_list(item, steps[i + 1 :], depth + 1)
            return f"({present} ? {holder}.map({var}, {rest}).flatten() : [])"
        fields.append(step)
    return f"({_present(root, fields)} ? [{'.'.join([root, *fields])}] : [])"


def _templates_of(root: str, kinds: tuple[TemplateKind, ...]) -> str:
    """Every template of the object at `root`, by the kind the request names."""
    text = "[]"
    for kind in reversed(kinds):
        paths = " + ".join(_path_list(root, path_steps(p)) for p in kind.template_paths)
        test = (
            f"request.kind.group == {cel_string(kind.group)} && "
            f"request.kind.kind == {cel_string(kind.kind)}"
        )
        text = f"({test} ? {paths} : {text})"
    return text


_LABEL = (
    "request.kind.kind + ' \"' + (has(object.metadata.name) && object.metadata.name != '' ? "
    "object.metadata.name : (has(object.metadata.generateName) ? object.metadata.generateName "
    ": '') + '<generated>') + '\": '"
)
_CHECK_VARIABLES = {ENV_GUARD: "envGuard", SHARED_GPU_LIMIT: "sharedGpuLimit"}


def _per_template(message: str) -> str:
    """One check's message: the workload's name, then each template's message, or ''."""
    joined = f"variables.templates.map(t, {message}).filter(m, m != '').join('; ')"
    return f"[{joined}].filter(m, m != '').map(m, {_LABEL} + m).join('')"


def _resource_rules(kinds: tuple[TemplateKind, ...]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [kind.group],
            "apiVersions": list(kind.versions),
            "operations": ["CREATE", "UPDATE"],
            "resources": [kind.resource],
        }
        for kind in kinds
    ]


def workload_admission_policy(
    config: Config, checks: tuple[str, ...] = POD_CHECKS, name: str = WORKLOAD_POLICY_NAME
) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy holding the stateless checks `checks` for workloads."""
    gpu = config.gpu
    kinds = template_kinds(config)
    new, old = _templates_of("object", kinds), _templates_of("oldObject", kinds)
    variables: list[dict[str, str]] = [
        {
            "name": "templates",
            "expression": f"request.operation == 'UPDATE' && {old} == {new} ? [] : {new}",
        }
    ]
    if ENV_GUARD in checks:
        problems = env_guard_problems(gpu, _template_list)
        message = (
            f"[({problems}).join('; ')].filter(j, j != '')"
            f".map(j, j + {ENV_GUARD_ADVICE_CEL}).join('')"
        )
        variables.append({"name": "envGuard", "expression": _per_template(message)})
    if SHARED_GPU_LIMIT in checks:
        problems = shared_limit_problems(gpu, _template_list, defaulted=True)
        variables.append(
            {"name": "sharedGpuLimit", "expression": _per_template(f"{problems}.join('; ')")}
        )
    used = [f"variables.{_CHECK_VARIABLES[c]}" for c in POD_CHECKS if c in checks]
    check = validation(used, WORKLOAD_FALLBACK_MESSAGE)
    return policy_object(name, config, _resource_rules(kinds), variables, check)


def workload_denial(
    obj: Mapping[str, Any],
    kind: TemplateKind,
    config: Config,
    checks: tuple[str, ...] = POD_CHECKS,
) -> str | None:
    """The policy's message for a workload being created (None when it admits it)."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    label = workload_label(kind.kind, str(meta.get("name") or ""), obj)
    pods = [default_pod(template_pod(t.template, namespace)) for t in templates(obj, kind)]
    parts = []
    for check in POD_CHECKS:
        if check not in checks:
            continue
        messages = [m for pod in pods for m in check_messages(pod, config, (check,))]
        if messages:
            parts.append(f"{label}: " + "; ".join(messages))
    return capped("; ".join(parts), WORKLOAD_FALLBACK_MESSAGE) if parts else None
