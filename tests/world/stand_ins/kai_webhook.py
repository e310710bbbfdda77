"""KAI-Scheduler's admission webhook, its GPU-sharing mutation as its source makes it
(kai-scheduler/KAI-Scheduler): registered as KAI's Helm chart registers it
(`mutating-kai-admission`, pods CREATE, `failurePolicy: Fail`, `reinvocationPolicy: IfNeeded`,
matchCondition `object.spec.schedulerName == 'kai-scheduler'`), it gives a fraction pod
(annotation `gpu-fraction` or `gpu-memory`) what `pkg/admission/webhook/v1alpha2/gpusharing/
gpu_sharing.go` gives it:

- the annotation `runai/shared-gpu-configmap`, kept if present, else `<owner or pod
  name>-<7 random>-shared-gpu` (`gpusharingconfigmap/config_map.go`);
- on the fraction container (`containers[0]`, or the one `gpu-fraction-container-name` names),
  `NVIDIA_VISIBLE_DEVICES`, `RUNAI_NUM_OF_GPUS` and `GPU_PORTION` from `valueFrom.configMapKeyRef`
  of `<annotation>-<index>`, each after removing any entry of the name
  (`pkg/binder/common/gpu_access.go`, `AddGPUSharingEnvVars`, `AddEnvVarToContainer`);
- `envFrom` the ConfigMap `<...>-<index>-evar`, and a volume of the ConfigMap, each once;
- `runtimeClassName: nvidia` where none is set (`runtimeenforcement`).

It answers with a JSON Patch from the pod it got to the pod it made, so on reinvocation it
changes nothing it already made.
"""

from __future__ import annotations

import base64
import copy
import secrets
import string
from typing import Any

from aiohttp import web

from tests.world.stand_ins import pod_webhook

NAME = "mutating-kai-admission"
PATH = "/mutate--v1-pod"
SCHEDULER = "kai-scheduler"
MAPS_ANNOTATION = "runai/shared-gpu-configmap"
MARKS = ("gpu-fraction", "gpu-memory")
ENV = ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")


def mutate(pod: dict[str, Any]) -> dict[str, Any]:
    made = copy.deepcopy(pod)
    meta, spec = made.setdefault("metadata", {}), made["spec"]
    annotations = meta.setdefault("annotations", {})
    if not any(mark in annotations for mark in MARKS):
        return made
    if MAPS_ANNOTATION not in annotations:
        owners = meta.get("ownerReferences") or []
        base = owners[0]["name"] if owners else meta.get("name", "")
        suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(7))
        annotations[MAPS_ANNOTATION] = f"{base}-{suffix}-shared-gpu"
    wanted = annotations.get("gpu-fraction-container-name")
    index, container = 0, spec["containers"][0]
    if wanted:
        index, container = next(
            (i, c) for i, c in enumerate(spec["containers"]) if c["name"] == wanted
        )
    maps = f"{annotations[MAPS_ANNOTATION]}-{index}"
    env = container.setdefault("env", [])
    for name in ENV:
        env[:] = [e for e in env if e["name"] != name]
        env.append({"name": name, "valueFrom": {"configMapKeyRef": {"name": maps, "key": name}}})
    env_from = container.setdefault("envFrom", [])
    evar = {"configMapRef": {"name": f"{maps}-evar", "optional": False}}
    if evar not in env_from:
        env_from.append(evar)
    volumes = spec.setdefault("volumes", [])
    if not any(v["name"] == f"{maps}-vol" for v in volumes):
        volumes.append({"name": f"{maps}-vol", "configMap": {"name": maps}})
    spec.setdefault("runtimeClassName", "nvidia")
    return made


def app() -> web.Application:
    return pod_webhook.app(PATH, lambda pod: (mutate(pod), None))


def configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration as KAI's chart makes it, calling `url`."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            {
                "name": "admission.run.ai",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "clientConfig": {
                    "url": url + PATH,
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "matchConditions": [
                    {
                        "name": "scheduler-name-match",
                        "expression": f"object.spec.schedulerName == '{SCHEDULER}'",
                    }
                ],
            }
        ],
    }
