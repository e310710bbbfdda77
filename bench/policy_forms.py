"""Other forms of the admission objects, for `bench.pod_create --variant` and
`bench.pod_load --variant` to price against the shipped ones on the same API server, round by
round: what a pod pays there is kube-apiserver's own work for each object it matches.

- `apply-configuration`: the same change as an ApplyConfiguration (a structured merge of
  `NVIDIA_VISIBLE_DEVICES=none` into each hidden container's env, keyed by name) in place of
  the JSONPatch list. Pod CREATE only, and not the same result everywhere: a merge keeps the
  fields it does not name, so an entry the user set `valueFrom` on would end with both `value`
  and `valueFrom` (which the API server refuses), and duplicate names are not merged away. It is
  priced here to know whether the form is worth making whole, not shipped.
- `routing-without-checks`: the pods mutating webhook's `needs-cluster-state` condition without
  its second half (the stateless checks passing, so that a pod the policy refuses is never sent
  to the service). Not the same routing: priced to know what that half costs the API server for
  every pod that needs state.
- `coarse-pod-policy`: the pods ValidatingAdmissionPolicy matching every pod its checks may
  refuse (any shared GPU, any GPU container setting a guarded env name), as it did before its
  condition became the exact one: the same verdicts, priced against the shipped condition.
- `marked-pods`: the second pass kube-apiserver makes after any change, priced away for the pods
  the webhook handles: the service marks each pod it admits with a label (`bench.project_server
  --mark-label`), the visibility policy skips a marked pod by `objectSelector` (matched before
  any CEL), the pods webhook's condition reads the label first, and a policy of its own refuses
  a marked pod with a container still to hide (so a label an author sets gains nothing).
  Pod CREATE only (a debug container of a marked pod would need a policy of its own).
- `without-pod-checks-webhook`: no validating webhook for pods. Not the same checks (pods with
  DRA claims or more than one plain GPU go unjudged): the most that folding those checks into
  the mutating webhook could save each pod.
"""

from __future__ import annotations

import copy
from typing import Any

from gpu_admission.config.model import Config
from gpu_admission.names import NVIDIA_VISIBLE_DEVICES, VISIBLE_DEVICES_NONE
from webhooks.apiserver_policies.cel import cel_string
from webhooks.apiserver_policies.pod_checks import POLICY_NAME as POD_POLICY_NAME
from webhooks.apiserver_policies.pod_checks import exempt_selector, refusable_condition
from webhooks.apiserver_policies.visibility_mutation import (
    POLICY_NAME,
    hidden_test,
    needs_change_condition,
)
from webhooks.apiserver_policies.webhook_configurations import POD_CHECKS_WEBHOOK
from webhooks.apiserver_policies.webhook_routing import POD_MUTATIONS, needs_state_condition


def _merged(lst: str, config: Config) -> str:
    entry = (
        f"Object.spec.{lst}.env{{name: {cel_string(NVIDIA_VISIBLE_DEVICES)}, "
        f"value: {cel_string(VISIBLE_DEVICES_NONE)}}}"
    )
    hidden = (
        f"object.spec.{lst}.filter(c, {hidden_test(config)})"
        f".map(c, Object.spec.{lst}{{name: c.name, env: [{entry}]}})"
    )
    return f"?{lst}: has(object.spec.{lst}) ? optional.of({hidden}) : optional.none()"


def apply_configuration_expression(config: Config) -> str:
    lists = ", ".join(_merged(lst, config) for lst in ("initContainers", "containers"))
    return f"Object{{spec: Object.spec{{{lists}}}}}"


def apply_configuration(objects: list[dict[str, Any]], config: Config) -> list[dict[str, Any]]:
    """`objects` with the visibility policy's JSONPatch replaced by the ApplyConfiguration."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        if obj["kind"] == "MutatingAdmissionPolicy" and obj["metadata"]["name"] == POLICY_NAME:
            obj["spec"]["mutations"] = [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": apply_configuration_expression(config)},
                }
            ]
    return changed


def routing_without_checks(objects: list[dict[str, Any]], config: Config) -> list[dict[str, Any]]:
    """`objects` with the pods mutating webhook routing on `needs_state_condition` alone."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        if obj["kind"] != "MutatingWebhookConfiguration":
            continue
        for entry in obj["webhooks"]:
            if entry["name"] != POD_MUTATIONS:
                continue
            for condition in entry["matchConditions"]:
                if condition["name"] == "needs-cluster-state":
                    condition["expression"] = needs_state_condition(config)
    return changed


def coarse_pod_policy(objects: list[dict[str, Any]], config: Config) -> list[dict[str, Any]]:
    """`objects` with the pods policy matching every pod its checks may refuse."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        if (obj["kind"], obj["metadata"]["name"]) == ("ValidatingAdmissionPolicy", POD_POLICY_NAME):
            obj["spec"]["matchConditions"] = [
                {"name": "may-be-refused", "expression": refusable_condition(config)}
            ]
    return changed


def without_pod_checks_webhook(
    objects: list[dict[str, Any]], config: Config
) -> list[dict[str, Any]]:
    """`objects` without the pods validating webhook."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        if obj["kind"] == "ValidatingWebhookConfiguration":
            obj["webhooks"] = [w for w in obj["webhooks"] if w["name"] != POD_CHECKS_WEBHOOK]
    return changed


def visibility_changing_pods_only(
    objects: list[dict[str, Any]], config: Config
) -> list[dict[str, Any]]:
    """`objects` with the visibility policy matching only the pods it changes in the first pass,
    as before it also matched pods whose GPU containers the pods webhook does not see (what that
    saved, and what it left open: a container a later webhook adds to such a pod keeps its
    GPUs)."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        if (obj["kind"], obj["metadata"]["name"]) == ("MutatingAdmissionPolicy", POLICY_NAME):
            conditions = obj["spec"]["matchConditions"]
            conditions[-1] = {
                "name": "a-container-to-hide",
                "expression": needs_change_condition(config),
            }
    return changed


MARK_LABEL = "gpu-admission.io/gpu-visibility"
MARKED_POLICY = "gpu-admission-marked-pods"


def _marked() -> str:
    key = cel_string(MARK_LABEL)
    return f"(has(object.metadata.labels) && {key} in object.metadata.labels)"


def marked_pods_unguarded(objects: list[dict[str, Any]], config: Config) -> list[dict[str, Any]]:
    """`marked_pods` without its policy refusing a marked pod with a container to hide: not
    safe (an author's label would keep a CPU-only pod's GPUs), priced to know that policy's
    share."""
    return marked_pods(objects, config, guarded=False)


def marked_pods(
    objects: list[dict[str, Any]], config: Config, guarded: bool = True
) -> list[dict[str, Any]]:
    """`objects` with the pods the service marks left to the webhook in the second pass (the
    module's `marked-pods`)."""
    changed = copy.deepcopy(objects)
    for obj in changed:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if (kind, name) == ("MutatingAdmissionPolicy", POLICY_NAME):
            obj["spec"]["matchConstraints"]["objectSelector"] = {
                "matchExpressions": [{"key": MARK_LABEL, "operator": "DoesNotExist"}]
            }
        if kind == "MutatingWebhookConfiguration":
            for entry in obj["webhooks"]:
                for condition in entry.get("matchConditions") or []:
                    if condition["name"] == "needs-cluster-state":
                        condition["expression"] = f"{_marked()} || ({condition['expression']})"
    to_hide = needs_change_condition(config)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": MARKED_POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": exempt_selector(config),
                # Only marked pods reach its CEL: an unmarked one is skipped before conversion.
                "objectSelector": {"matchExpressions": [{"key": MARK_LABEL, "operator": "Exists"}]},
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            },
            "matchConditions": [
                {
                    "name": "marked-with-a-container-to-hide",
                    "expression": f"{_marked()} && ({to_hide})",
                }
            ],
            "validations": [
                {
                    "expression": "false",
                    "message": f"the label {MARK_LABEL} is the pods webhook's: take it off",
                    "reason": "Invalid",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": MARKED_POLICY},
        "spec": {"policyName": MARKED_POLICY, "validationActions": ["Deny"]},
    }
    return [*changed, policy, binding] if guarded else changed
