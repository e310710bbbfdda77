"""The GPU-share benchmark's harness: the env it gives tenants is the project's own, and its
protocol tells survivors from casualties (on a pretend GPU; the real runs need one)."""

from __future__ import annotations

import pytest

from bench import gpu_share


@pytest.mark.parametrize(
    ("profile", "framework_env"),
    [
        ("jax", {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.237"}),
        ("pytorch", {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.237"}),
        ("tensorflow", {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
    ],
)
def test_tenants_get_the_env_the_project_computes(
    profile: str, framework_env: dict[str, str]
) -> None:
    env = gpu_share.profile_env(profile, replicas=4, memory_mib=81559)
    generic = {"GPU_MEMORY_FRACTION": "0.237", "GPU_SHARED_REPLICAS": "4"}
    assert env == {**generic, "GPU_MEMORY_LIMIT_MIB": "19329", **framework_env}


def test_a_greedy_tenant_starves_the_others_unless_each_has_its_share(capsys) -> None:
    assert gpu_share.main(["--simulate", "--tenants", "3"]) == 0
    out = capsys.readouterr().out
    assert "simulated    without env 1/3  with env 3/3" in out
