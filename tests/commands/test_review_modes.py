"""`gpu-admission review` under policy modes: what enforce would refuse or change is shown, and
only enforcing policies make the exit status 1."""

from __future__ import annotations

import yaml

from tests.commands.test_review import run

POD = """
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  containers:
  - name: trainer
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
    resources: {limits: {nvidia.com/gpu.shared: 2}}
    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
  - name: cpu
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
"""


def config_file(tmp_path, policies: dict) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"policies": policies}))
    return str(path)


def test_enforce_denies_with_exit_1(tmp_path):
    code, _, err = run(["review", "-f", "-", "--config", config_file(tmp_path, {})], POD)
    assert code == 1
    assert "DENIED" in err
    assert "policies not enforcing" not in err


def test_warn_and_audit_admit_and_say_what_enforce_would_do(tmp_path):
    config = config_file(
        tmp_path,
        {
            "gpu-env-guard": {"mode": "warn"},
            "shared-gpu-limit": {"mode": "audit"},
            "gpu-visibility": {"mode": "audit"},
        },
    )
    code, out, err = run(["review", "-f", "-", "--config", config, "-o", "json"], POD)
    assert code == 0, err
    assert (
        "policies not enforcing: gpu-env-guard warn, shared-gpu-limit audit, gpu-visibility audit"
        in err
    )
    assert (
        "warning: Validation failed for ValidatingAdmissionPolicy 'gpu-admission-gpu-env-guard' "
        "with binding 'gpu-admission-gpu-env-guard': container \"trainer\" requests a GPU"
    ) in err
    assert (
        "not enforced: gpu-admission-shared-gpu-limit (audit): would refuse: container "
        '"trainer" asks for 2 of nvidia.com/gpu.shared'
    ) in err
    assert (
        'not enforced: gpu-visibility (audit): would change: add container "cpu" env '
        "(NVIDIA_VISIBLE_DEVICES=none)"
    ) in err
    # Audit changes nothing: the printed pod is the one sent.
    assert 'NVIDIA_VISIBLE_DEVICES", "value": "none"' not in out.replace("\n", "")
