"""`gpu-admission review`: the admission chain offline over manifests, files and live clusters."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.cli import main
from tests import ROOT
from tests.world.namespaces import namespace_ready

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

EXAMPLES = ROOT / "examples"
STATE = EXAMPLES / "cluster-state.yaml"

CPU_POD = """
apiVersion: v1
kind: Pod
metadata: {name: cpu, namespace: ml}
spec:
  containers: [{name: app, image: nvidia/cuda:12.4.1-base-ubuntu22.04}]
"""


def run(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_examples_show_every_policy_and_exit_1_for_the_denied_ones():
    code, out, err = run(
        ["review", "-f", str(EXAMPLES / "manifests"), "--cluster-state", str(STATE)]
    )
    assert code == 1
    printed = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out)}
    # GPU visibility on a CPU-only CUDA pod.
    cpu = printed[("Pod", "cuda-cpu-only")]
    assert env_of(cpu["spec"]["containers"][0])["NVIDIA_VISIBLE_DEVICES"] == "none"
    # Memory share, PyTorch profile, user's allocator option kept.
    notebook = env_of(printed[("Pod", "notebook-shared")]["spec"]["containers"][0])
    assert notebook["GPU_MEMORY_FRACTION"] == "0.237"
    assert notebook["PYTORCH_CUDA_ALLOC_CONF"] == (
        "expandable_segments:True,per_process_memory_fraction:0.237"
    )
    # A Deployment's template is reviewed as its pods will be.
    vllm = printed[("Deployment", "embedder")]["spec"]["template"]["spec"]["containers"][0]
    assert env_of(vllm)["GPU_MEMORY_FRACTION"] == "0.475"
    # Denied objects are reported, not printed; Secrets are never printed.
    assert ("Pod", "notebook-shared-2") not in printed
    assert not any(kind == "Secret" for kind, _ in printed)
    assert "wJalrXUtnFEMI" not in out + err
    assert "Pod ml/notebook-shared-2 (" in err and "DENIED" in err
    assert "kube-system/node-agent" in err and "exempt" in err


def test_stdin_and_json_output_all_allowed_exit_0():
    code, out, err = run(["review", "-f", "-", "-o", "json"], stdin=CPU_POD)
    assert code == 0, err
    listed = yaml.safe_load(out)
    assert listed["kind"] == "List"
    assert env_of(listed["items"][0]["spec"]["containers"][0]) == {"NVIDIA_VISIBLE_DEVICES": "none"}
    assert "allowed, 1 change" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["review", "-f", "/nonexistent"], "no such file or directory"),
        (["review", "-f", "-", "--cluster-state", "/nonexistent"], "cannot read cluster state"),
    ],
)
def test_usage_errors_exit_2(argv, message):
    code, _, err = run(argv, stdin=CPU_POD)
    assert code == 2
    assert message in err


def test_bad_yaml_is_a_usage_error():
    code, _, err = run(["review", "-f", "-"], stdin="kind: [unclosed")
    assert code == 2 and "not valid YAML" in err


def test_cluster_state_with_unknown_kinds_is_a_usage_error(tmp_path):
    state = tmp_path / "state.yaml"
    state.write_text("- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n")
    code, _, err = run(["review", "-f", "-", "--cluster-state", str(state)], stdin=CPU_POD)
    assert code == 2 and "ConfigMap" in err


def test_live_cluster_state_from_a_kubeconfig(kube_api, kube_client):
    namespace_ready(kube_client, "ml")
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_service_account(
        "ml",
        {
            "metadata": {
                "name": "trainer",
                "annotations": {"gpu-admission.io/cloud-credentials": "s3-reader"},
            }
        },
    )
    core.create_namespaced_secret(
        "ml",
        {
            "metadata": {"name": "s3-reader"},
            "type": "aws-credential",
            "stringData": {
                "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
                "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            },
        },
    )
    pod = CPU_POD.replace("spec:\n", "spec:\n  serviceAccountName: trainer\n")
    argv = ["review", "-f", "-", "--kubeconfig", str(kube_api.kubeconfig_path)]

    def env_of() -> tuple[dict[str, Any], str]:
        code, out, err = run(argv, pod)
        assert code == 0, err
        container = next(yaml.safe_load_all(out))["spec"]["containers"][0]
        return {e["name"]: e.get("valueFrom") for e in container["env"]}, err

    # A binding in a namespace without the label (here: written before the base's guard): the
    # webhook is not asked about the pod, which starts without the credentials, and says so.
    refs, err = env_of()
    assert "AWS_ACCESS_KEY_ID" not in refs
    assert 'ServiceAccount "trainer" names cloud credentials, but namespace "ml"' in err
    label = {"gpu-admission.io/serviceaccount-credentials": "true"}
    core.patch_namespace("ml", {"metadata": {"labels": label}})
    refs, _ = env_of()
    assert refs["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "s3-reader", "key": "AWS_ACCESS_KEY_ID"}
    }


def test_make_run_command_as_the_readme_gives_it():
    # What `make run` runs, through the installed entry point.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "review",
            "-f",
            str(EXAMPLES / "manifests"),
            "--cluster-state",
            str(STATE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "DENIED" in result.stderr and "NVIDIA_VISIBLE_DEVICES" in result.stdout


def test_dra_example_keeps_the_claimed_gpu_and_hides_the_rest():
    code, out, err = run(
        [
            "review",
            "-f",
            str(EXAMPLES / "manifests" / "08-dra-gpu.yaml"),
            "--cluster-state",
            str(STATE),
        ]
    )
    assert code == 0, err
    printed = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out)}
    spec = printed[("Job", "finetune-dra")]["spec"]["template"]["spec"]
    visible = {
        c["name"]: env_of(c).get("NVIDIA_VISIBLE_DEVICES")
        for c in spec["initContainers"] + spec["containers"]
    }
    # h100 is the cluster's own class over NVIDIA's driver; rdma-nic draws from another driver.
    assert visible == {"warm-cache": "none", "trainer": None, "log-shipper": "none"}
    assert "ResourceClaimTemplate ml/one-h100" in err and "read as cluster state" in err
    assert "warning" not in err


def test_a_pod_whose_template_is_nowhere_keeps_its_gpu_with_a_warning():
    manifest = """
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: missing}]
  containers:
    - {name: app, image: nvidia/cuda:12.4.1-base-ubuntu22.04, resources: {claims: [{name: gpu}]}}
"""
    code, out, err = run(["review", "-f", "-", "--cluster-state", str(STATE)], stdin=manifest)
    assert code == 0
    (pod,) = yaml.safe_load_all(out)
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(pod["spec"]["containers"][0])
    assert 'warning: container "app": ResourceClaimTemplate "missing" was not found' in err
