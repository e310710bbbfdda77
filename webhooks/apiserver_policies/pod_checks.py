"""The stateless pod checks as a ValidatingAdmissionPolicy: CEL that kube-apiserver runs itself.

The shared-GPU limit (`policies/shared_gpu_limit.py`) and the GPU env guard
(`policies/gpu_env_guard.py`) need nothing but the pod, except where a container's GPU comes
through a DRA claim (that needs the claim and its DeviceClass), or where a shared GPU keeps its
plain name (that needs the nodes' labels). So on API servers with
admissionregistration.k8s.io/v1 policies (Kubernetes 1.30 and later) those checks run inside the
API server, with no round trip, and the validating webhook is called only for the pods the
policy cannot judge (`webhook_routing`, its matchCondition).

The CEL is generated here from the same configuration the Python policies read, and says the
same words: a test evaluates it with a real CEL runtime against the Python policies over
generated pods. One validation carries both checks, so that, as the webhook does, the user hears
of every problem at once (kube-apiserver reports only the first failed validation).

Facts this relies on, from kube-apiserver's sources (staging/src/k8s.io/apiserver/pkg/admission/
plugin/policy/validating): a failed validation's message is `ValidatingAdmissionPolicy 'P' with
binding 'B' denied request: M`, reason Invalid (422) unless the validation names another; a
messageExpression result longer than 5 KiB, or with a newline, falls back to `message`. The
Kubernetes CEL library's `isInteger()` is Go's `Quantity.AsInt64()` (whole and within int64 for
the values at or below 1 it is asked of).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpu_admission.config.model import Config, GpuConfig
from gpu_admission.names import HIDDEN_VALUES, NVIDIA_VISIBLE_DEVICES
from webhooks.apiserver_policies.cel import (
    base_name,
    cel_string,
    is_shared_test,
    requests_gpu_test,
    scheduler_gives_test,
)
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_env_guard import (
    NOT_GIVEN_ADVICE,
    TAMPERING_ADVICE,
    guards_schedulers,
    messages,
    not_given,
    tampering,
)
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.shared_gpu_limit import container_problems

POLICY_NAME = "gpu-admission-pods"
BINDING_NAME = "gpu-admission-pods"
ENV_GUARD, SHARED_GPU_LIMIT = "gpu-env-guard", "shared-gpu-limit"
# The checks the policy carries, in the order their messages are joined.
POD_CHECKS = (ENV_GUARD, SHARED_GPU_LIMIT)
# kube-apiserver's MaxEvaluatedMessageExpressionSizeBytes: a longer message is replaced by the
# validation's static `message`.
MAX_MESSAGE_BYTES = 5 * 1024
FALLBACK_MESSAGE = (
    "a container of this pod asks for more than one time-sliced GPU, or requests a GPU and sets "
    "an env name the device plugin owns, or sets NVIDIA_VISIBLE_DEVICES its GPU-sharing "
    "scheduler did not give it; run `gpu-admission review -f` on the manifest for every problem"
)
_LISTS = (
    ("initContainers", "init container"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeral container"),
)


def _added(lst: str) -> str:
    """The containers of one list that this request adds (all of them on CREATE; on the
    ephemeralcontainers subresource, those not in the old pod)."""
    present = f"has(object.spec.{lst})"
    if lst != "ephemeralContainers":
        return f"request.operation == 'CREATE' && {present} ? object.spec.{lst} : []"
    new = (
        f"object.spec.{lst}.filter(c, !has(oldObject.spec.{lst}) || "
        f"!oldObject.spec.{lst}.exists(o, o.name == c.name))"
    )
    return f"!{present} ? [] : request.operation == 'CREATE' ? object.spec.{lst} : {new}"


def pod_lists(lst: str) -> str:
    """Where the pod policy reads a container list: its variables (`_added`)."""
    return f"variables.{lst}"


def object_lists(lst: str) -> str:
    """A container list of the pod being created, read from the object itself: where no
    variable can be read (a matchCondition)."""
    return f"(has(object.spec.{lst}) ? object.spec.{lst} : [])"


def env_guard_problems(gpu: GpuConfig, lists: Callable[[str], str] = pod_lists) -> str:
    """One line per GPU container that sets a guarded env name (a list of strings)."""
    guarded = sorted(set(gpu.guarded_env))
    names = "[" + ", ".join(cel_string(g) for g in guarded) + "]"
    # The last entry of a name is the one the container gets, as the kubelet builds env.
    how = (
        "g + (has(c.env.filter(e, e.name == g).reverse()[0].valueFrom) ? "
        "' (from valueFrom)' : ' (by value)')"
    )
    parts = []
    for lst, word in _LISTS:
        parts.append(
            f"{lists(lst)}.filter(c, has(c.env) && c.env.exists(e, e.name in {names}) && "
            f"{requests_gpu_test(gpu)}).map(c, {cel_string(word + ' ')} + '\"' + c.name + "
            f"'\" requests a GPU and sets ' + "
            f"{names}.filter(g, c.env.exists(e, e.name == g)).map(g, {how}).join(', '))"
        )
    return " + ".join(parts)


ENV_GUARD_ADVICE_CEL = cel_string(TAMPERING_ADVICE)
_ENV_GUARD = (
    "size(variables.envGuardProblems) == 0 ? '' : "
    f"variables.envGuardProblems.join('; ') + {ENV_GUARD_ADVICE_CEL}"
)
_NOT_GIVEN = (
    "size(variables.notGivenProblems) == 0 ? '' : "
    f"variables.notGivenProblems.join('; ') + {cel_string(NOT_GIVEN_ADVICE)}"
)
_NVD = cel_string(NVIDIA_VISIBLE_DEVICES)
_CLAIMS = "(has(c.resources) && has(c.resources.claims) && size(c.resources.claims) > 0)"


def _of_a_scheduler(gpu: GpuConfig) -> str:
    """CEL true for a pod of a GPU-sharing scheduler of `gpu.schedulers`."""
    names = "[" + ", ".join(cel_string(s.scheduler_name) for s in gpu.schedulers) + "]"
    return f"(has(object.spec.schedulerName) && object.spec.schedulerName in {names})"


def not_given_problems(gpu: GpuConfig, lists: Callable[[str], str] = pod_lists) -> str:
    """`gpu_env_guard.not_given` in CEL: one line per container of a GPU-sharing scheduler's pod
    that asks for no GPU and gets NVIDIA_VISIBLE_DEVICES that gives GPUs, not from its
    scheduler (a list of strings)."""
    last = f"c.env.filter(e, e.name == {_NVD}).reverse()[0]"
    hidden = "[" + ", ".join(cel_string(v) for v in HIDDEN_VALUES) + "]"
    how = f"(has({last}.valueFrom) ? ' (from valueFrom)' : ' (by value)')"
    parts = []
    for lst, word in _LISTS[:2]:  # the containers a pod is created with
        parts.append(
            f"{lists(lst)}.filter(c, has(c.env) && c.env.exists(e, e.name == {_NVD}) && "
            f"!({requests_gpu_test(gpu)}) && !{_CLAIMS} && "
            f"!(!has({last}.valueFrom) && has({last}.value) && {last}.value in {hidden}) && "
            f"!{scheduler_gives_test(gpu)}).map(c, {cel_string(word + ' ')} + '\"' + c.name + "
            f"'\" asks for no GPU and sets {NVIDIA_VISIBLE_DEVICES}' + {how} + ', which ' + "
            "object.spec.schedulerName + ' did not give it')"
        )
    return f"({_of_a_scheduler(gpu)} ? {' + '.join(parts)} : [])"


def _not_whole(value: str, as_written: bool) -> str:
    """CEL true when the quantity (at most 1, by then) is not a whole number. A pod's quantities
    reach the policy in canonical form, where `isInteger()` (Go's AsInt64) is exact. A custom
    resource's are as written, and AsInt64 fails for `1000m` (a negative scale), which is 1: there
    the value is compared with its own truncation instead."""
    if not as_written:
        return f"!quantity({value}).isInteger()"
    number = f"quantity({value}).asApproximateFloat()"
    return f"double(int({number})) != {number}"


def _shared_problem(
    word: str, value: str, where: str, gpu: GpuConfig, as_written: bool = False
) -> str:
    who = f"{cel_string(word + ' ')} + '\"' + c.name + '\"'"
    # Ends the open literal of both messages below: what to ask for instead.
    advice = f"request 1 ' + n + ', or a whole GPU with ' + {base_name('n', gpu)}"
    too_many = (
        f"{who} + ' asks for ' + {value} + ' of ' + n + ' in {where}: time-sliced replicas of a "
        "GPU give no proportional compute (they take turns on the same GPU and share its "
        f"memory), so {advice}"
    )
    not_whole = (
        f"{who} + ' asks for \"' + {value} + '\" of ' + n + ' in {where}, which is not a whole "
        f"number: a GPU replica cannot be split; {advice}"
    )
    not_quantity = (
        f"{who} + ' has ' + n + ': \"' + {value} + '\" in {where}, which is not a quantity; "
        "set it to 1'"
    )
    return (
        f"(!isQuantity({value}) ? {not_quantity} : "
        f"quantity({value}).compareTo(quantity('1')) > 0 ? {too_many} : "
        f"{_not_whole(value, as_written)} ? {not_whole} : '')"
    )


# A container's limits and requests, each read only where present (Kubernetes' CEL has no
# bindings extension, so they are spelled out where used).
_HAS_LIMITS = "has(c.resources) && has(c.resources.limits)"
_HAS_REQUESTS = "has(c.resources) && has(c.resources.requests)"
_IN_LIMITS = f"({_HAS_LIMITS} && n in c.resources.limits)"
_IN_REQUESTS = f"({_HAS_REQUESTS} && n in c.resources.requests)"
_LIMIT = "c.resources.limits[n]"
_REQUEST = "c.resources.requests[n]"


def shared_limit_problems(
    gpu: GpuConfig, lists: Callable[[str], str] = pod_lists, defaulted: bool = False
) -> str:
    """One line per container with a shared-GPU problem (a list of strings). `defaulted`: the
    containers are a template's, whose requests the API server has not yet defaulted from
    limits (a pod's are: `pod_defaults`), so a limit alone counts as in both, and whose
    quantities may be as written (a custom resource's)."""
    shared = is_shared_test("n", gpu)
    # The shared names a container names, sorted as the Python policy sorts them (a Go map
    # iterates in random order, so the CEL must not rely on the map's order).
    names = (
        f"(({_HAS_LIMITS} ? c.resources.limits.filter(n, {shared}) : []) + "
        f"({_HAS_REQUESTS} ? c.resources.requests.filter(n, {shared} && !{_IN_LIMITS}) : []))"
        ".sort()"
    )
    parts = []
    for lst, word in _LISTS:
        both = (
            f"({_IN_LIMITS} && (!{_IN_REQUESTS} || {_LIMIT} == {_REQUEST}))"
            if defaulted
            else f"({_IN_LIMITS} && {_IN_REQUESTS} && {_LIMIT} == {_REQUEST})"
        )
        per_name = (
            f"({both} ? "
            f"{_shared_problem(word, _LIMIT, 'limits and requests', gpu, defaulted)} : "
            f"[{_IN_LIMITS} ? {_shared_problem(word, _LIMIT, 'limits', gpu, defaulted)} : '', "
            f"{_IN_REQUESTS} ? {_shared_problem(word, _REQUEST, 'requests', gpu, defaulted)} : '']"
            ".filter(s, s != '').join('; '))"
        )
        per_container = f"{names}.map(n, {per_name}).filter(s, s != '').join('; ')"
        parts.append(f"{lists(lst)}.map(c, {per_container})")
    return "(" + " + ".join(parts) + ").filter(s, s != '')"


def _shared_limit(gpu: GpuConfig) -> str:
    return f"request.operation != 'CREATE' ? '' : {shared_limit_problems(gpu)}.join('; ')"


# -- the objects -----------------------------------------------------------------------------


def exempt_selector(config: Config) -> dict[str, Any]:
    return {
        "matchExpressions": [{"key": config.exempt_label, "operator": "NotIn", "values": ["true"]}]
    }


def admission_policy(
    config: Config, checks: tuple[str, ...] = POD_CHECKS, name: str = POLICY_NAME
) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy holding the stateless pod checks `checks` for `config`."""
    gpu = config.gpu
    variables: list[dict[str, str]] = [
        {"name": lst, "expression": _added(lst)} for lst, _ in _LISTS
    ]
    used = []
    if ENV_GUARD in checks:
        variables.append({"name": "envGuardProblems", "expression": env_guard_problems(gpu)})
        variables.append({"name": "envGuard", "expression": _ENV_GUARD})
        used.append("variables.envGuard")
        if guards_schedulers(config):
            variables.append({"name": "notGivenProblems", "expression": not_given_problems(gpu)})
            variables.append({"name": "notGiven", "expression": _NOT_GIVEN})
            used.append("variables.notGiven")
    if SHARED_GPU_LIMIT in checks:
        variables.append({"name": "sharedGpuLimit", "expression": _shared_limit(gpu)})
        used.append("variables.sharedGpuLimit")
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods/ephemeralcontainers"],
        },
    ]
    policy = policy_object(name, config, rules, variables, validation(used, FALLBACK_MESSAGE))
    policy["spec"]["matchConditions"] = [
        {"name": "a-check-fails", "expression": refused_condition(config, checks)}
    ]
    return policy


def refusable_condition(config: Config, checks: tuple[str, ...] = POD_CHECKS) -> str:
    """CEL true for the pods `checks` can refuse: being created, with an init or regular
    container that requests a GPU and sets a guarded env name (the env guard), or, in a
    GPU-sharing scheduler's pod, asks for no GPU and sets NVIDIA_VISIBLE_DEVICES (the env guard
    too), or that names a shared GPU (the limit); an ephemeral container has no resources. Every
    other pod passes untouched, so the API server need not evaluate the checks for it: most
    pods."""
    gpu = config.gpu
    guarded = "[" + ", ".join(cel_string(g) for g in sorted(set(gpu.guarded_env))) + "]"
    shared = is_shared_test("n", gpu)
    tests = []
    if ENV_GUARD in checks:
        tests.append(
            f"({requests_gpu_test(gpu)} && has(c.env) && c.env.exists(e, e.name in {guarded}))"
        )
    if SHARED_GPU_LIMIT in checks:
        tests.append(
            f"(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(n, "
            f"{shared})) || (has(c.resources.requests) && c.resources.requests.exists(n, "
            f"{shared}))))"
        )
    if ENV_GUARD in checks and guards_schedulers(config):
        tests.append(
            f"({_of_a_scheduler(gpu)} && has(c.env) && c.env.exists(e, e.name == {_NVD}) && "
            f"!({requests_gpu_test(gpu)}))"
        )
    either = " || ".join(tests)
    named = " || ".join(
        f"(has(object.spec.{lst}) && object.spec.{lst}.exists(c, {either}))"
        for lst in ("initContainers", "containers")
    )
    return f"request.operation == 'CREATE' && ({named})"


def refused_condition(config: Config, checks: tuple[str, ...] = POD_CHECKS) -> str:
    """CEL true exactly when `checks` refuse the pod being created: the negation of the policy's
    validation, from the same problem lists. Only the pods it refuses match the policy, because
    kube-apiserver makes a matched policy's validations, and then every messageExpression with
    its variables, each from a conversion of the pod of its own, whether the validation failed
    or not (`validating/validator.go` in its sources): a valid pod with a shared GPU pays for the
    condition alone. The cheap `refusable_condition` goes first, so most pods stop there."""
    gpu = config.gpu
    failing = []
    if ENV_GUARD in checks:
        failing.append(f"size({env_guard_problems(gpu, object_lists)}) > 0")
        if guards_schedulers(config):
            failing.append(f"size({not_given_problems(gpu, object_lists)}) > 0")
    if SHARED_GPU_LIMIT in checks:
        failing.append(f"size({shared_limit_problems(gpu, object_lists)}) > 0")
    return f"({refusable_condition(config, checks)}) && ({' || '.join(failing)})"


def policy_object(
    name: str,
    config: Config,
    rules: list[dict[str, Any]],
    variables: list[dict[str, str]],
    check: dict[str, str],
) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of the stateless checks: the requests of `rules` outside the
    exempt namespaces, judged by `check` over `variables`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            # Fail: an expression that cannot be evaluated must not let an object through.
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": exempt_selector(config),
                "resourceRules": rules,
            },
            "variables": variables,
            "validations": [check],
        },
    }


def validation(used: list[str], fallback: str) -> dict[str, str]:
    """One validation over the checks' message variables (`used`, each '' when it passes): the
    user hears of every failed check at once; kube-apiserver shows `fallback` for a message it
    will not show (too long, or with a newline)."""
    return {
        "expression": " && ".join(f"{v} == ''" for v in used),
        "messageExpression": (
            used[0] if len(used) == 1 else f"[{', '.join(used)}].filter(m, m != '').join('; ')"
        ),
        "message": fallback,
        "reason": "Invalid",
    }


def admission_policy_binding(
    actions: tuple[str, ...] = ("Deny",), name: str = BINDING_NAME
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": list(actions)},
    }


# -- the same checks in Python, for `review` --------------------------------------------------


def check_messages(
    pod: Mapping[str, Any], config: Config, checks: tuple[str, ...] = POD_CHECKS
) -> list[str]:
    """Each failed check's part of the policy's message for a pod being created, uncapped, from
    the Python policies over what the CEL sees (GPUs by resource name)."""
    gpus = GpuResources.from_config(config.gpu)
    containers: list[ContainerRef] = list(iter_containers(pod))
    parts = []
    if ENV_GUARD in checks:
        tampered = tampering(containers, gpus.requests_gpu, frozenset(config.gpu.guarded_env))
        ungiven = (
            not_given(
                pod,
                [r for r in containers if r.list_name != "ephemeralContainers"],
                lambda ref: gpus.requests_gpu(ref) or _has_claims(ref),
                config,
            )
            if guards_schedulers(config)
            else []
        )
        parts += messages(tampered, ungiven)
    if SHARED_GPU_LIMIT in checks:
        shared = [p for ref in containers for p in container_problems(ref, gpus, config.gpu)]
        if shared:
            parts.append("; ".join(shared))
    return parts


def _has_claims(ref: ContainerRef) -> bool:
    claims = (ref.container.get("resources") or {}).get("claims")
    return isinstance(claims, list) and len(claims) > 0


def capped(message: str, fallback: str = FALLBACK_MESSAGE) -> str:
    """What kube-apiserver shows of a messageExpression's result."""
    message = message.strip()
    if len(message.encode()) > MAX_MESSAGE_BYTES or "\n" in message:
        return fallback
    return message


def policy_denial(
    pod: Mapping[str, Any], config: Config, checks: tuple[str, ...] = POD_CHECKS
) -> str | None:
    """The policy's message for a pod being created (None when it admits it), capped as
    kube-apiserver caps it."""
    parts = check_messages(pod, config, checks)
    return capped("; ".join(parts)) if parts else None


def denial_text(message: str, name: str = POLICY_NAME) -> str:
    """How kube-apiserver words a denial by a policy and its binding of the same name."""
    return f"ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: {message}"


def warning_text(message: str, name: str = POLICY_NAME) -> str:
    """How kube-apiserver words a Warn binding's warning (tests/world/fixtures/cel)."""
    return (
        f"Validation failed for ValidatingAdmissionPolicy '{name}' with binding '{name}': {message}"
    )
