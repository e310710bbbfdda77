"""What kube-apiserver's defaulting does to a Pod before any admission plugin sees it.

Only the part the policies read: a container's resource limit with no request of the same name
gets that request (`SetDefaults_Pod`, pkg/apis/core/v1/defaults.go, for containers and init
containers; ephemeral containers have no resources). It is why a pod that writes
`limits: {nvidia.com/gpu.shared: 2}` alone is refused for "limits and requests" by a real API
server. `review` applies it so that its words are the server's.
"""

from __future__ import annotations

import copy
from typing import Any


def default_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A copy of `pod` with requests defaulted from limits, as the API server stores it."""
    pod = copy.deepcopy(pod)
    spec = pod.get("spec") or {}
    for lst in ("initContainers", "containers"):
        for container in spec.get(lst) or ():
            if not isinstance(container, dict):
                continue
            resources = container.get("resources")
            limits = resources.get("limits") if isinstance(resources, dict) else None
            if not isinstance(limits, dict) or not limits:
                continue
            requests = resources.get("requests")
            if not isinstance(requests, dict):
                requests = resources["requests"] = {}
            for name, value in limits.items():
                requests.setdefault(name, value)
    return pod
