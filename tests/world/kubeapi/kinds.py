"""Per-kind registry behaviour: defaulting, built-in admission plugins, create/update preparation
and built-in validation, following the kube-apiserver registry strategies for these kinds."""

from __future__ import annotations

import base64
import copy
import random
from collections.abc import Callable
from typing import Any

from . import admission_policy, kinds_batch, kinds_dra, kinds_snapshot
from .errors import StatusError, cause, invalid
from .resources import Resource

SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)"
)


def random_suffix(length: int = 5) -> str:
    # Same alphabet as k8s.io/apimachinery/pkg/util/rand (no vowels, no confusable digits).
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))


# ---------------------------------------------------------------- defaulting (on every decode)


def _default_container(container: dict[str, Any], *, ephemeral: bool = False) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in container:
        latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
        container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    container.setdefault("resources", {})
    resources = container["resources"]
    limits = resources.get("limits") or {}
    if limits and not ephemeral:
        # Requests default to limits for every resource the user left out.
        requests = resources.setdefault("requests", {})
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def _default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            _default_container(container)
    for container in spec.get("ephemeralContainers") or []:
        _default_container(container, ephemeral=True)
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            volume["secret"].setdefault("defaultMode", 420)
        if "configMap" in volume:
            volume["configMap"].setdefault("defaultMode", 420)
        if "emptyDir" in volume and volume["emptyDir"] is None:
            volume["emptyDir"] = {}


def apply_defaults(resource: Resource, obj: dict[str, Any]) -> None:
    kind = resource.kind
    kinds_snapshot.apply_defaults(kind, obj)
    if kind == "Pod":
        _default_pod_spec(obj.setdefault("spec", {}))
        obj.setdefault("status", {})  # a decoded Pod always has a (possibly empty) status
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        # stringData is write-only: merged into data before anything else sees the object.
        string_data = obj.pop("stringData", None) or {}
        if string_data:
            data = obj.setdefault("data", {}) or {}
            obj["data"] = data
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    elif kind == "PersistentVolumeClaim":
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif kind == "Job":
        spec = obj.setdefault("spec", {})
        kinds_batch.apply_job_defaults(spec)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        template = spec.setdefault("template", {})
        _default_pod_spec(template.setdefault("spec", {}))
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        name = obj.get("metadata", {}).get("name")
        if name:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        kinds_dra.apply_defaults(kind, obj)
    elif kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        admission_policy.apply_defaults(kind, obj)
    elif kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in obj.get("webhooks") or []:
            webhook.setdefault("failurePolicy", "Fail")
            webhook.setdefault("matchPolicy", "Equivalent")
            webhook.setdefault("namespaceSelector", {})
            webhook.setdefault("objectSelector", {})
            webhook.setdefault("timeoutSeconds", 10)
            if kind == "MutatingWebhookConfiguration":
                webhook.setdefault("reinvocationPolicy", "Never")
            for rule in webhook.get("rules") or []:
                rule.setdefault("scope", "*")
            service = (webhook.get("clientConfig") or {}).get("service")
            if service:
                service.setdefault("port", 443)


# ------------------------------------------------ built-in mutating admission plugins (CREATE)

ServiceAccountGetter = Callable[[str, str], dict[str, Any] | None]


def builtin_mutating_admission(
    resource: Resource, obj: dict[str, Any], namespace: str, get_sa: ServiceAccountGetter
) -> None:
    """ServiceAccount, DefaultTolerationSeconds, Priority and StorageObjectInUseProtection."""
    if resource.kind == "Pod":
        _admit_pod(obj, namespace, get_sa)
    elif resource.kind == "PersistentVolumeClaim":
        finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
        if "kubernetes.io/pvc-protection" not in finalizers:
            finalizers.append("kubernetes.io/pvc-protection")


def _admit_pod(pod: dict[str, Any], namespace: str, get_sa: ServiceAccountGetter) -> None:
    spec = pod.setdefault("spec", {})
    name = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = name
    spec["serviceAccount"] = name
    account = get_sa(namespace, name)
    if account is None:
        raise StatusError(
            403,
            "Forbidden",
            f'pods "{pod["metadata"].get("name") or pod["metadata"].get("generateName", "")}" is '
            f"forbidden: error looking up service account {namespace}/{name}: serviceaccount "
            f'"{name}" not found',
            {"name": pod["metadata"].get("name", ""), "kind": "pods"},
        )
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = account.get("automountServiceAccountToken", True)
    if automount and not any(
        m.get("mountPath") == SA_MOUNT_PATH
        for c in spec.get("containers", [])
        for m in c.get("volumeMounts") or []
    ):
        volume_name = f"kube-api-access-{random_suffix()}"
        spec.setdefault("volumes", []).append(
            {
                "name": volume_name,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        )
        mount = {"name": volume_name, "readOnly": True, "mountPath": SA_MOUNT_PATH}
        for field in ("initContainers", "containers"):
            for container in spec.get(field) or []:
                container.setdefault("volumeMounts", []).append(dict(mount))
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")


# ------------------------------------------------------------- registry create/update prepare


def _qos_class(spec: dict[str, Any]) -> str:
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = {
            k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")
        }
        limits = {
            k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")
        }
        if requests or limits:
            any_set = True
        if set(limits) != {"cpu", "memory"} or any(
            requests.get(k, limits[k]) != limits[k] for k in limits
        ):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_create(resource: Resource, obj: dict[str, Any], now: str) -> None:
    if resource.has_generation:
        obj["metadata"]["generation"] = 1
    kind = resource.kind
    if kind == "Pod":
        spec = obj["spec"]
        status: dict[str, Any] = {"phase": "Pending"}
        if spec.get("schedulingGates"):
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                    "reason": "SchedulingGated",
                    "message": SCHEDULING_GATED_MESSAGE,
                }
            ]
        status["qosClass"] = _qos_class(spec)
        obj["status"] = status
    elif kind in ("PersistentVolumeClaim", "Job", "ResourceClaim"):
        obj["status"] = {}
    if kind == "Job":
        _prepare_job_selector(obj)


def _prepare_job_selector(job: dict[str, Any]) -> None:
    spec = job["spec"]
    if spec.get("manualSelector"):
        return
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def restored_after_store(resource: Resource, obj: dict[str, Any]) -> None:
    """Defaults kube-apiserver applies when reading back (PVC status.phase comes from here)."""
    if resource.kind == "PersistentVolumeClaim":
        obj.setdefault("status", {}).setdefault("phase", "Pending")


_STATUS_METADATA = (
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "deletionTimestamp",
    "generation",
)
# What a kind's status strategy keeps from the stored object's metadata (its PrepareForUpdate).
_STATUS_RESETS: dict[str, tuple[str, ...]] = {
    "Pod": ("ownerReferences", "deletionTimestamp", "generation"),
    "PersistentVolumeClaim": ("deletionTimestamp", "generation"),
    "Job": ("deletionTimestamp", "generation"),
    "Node": ("deletionTimestamp", "generation"),
    "Namespace": ("deletionTimestamp", "generation"),
    "ResourceClaim": _STATUS_METADATA,
}


def prepare_update(
    resource: Resource, subresource: str, new: dict[str, Any], old: dict[str, Any]
) -> None:
    """Keep what the endpoint may not change; bump generation on spec changes."""
    if subresource == "status":
        # Every status strategy resets the spec. Most core ones (PVC, Pod, Job, Node,
        # Namespace) keep the writer's metadata, so a status write may change labels and
        # annotations too; the Pod's keeps ownerReferences and deletionTimestamp. Those that
        # call ResetObjectMetaForStatus (ResourceClaim here) keep all of it.
        status = new.get("status")
        meta = new.get("metadata", {})
        kept = copy.deepcopy(old)
        reset = _STATUS_RESETS.get(resource.kind, ())
        for key in (*meta, *kept["metadata"]):
            if key in reset or key in ("uid", "creationTimestamp", "name", "namespace"):
                continue
            if key in meta:
                kept["metadata"][key] = meta[key]
            else:
                kept["metadata"].pop(key, None)
        if status is None:
            kept.pop("status", None)
        else:
            kept["status"] = status
        new.clear()
        new.update(kept)
        return
    if subresource == "ephemeralcontainers":
        ephemeral = new.get("spec", {}).get("ephemeralContainers")
        kept = copy.deepcopy(old)
        kept["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion")
        if ephemeral is None:
            kept["spec"].pop("ephemeralContainers", None)
        else:
            kept["spec"]["ephemeralContainers"] = ephemeral
        new.clear()
        new.update(kept)
    elif resource.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    if resource.has_generation:
        generation = old["metadata"].get("generation", 1)
        if _spec_of(new) != _spec_of(old):
            generation += 1
        new["metadata"]["generation"] = generation


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


# ------------------------------------------------------------------------ built-in validation


def _name(obj: dict[str, Any]) -> str:
    return obj.get("metadata", {}).get("name", "")


def _admission_policy_causes(kind: str, obj: dict[str, Any]) -> list[dict[str, str]]:
    if kind == "ValidatingAdmissionPolicy":
        return admission_policy.policy_causes(obj)
    if kind == "ValidatingAdmissionPolicyBinding":
        return admission_policy.binding_causes(obj)
    return []


def validate_create(resource: Resource, obj: dict[str, Any]) -> None:
    causes: list[dict[str, str]] = []
    if not _name(obj):
        causes.append(
            cause(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )
        )
    if resource.kind == "Pod":
        spec = obj.get("spec", {})
        if spec.get("nodeName") and spec.get("schedulingGates"):
            causes.append(
                cause(
                    "FieldValueForbidden",
                    "spec.nodeName",
                    "Forbidden: cannot be set until all schedulingGates have been cleared",
                )
            )
        if not spec.get("containers"):
            causes.append(cause("FieldValueRequired", "spec.containers", "Required value"))
        causes.extend(kinds_dra.pod_claim_causes(spec))
    causes.extend(kinds_dra.validate_create(resource.kind, obj))
    causes.extend(kinds_snapshot.validate_create(resource.kind, obj))
    causes.extend(_admission_policy_causes(resource.kind, obj))
    if resource.kind == "Job":
        causes.extend(kinds_batch.job_spec_causes(obj["spec"]))
        restart = obj["spec"]["template"]["spec"].get("restartPolicy")
        if restart not in ("Never", "OnFailure"):
            causes.append(
                cause(
                    "FieldValueNotSupported",
                    "spec.template.spec.restartPolicy",
                    f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
                )
            )
        elif obj["spec"].get("podFailurePolicy") and restart != "Never":
            causes.append(
                cause(
                    "FieldValueInvalid",
                    "spec.template.spec.restartPolicy",
                    f'Invalid value: "{restart}": only "Never" is supported when '
                    "podFailurePolicy is specified",
                )
            )
    if causes:
        raise invalid(resource.kind, resource.group, _name(obj), causes)


def validate_update(
    resource: Resource, subresource: str, new: dict[str, Any], old: dict[str, Any]
) -> None:
    causes: list[dict[str, str]] = []
    new_meta, old_meta = new.get("metadata", {}), old.get("metadata", {})
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            causes.append(
                cause(
                    "FieldValueForbidden",
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)!r}",
                )
            )
    if resource.kind == "Secret" and new.get("type") != old.get("type"):
        causes.append(
            cause(
                "FieldValueInvalid",
                "type",
                f'Invalid value: "{new.get("type")}": field is immutable',
            )
        )
    if resource.kind == "Pod" and subresource == "":
        causes.extend(_pod_update_causes(new.get("spec", {}), old.get("spec", {})))
    causes.extend(kinds_dra.validate_update(resource.kind, subresource, new, old))
    causes.extend(kinds_snapshot.validate_update(resource.kind, subresource, new, old))
    if not subresource:
        causes.extend(_admission_policy_causes(resource.kind, new))
    if causes:
        raise invalid(resource.kind, resource.group, _name(new), causes)


def _pod_update_causes(new: dict[str, Any], old: dict[str, Any]) -> list[dict[str, str]]:
    causes = []
    old_gates = [g.get("name") for g in old.get("schedulingGates") or []]
    for index, gate in enumerate(new.get("schedulingGates") or []):
        if gate.get("name") not in old_gates:
            causes.append(
                cause(
                    "FieldValueForbidden",
                    f"spec.schedulingGates[{index}].name",
                    "Forbidden: only deletion is allowed, but found new scheduling gate "
                    f"'{gate.get('name')}'",
                )
            )
    if causes:
        return causes

    def comparable(spec: dict[str, Any]) -> dict[str, Any]:
        spec = copy.deepcopy(spec)
        for field in (
            "schedulingGates",
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
        ):
            spec.pop(field, None)
        for field in ("containers", "initContainers"):
            for container in spec.get(field) or []:
                container.pop("image", None)
        return spec

    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    if comparable(new) != comparable(old) or any(t not in new_tolerations for t in old_tolerations):
        causes.append(
            {"reason": "FieldValueForbidden", "message": POD_UPDATE_FORBIDDEN, "field": "spec"}
        )
    return causes


def generated_name(prefix: str) -> str:
    # SimpleNameGenerator: at most 63 - 5 characters of the prefix are kept.
    return prefix[: 63 - 5] + random_suffix()
