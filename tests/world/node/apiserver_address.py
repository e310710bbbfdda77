"""The test world's stand-in for kube-proxy, for the one Service pods dial: `kubernetes`.

The kubelet gives every container `KUBERNETES_SERVICE_HOST`/`_PORT`, the `kubernetes` Service's
ClusterIP. Nothing routes a ClusterIP here (no kube-proxy), so a MutatingAdmissionPolicy of the
world's own sets both to the API server's address on the pod network, on every container of
every pod. A container's own env wins over the kubelet's service variables
(`pkg/kubelet/kubelet_pods.go`, `makeEnvironmentVariables`), so in-cluster clients reach the
server; the product's manifests stay as users apply them. `../shared/kube/README.md` ("A real
node") names this policy.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

NAME = "test-world-apiserver-address"


def _containers(field: str, host: str, port: int) -> str:
    env = (
        f'Object.spec.{field}.env{{name: "KUBERNETES_SERVICE_HOST", value: "{host}"}}, '
        f'Object.spec.{field}.env{{name: "KUBERNETES_SERVICE_PORT", value: "{port}"}}'
    )
    return f"object.spec.{field}.map(c, Object.spec.{field}{{name: c.name, env: [{env}]}})"


def policy(host: str, port: int) -> list[dict[str, Any]]:
    """The policy and its binding."""
    containers = _containers("containers", host, port)
    init = _containers("initContainers", host, port)
    mutations = [
        {
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {
                "expression": f"Object{{spec: Object.spec{{containers: {containers}}}}}"
            },
        },
        {
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {
                "expression": (
                    f"has(object.spec.initContainers) ? "
                    f"Object{{spec: Object.spec{{initContainers: {init}}}}} : Object{{}}"
                )
            },
        },
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": NAME},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "mutations": mutations,
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": NAME},
            "spec": {"policyName": NAME},
        },
    ]


def in_force(core: client.CoreV1Api, host: str) -> bool:
    """Whether a pod created now gets the address (a server-side dry run in `default`)."""
    probe = {
        "metadata": {"name": "apiserver-address-probe"},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]},
    }
    try:
        made = core.create_namespaced_pod("default", probe, dry_run="All")
    except client.ApiException:
        return False  # the `default` ServiceAccount may not exist yet
    env = {e.name: e.value for e in made.spec.containers[0].env or []}
    return env.get("KUBERNETES_SERVICE_HOST") == host
