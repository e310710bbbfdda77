"""HAMi's admission webhook (Project-HAMi/HAMi v2.10.0), its mutation of NVIDIA pods as its source
makes it, registered as its Helm chart registers it (`charts/hami/templates/scheduler/
webhook.yaml`: configuration `hami-webhook`, webhook `vgpu.hami.io`, pods CREATE,
`failurePolicy: Ignore`, `reinvocationPolicy: Never`, objectSelector and namespaceSelector
`hami.io/webhook NotIn [ignore]`; values.yaml's resource names):

- a pod that names another scheduler is left alone (`pkg/scheduler/webhook.go`: "pod already has
  different scheduler assigned"; `default-scheduler` is overwritten,
  `forceOverwriteDefaultScheduler: true`);
- a container whose **limits** name only `nvidia.com/gpumem`, `nvidia.com/gpumem-percentage` or
  `nvidia.com/gpucores` gets `nvidia.com/gpu: 1` added to its limits (`pkg/device/nvidia/
  device.go`, `MutateAdmission`: `DefaultGPUNum`, the chart's `defaultGPUNum: 1`);
- a pod with such a container gets `schedulerName: hami-scheduler` (refused with "pod has node
  assigned" when `spec.nodeName` is set), and a privileged one asking for a GPU is refused
  ("container X is privileged", v2.10);
- `overwriteEnv` is false in the chart, so no NVIDIA_VISIBLE_DEVICES is written.

It answers with a JSON Patch from the pod it got to the pod it made.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from aiohttp import web

from tests.world.stand_ins import pod_webhook

NAME = "hami-webhook"
PATH = "/webhook"
SCHEDULER = "hami-scheduler"
COUNT = "nvidia.com/gpu"
COMPANIONS = ("nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores")


def _asks(container: dict[str, Any]) -> bool:
    """Whether the container asks HAMi for a GPU, adding the count it leaves out."""
    limits = (container.get("resources") or {}).get("limits") or {}
    if COUNT in limits:
        return True
    if any(name in limits for name in COMPANIONS):
        limits[COUNT] = "1"
        return True
    return False


def mutate(pod: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The pod HAMi makes of `pod`, or the reason it refuses it."""
    made = copy.deepcopy(pod)
    spec = made["spec"]
    scheduler = spec.get("schedulerName")
    if scheduler and scheduler not in ("default-scheduler", SCHEDULER):
        return made, None
    asking = False
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        if not _asks(container):
            continue
        asking = True
        if (container.get("securityContext") or {}).get("privileged"):
            return made, f"container {container['name']} is privileged"
    if asking:
        if spec.get("nodeName"):
            return made, "pod has node assigned"
        spec["schedulerName"] = SCHEDULER
    return made, None


def app() -> web.Application:
    return pod_webhook.app(PATH, mutate)


def configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """The MutatingWebhookConfiguration as HAMi's chart makes it, calling `url`."""
    ignored = {
        "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1beta1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "Never",
                "matchPolicy": "Equivalent",
                "timeoutSeconds": 10,
                "clientConfig": {
                    "url": url + PATH,
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "namespaceSelector": ignored,
                "objectSelector": ignored,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
            }
        ],
    }
