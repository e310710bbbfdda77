"""GPU visibility inside the API server: a MutatingAdmissionPolicy gives every container that asks
for no GPU `NVIDIA_VISIBLE_DEVICES=none` (`gpu.hidden_value`: `void` where the nodes' default
runtime is nvidia), with no webhook call, so CPU-only pods are admitted, and hidden from the GPUs,
while the service is down. A container that already says `none` or `void`, once, keeps it.

Which containers: the init and regular containers of a pod being created, and the ephemeral
containers added through `pods/ephemeralcontainers`, that name no GPU resource
(`gpu.resource_patterns`) and use no ResourceClaim (whether a claim's device is a GPU depends on
the claim and its DeviceClass: the webhook decides those, `policies/gpu_visibility.py`), and
whose NVIDIA_VISIBLE_DEVICES is not one a scheduler of `gpu.schedulers` gave this pod (KAI's GPU
fractions: `gpu_admission/gpus/scheduler_gpus.py`). Mirror pods and exempt namespaces are left
alone, as the webhook leaves them.

The change is the webhook's, operation for operation (`Patch.set_env`): the first entry of the
name replaced in place by the plain value, later entries of the name removed (the last one is
the one a container gets), or the entry appended; nothing when the container has exactly that
entry already. So when the webhook also sees the pod (it needs cluster state for another
reason), it finds nothing more to change. `changes` is the same in Python, for `review`; a test
holds the two to each other on the real API server (tests/real_api/test_stateless_admission.py).

In `audit` mode (`policies.gpu-visibility.mode`) the pods must not change: in place of the
mutating policy, a ValidatingAdmissionPolicy bound with `[Audit]` records, in the API server's
audit event, what the change would have been, in the words `review` and the webhook use
(`webhooks.core.change_words`).

Facts this relies on, checked on kube-apiserver 1.36.2: MutatingAdmissionPolicies run before the
mutating webhooks, and again after them with `reinvocationPolicy: IfNeeded`, but only those that
matched in the first pass, so the policy also matches the pods with GPU containers the pods
webhook does not see (`match_condition`: a container a later webhook adds is hidden,
tests/real_api/test_injected_containers.py); a JSONPatch value of map literals works, while one
that holds `Object{}` initializers fails the request with a 500 (kubernetes/kubernetes#142181),
so none is used here; `transformList` and `flatten` are in its CEL (two-variable comprehensions
since 1.32, the lists library v3 since 1.34).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.gpus.scheduler_gpus import scheduler_gives
from gpu_admission.names import HIDDEN_VALUES, MIRROR_POD_ANNOTATION, NVIDIA_VISIBLE_DEVICES
from webhooks.apiserver_policies.cel import (
    cel_string,
    names_companion_test,
    requests_gpu_test,
    scheduler_gives_test,
)
from webhooks.apiserver_policies.pod_checks import exempt_selector
from webhooks.core.change_words import describe_changes
from webhooks.core.patch import Patch
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.gpu_visibility import hidden_entry, is_hidden

POLICY_NAME = "gpu-admission-gpu-visibility"
EPHEMERAL = "ephemeralContainers"
_CREATED = ("initContainers", "containers")
# How the webhook's change words name a container of each list (`webhooks.core.change_words`).
_WORDS = {
    "initContainers": "init container",
    "containers": "container",
    EPHEMERAL: "ephemeralContainer",
}
NOT_A_MIRROR_POD = (
    "!has(object.metadata.annotations) || "
    f"!({cel_string(MIRROR_POD_ANNOTATION)} in object.metadata.annotations)"
)


# -- in Python, for `review` ----------------------------------------------------------------


def _claims(ref: ContainerRef) -> bool:
    claims = (ref.container.get("resources") or {}).get("claims")
    return isinstance(claims, list) and any(isinstance(c, Mapping) for c in claims)


def hidden_containers(
    pod: Mapping[str, Any], old: Mapping[str, Any] | None, config: Config
) -> list[ContainerRef]:
    """The containers the policy gives the entry to: on a pod's CREATE (`old` None) its init
    and regular containers, on `pods/ephemeralcontainers` the ephemeral ones it adds; of those,
    the ones that name no GPU resource and use no claim."""
    if not config.gpu.visibility_policy:
        return []  # left to the nodes' container toolkit
    if MIRROR_POD_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return []
    gpus = GpuResources.from_config(config.gpu)
    if old is None:
        refs: Iterable[ContainerRef] = iter_containers(pod, _CREATED)
    else:
        existing = {c.get("name") for c in (old.get("spec") or {}).get(EPHEMERAL) or []}
        refs = (r for r in iter_containers(pod, (EPHEMERAL,)) if r.name not in existing)
    return [
        r
        for r in refs
        if not gpus.requests_gpu(r)
        and not _claims(r)
        and not scheduler_gives(pod, r.container, config.gpu)
    ]


def changes(
    pod: dict[str, Any], old: Mapping[str, Any] | None, config: Config
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The pod as the policy leaves it, and the JSON Patch operations that make it so (the
    webhook's operations for the same containers)."""
    changed = copy.deepcopy(pod)
    patch = Patch(changed)
    for ref in hidden_containers(changed, old, config):
        if not is_hidden(ref.container):
            patch.set_env(ref.path, hidden_entry(config.gpu))
    return changed, patch.ops


def would_change(pod: dict[str, Any], old: Mapping[str, Any] | None, config: Config) -> str:
    """What the policy would change, in the webhook's audit words; "" for nothing."""
    _, ops = changes(pod, old, config)
    return f"would change: {describe_changes(ops, pod)}" if ops else ""


# -- in CEL, for kube-apiserver --------------------------------------------------------------

_NAME = cel_string(NVIDIA_VISIBLE_DEVICES)
_HIDDEN_VALUES = "[" + ", ".join(cel_string(v) for v in HIDDEN_VALUES) + "]"
# The indexes of the container's entries of the name (the container `c`, with env).
_INDEXES = f"c.env.transformList(j, e, e.name == {_NAME}, j)"
# The container is hidden already: one entry of the name, a value that gives no GPU
# (`is_hidden`; the indexes `idx`).
_EXACT = (
    "(size(idx) == 1 && has(c.env[idx[0]].value) && "
    f"c.env[idx[0]].value in {_HIDDEN_VALUES} && !has(c.env[idx[0]].valueFrom))"
)


def _entry(config: Config) -> str:
    """The entry the policy writes, as a CEL map literal."""
    return f"{{'name': {_NAME}, 'value': {cel_string(config.gpu.hidden_value)}}}"


def _added(lst: str) -> str:
    """The containers of `lst` this request adds: all on a pod's CREATE, the ephemeral ones
    not in the old pod on `pods/ephemeralcontainers`."""
    present = f"(has(object.spec.{lst}) ? object.spec.{lst} : [])"
    if lst != EPHEMERAL:
        return present
    return (
        f"{present}.filter(c, !has(oldObject.spec.{lst}) || "
        f"!oldObject.spec.{lst}.exists(o, o.name == c.name))"
    )


def hidden_test(config: Config) -> str:
    """CEL true when the container `c` gets the entry: no GPU resource, no claim, and no
    visibility a scheduler gave it."""
    claims = "(has(c.resources) && has(c.resources.claims) && size(c.resources.claims) > 0)"
    given = scheduler_gives_test(config.gpu)
    return f"!({requests_gpu_test(config.gpu)}) && !{claims}" + (
        f" && !{given}" if config.gpu.schedulers else ""
    )


def _operations(lst: str, config: Config) -> str:
    """The JSON Patch operations for the container `c` at index `i` of `lst` (`Patch.set_env`);
    removals from the highest index down, so the lower ones stay where they are."""
    at = f"'/spec/{lst}/' + string(i)"
    entry = _entry(config)
    spread = (
        f"[{_INDEXES}].map(idx, size(idx) == 0 ? "
        f"[JSONPatch{{op: 'add', path: {at} + '/env/-', value: {entry}}}] : "
        f"{_EXACT} ? [] : "
        f"idx.slice(1, size(idx)).reverse().map(j, "
        f"JSONPatch{{op: 'remove', path: {at} + '/env/' + string(j)}}) + "
        f"[JSONPatch{{op: 'replace', path: {at} + '/env/' + string(idx[0]), value: {entry}}}]"
        ")[0]"
    )
    return (
        f"!has(c.env) ? [JSONPatch{{op: 'add', path: {at} + '/env', value: [{entry}]}}] : {spread}"
    )


def _list_patch(lst: str, config: Config) -> str:
    operations = _operations(lst, config)
    return (
        f"{_added(lst)}.transformList(i, c, {hidden_test(config)}, {operations}).flatten()"
        if lst != EPHEMERAL
        # Index in the whole list (the patch's path), not in the filtered one.
        else f"(has(object.spec.{lst}) ? object.spec.{lst} : []).transformList(i, c, "
        f"(!has(oldObject.spec.{lst}) || !oldObject.spec.{lst}.exists(o, o.name == c.name)) && "
        f"{hidden_test(config)}, {_operations(lst, config)}).flatten()"
    )


def _unchanged() -> str:
    """CEL true when the container `c` has exactly the entry, once: nothing to do."""
    entries = f"c.env.filter(e, e.name == {_NAME})"
    return (
        f"(has(c.env) && size({entries}) == 1 && {entries}.all(e, has(e.value) && "
        f"e.value in {_HIDDEN_VALUES} && !has(e.valueFrom)))"
    )


def needs_change_condition(config: Config) -> str:
    """CEL true for the requests the policy changes now: a container it hides that lacks the
    entry (the audit-mode policy records those, and only those)."""
    parts = []
    for lst in (*_CREATED, EPHEMERAL):
        when = (
            "request.operation == 'CREATE'" if lst != EPHEMERAL else "request.operation != 'CREATE'"
        )
        hides = f"{hidden_test(config)} && !{_unchanged()}"
        parts.append(f"({when} && {_added(lst)}.exists(c, {hides}))")
    return " || ".join(parts)


def match_condition(config: Config) -> str:
    """CEL true for the requests the enforcing policy matches: those with a container to hide
    now, and every pod created with a container that keeps its GPUs the pods webhook is not
    called for (HAMi's memory or cores alone, a scheduler's visibility). kube-apiserver reinvokes
    a MutatingAdmissionPolicy only if it matched in the first pass (policy/mutating/
    dispatcher.go: a non-matching invocation `continue`s before
    `AddReinvocablePolicyToPreviouslyInvoked`, and a reinvocation `continue`s unless
    `ShouldReinvoke(invocationKey)`): such a pod, with nothing to hide at first, must match, or a
    container a later webhook adds keeps every GPU of its node. A pod with a GPU resource or a
    claim is the webhook's (webhook_routing), which is reinvoked (`IfNeeded`) and hides what was
    added; matching it here too would cost each GPU pod a second evaluation of the patch, about
    1 ms of the API server's CPU (docs/performance.md). Left open: a CPU-only pod whose
    containers all say `none` already (matching it would cost every CPU-only pod the same)."""
    # A companion resource, with or without a GPU one (the pair is rare; a lone companion is
    # what matters): one short test where companion-and-not-resource would read the resources
    # twice, in every CPU-only pod's second pass too.
    keeps = names_companion_test(config.gpu)
    if config.gpu.schedulers:
        keeps = f"({keeps}) || {scheduler_gives_test(config.gpu)}"
    unseen = " || ".join(f"{_added(lst)}.exists(c, {keeps})" for lst in _CREATED)
    return f"({needs_change_condition(config)}) || (request.operation == 'CREATE' && ({unseen}))"


def patch_expression(config: Config) -> str:
    """The policy's JSONPatch expression."""
    created = " + ".join(_list_patch(lst, config) for lst in _CREATED)
    return f"request.operation == 'CREATE' ? {created} : {_list_patch(EPHEMERAL, config)}"


RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
    {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["pods/ephemeralcontainers"],
    },
]


def visibility_policy(config: Config) -> dict[str, Any]:
    """The MutatingAdmissionPolicy (enforce mode)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            # Fail: an expression that cannot be evaluated must not let a CPU-only pod through
            # seeing every GPU of its node.
            "failurePolicy": "Fail",
            # Again after the webhooks: a container another webhook adds is hidden too.
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "namespaceSelector": exempt_selector(config),
                "resourceRules": RULES,
            },
            "matchConditions": [
                {"name": "not-a-mirror-pod", "expression": NOT_A_MIRROR_POD},
                {"name": "to-hide-now-or-later", "expression": match_condition(config)},
            ],
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": patch_expression(config)}}
            ],
        },
    }


def visibility_policy_binding() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME},
    }


# -- audit mode: what would change, recorded --------------------------------------------------


def _words(lst: str, config: Config) -> str:
    """`changes`'s operations for the container `c` in the webhook's audit words
    (`describe_changes`: one part per distinct operation, removals first)."""
    who = f"{cel_string(_WORDS[lst] + ' ')} + '\"' + c.name + '\" env'"
    shown = f"' ({NVIDIA_VISIBLE_DEVICES}={config.gpu.hidden_value})'"
    return (
        f"!has(c.env) ? ['add ' + {who} + {shown}] : "
        f"[{_INDEXES}].map(idx, size(idx) == 0 ? ['add ' + {who} + {shown}] : {_EXACT} ? [] : "
        f"(size(idx) > 1 ? ['remove ' + {who}] : []) + ['replace ' + {who} + {shown}])[0]"
    )


def would_change_expression(config: Config) -> str:
    """CEL: the audit words of what the policy would change ("" for nothing)."""
    parts = []
    for lst in (*_CREATED, EPHEMERAL):
        changed = f"{_added(lst)}.filter(c, {hidden_test(config)}).map(c, {_words(lst, config)})"
        when = (
            "request.operation == 'CREATE'" if lst != EPHEMERAL else "request.operation != 'CREATE'"
        )
        parts.append(f"({when} ? {changed} : [])")
    said = f"({' + '.join(parts)}).flatten()"
    return f"size({said}) == 0 ? '' : 'would change: ' + {said}.join('; ')"


def visibility_audit_policy(config: Config) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy that records, never changes (audit mode); bound `[Audit]`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Ignore",  # a record is never worth a refused pod
            "matchConstraints": {
                "namespaceSelector": exempt_selector(config),
                "resourceRules": RULES,
            },
            "matchConditions": [
                {"name": "not-a-mirror-pod", "expression": NOT_A_MIRROR_POD},
                {"name": "a-container-to-hide", "expression": needs_change_condition(config)},
            ],
            "variables": [{"name": "wouldChange", "expression": would_change_expression(config)}],
            "validations": [
                {
                    "expression": "variables.wouldChange == ''",
                    "messageExpression": "variables.wouldChange",
                    "message": "gpu-visibility would give containers "
                    f"{NVIDIA_VISIBLE_DEVICES}={config.gpu.hidden_value}",
                    "reason": "Invalid",
                }
            ],
        },
    }
