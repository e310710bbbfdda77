"""Which workloads are GPU daemons the visibility policy blinds: those whose containers the
policy hides yet want the node's GPUs; not those that ask for a GPU, take their visibility from
a GPU-sharing scheduler, say none already, or live in an exempt namespace."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.config.model import Config
from gpu_admission.gpus.daemons import workload_record
from webhooks.apiserver_policies.blinded_daemons import blinded_daemons

EXEMPT = {"gpu-admission.io/exempt": "true"}


def _workload(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "d", "namespace": "ns", "uid": "u"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", **container}], **spec}}},
    }


ALL = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}


@pytest.mark.parametrize(
    ("container", "spec", "how"),
    [
        (ALL, {}, "sets NVIDIA_VISIBLE_DEVICES=all"),
        (
            {
                "env": [
                    {
                        "name": "NVIDIA_VISIBLE_DEVICES",
                        "valueFrom": {"fieldRef": {"fieldPath": "x"}},
                    }
                ]
            },
            {},
            "sets NVIDIA_VISIBLE_DEVICES (from valueFrom)",
        ),
        (
            {"securityContext": {"privileged": True}},
            {"runtimeClassName": "nvidia"},
            "runs privileged",
        ),
        (
            {"securityContext": {"capabilities": {"add": ["CAP_SYS_ADMIN"]}}},
            {"runtimeClassName": "nvidia"},
            "runs privileged",
        ),
    ],
)
def test_a_daemon_that_wants_gpus_and_asks_for_none_is_named(
    container: dict, spec: dict, how: str
) -> None:
    record = workload_record("DaemonSet")(_workload(container, **spec))
    assert record is not None
    [found] = blinded_daemons(Config(), [record], {})
    assert found.how.startswith(how) and found.containers == ("c",)
    assert found.fix == "kubectl label namespace ns gpu-admission.io/exempt=true"


@pytest.mark.parametrize(
    ("container", "spec"),
    [
        ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]}, {}),
        ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}, {}),
        ({"securityContext": {"privileged": True}}, {}),  # privileged, no NVIDIA runtime
        ({**ALL, "resources": {"limits": {"nvidia.com/gpu": "1"}}}, {}),  # asks for a GPU
        ({"name": "c"}, {}),
    ],
)
def test_what_gives_up_no_gpu_is_not_kept(container: dict, spec: dict) -> None:
    record = workload_record("Deployment")(_workload(container, **spec))
    assert record is None or blinded_daemons(Config(), [record], {}) == []


def test_an_exempt_namespace_or_a_schedulers_fraction_is_not_named() -> None:
    record = workload_record("DaemonSet")(_workload(ALL))
    assert record is not None
    assert blinded_daemons(Config(), [record], {"ns": EXEMPT}) == []
    maps = "d-x7k2p9q-shared-gpu"
    kai = _workload(
        {
            "env": [
                {
                    "name": "NVIDIA_VISIBLE_DEVICES",
                    "valueFrom": {
                        "configMapKeyRef": {"name": f"{maps}-0", "key": "NVIDIA_VISIBLE_DEVICES"}
                    },
                }
            ]
        },
        schedulerName="kai-scheduler",
    )
    kai["spec"]["template"]["metadata"] = {
        "annotations": {"gpu-fraction": "0.5", "runai/shared-gpu-configmap": maps}
    }
    fraction = workload_record("Deployment")(kai)
    assert fraction is not None and blinded_daemons(Config(), [fraction], {}) == []


def test_in_audit_mode_it_is_named_as_what_enforce_would_do() -> None:
    record = workload_record("DaemonSet")(_workload(ALL))
    assert record is not None
    config = Config.model_validate({"policies": {"gpu-visibility": {"mode": "audit"}}})
    [found] = blinded_daemons(config, [record], {})
    assert not found.enforced and "would give (once it enforces)" in found.message
