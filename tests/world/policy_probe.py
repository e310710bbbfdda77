"""The probe pod both real-cluster tiers create (a server-side dry run) to learn that kube-apiserver
applies the pods policy: it picks a policy up from its own informers a moment after it is
written, and until then a create goes unchecked."""

from __future__ import annotations

from typing import Any

# Two time-sliced GPUs in one container: the pods policy refuses it (or warns, in audit mode;
# or its shared-gpu-limit half does, where the checks' modes split it).
POLICY_PROBE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "policy-probe", "namespace": "default"},
    "spec": {
        "containers": [
            {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}
        ]
    },
}
