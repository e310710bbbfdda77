"""Pod Security as the real kube-apiserver 1.36 enforces it (its PodSecurity admission plugin,
on by default): the node agent needs the "privileged" level (hostPID), and the gpu-usage
component's namespace says so; the service and the controller meet "restricted". Each pod is
the rendered template, created with a server-side dry run in a namespace labelled as the check
needs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.manifests.compositions import render_composition
from tests.real_api.conftest import Kubectl, namespace_ready

ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.fixture(scope="module")
def rendered() -> tuple[dict[str, Any], ...]:
    return render_composition(["gpu-usage"])


def _pod(docs: tuple[dict[str, Any], ...], kind: str, name: str, namespace: str) -> str:
    [workload] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    spec = dict(workload["spec"]["template"]["spec"])
    spec.pop("serviceAccountName", None)  # the namespace's default: no RBAC is applied here
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return json.dumps(pod)


def _create(kubectl: Kubectl, pod: str) -> str:
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=pod, check=False)
    return "" if done.returncode == 0 else done.stderr


def test_the_agents_namespace_says_the_level_it_needs(
    api: client.ApiClient, kubectl: Kubectl, rendered: tuple[dict[str, Any], ...]
) -> None:
    [namespace] = [d for d in rendered if d["kind"] == "Namespace"]
    labels = {k: v for k, v in namespace["metadata"]["labels"].items() if k == ENFORCE}
    assert labels == {ENFORCE: "privileged"}
    namespace_ready(api, "psa-agent", labels)
    assert (
        _create(kubectl, _pod(rendered, "DaemonSet", "gpu-admission-gpu-usage", "psa-agent")) == ""
    )
    # Why: under "baseline" (a common cluster default) the agent's pods are refused.
    namespace_ready(api, "psa-baseline", {ENFORCE: "baseline"})
    refused = _create(
        kubectl, _pod(rendered, "DaemonSet", "gpu-admission-gpu-usage", "psa-baseline")
    )
    assert "violates PodSecurity" in refused and "hostPID=true" in refused, refused


@pytest.mark.parametrize("deployment", ["gpu-admission", "gpu-admission-controller"])
def test_the_service_and_the_controller_meet_restricted(
    api: client.ApiClient,
    kubectl: Kubectl,
    rendered: tuple[dict[str, Any], ...],
    deployment: str,
) -> None:
    namespace_ready(api, "psa-restricted", {ENFORCE: "restricted"})
    assert _create(kubectl, _pod(rendered, "Deployment", deployment, "psa-restricted")) == ""
