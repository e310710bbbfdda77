"""Which workloads are GPU daemons the visibility policy blinds: those whose containers the
policy hides yet want the node's GPUs; not those that ask for a GPU, take their visibility from
a GPU-sharing scheduler, say none already, or live in an exempt namespace."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_admission.cluster.informer import shaped_decoders
from gpu_admission.config.model import Config
from gpu_admission.gpus.daemons import read_shape, workload_record
from webhooks.apiserver_policies.blinded_daemons import blinded_daemons

EXEMPT = {"gpu-admission.io/exempt": "true"}
GPU = Config().gpu


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
    record = workload_record("DaemonSet", GPU)(_workload(container, **spec))
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
    record = workload_record("Deployment", GPU)(_workload(container, **spec))
    assert record is None or blinded_daemons(Config(), [record], {}) == []


def test_an_exempt_namespace_or_a_schedulers_fraction_is_not_named() -> None:
    record = workload_record("DaemonSet", GPU)(_workload(ALL))
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
    fraction = workload_record("Deployment", GPU)(kai)
    assert fraction is not None and blinded_daemons(Config(), [fraction], {}) == []


def test_in_audit_mode_it_is_named_as_what_enforce_would_do() -> None:
    record = workload_record("DaemonSet", GPU)(_workload(ALL))
    assert record is not None
    config = Config.model_validate({"policies": {"gpu-visibility": {"mode": "audit"}}})
    [found] = blinded_daemons(config, [record], {})
    assert not found.enforced and "would give (once it enforces)" in found.message


# -- every kind, each judged once --------------------------------------------------------------

PRIVILEGED = {"securityContext": {"privileged": True}}


def _of(kind: str, pod_spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """An object of `kind` whose pods have `pod_spec`."""
    metadata = {"name": "w", "namespace": "ns", "uid": "u", **meta}
    if kind == "Pod":
        return {"metadata": metadata, "spec": pod_spec}
    template = {"template": {"spec": pod_spec}}
    if kind == "CronJob":
        return {"metadata": metadata, "spec": {"jobTemplate": {"spec": template}}}
    return {"metadata": metadata, "spec": template}


def _named(kind: str, obj: dict[str, Any], config: Config | None = None) -> list[Any]:
    config = config or Config()
    record = workload_record(kind, config.gpu)(obj)
    return [] if record is None else blinded_daemons(config, [record], {})


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("DaemonSet", "apps/v1"),
        ("Deployment", "apps/v1"),
        ("StatefulSet", "apps/v1"),
        ("Job", "batch/v1"),
        ("CronJob", "batch/v1"),
        ("Pod", "v1"),
    ],
)
def test_every_kind_is_read_and_its_event_names_its_api_version(
    kind: str, api_version: str
) -> None:
    spec = {"runtimeClassName": "nvidia", "containers": [{"name": "c", **PRIVILEGED}]}
    [found] = _named(kind, _of(kind, spec))
    assert found.kind == kind and found.daemon
    assert found.involved == {
        "apiVersion": api_version,
        "kind": kind,
        "namespace": "ns",
        "name": "w",
        "uid": "u",
    }


def _owner(api_version: str, kind: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "o", "controller": True}


@pytest.mark.parametrize(
    ("kind", "owner"),
    [
        ("Pod", _owner("apps/v1", "ReplicaSet")),  # its Deployment's
        ("Pod", _owner("apps/v1", "DaemonSet")),
        ("Pod", _owner("apps/v1", "StatefulSet")),
        ("Pod", _owner("batch/v1", "Job")),
        ("Job", _owner("batch/v1", "CronJob")),
    ],
)
def test_what_a_workload_read_here_owns_is_judged_through_it_not_twice(
    kind: str, owner: dict[str, Any]
) -> None:
    obj = _of(kind, {"containers": [{"name": "c", **ALL}]}, ownerReferences=[owner])
    assert workload_record(kind, GPU)(obj) is None


def test_the_gpu_operators_cuda_validator_is_a_bare_pod_named_as_admitted() -> None:
    """As NVIDIA/gpu-operator `validator/manifests/cuda-workload-validation.yaml` and
    `cmd/nvidia-validator/main.go` make it: owned by the ClusterPolicy, runtimeClassName nvidia,
    privileged, placed on its node; read after the policy gave every container `none`."""
    hidden = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}], **PRIVILEGED}
    pod = _of(
        "Pod",
        {
            "runtimeClassName": "nvidia",
            "nodeName": "gpu-node-1",
            "initContainers": [{"name": "cuda-validation", **hidden}],
            "containers": [{"name": "nvidia-cuda-validator", **hidden}],
        },
        name="nvidia-cuda-validator-x7k2p",
        generateName="nvidia-cuda-validator-",
        ownerReferences=[_owner("nvidia.com/v1", "ClusterPolicy")],
    )
    [found] = _named("Pod", pod)
    assert found.containers == ("cuda-validation", "nvidia-cuda-validator")
    assert found.how.startswith("runs privileged with runtimeClassName nvidia")
    assert found.daemon and found.fix == "kubectl label namespace ns gpu-admission.io/exempt=true"
    # A template that says `none` itself gives up the GPUs: never changed by the policy.
    assert _named("DaemonSet", _of("DaemonSet", pod["spec"])) == []


def test_a_mirror_pod_is_not_read() -> None:
    spec = {"runtimeClassName": "nvidia", "containers": [{"name": "c", **PRIVILEGED}]}
    pod = _of("Pod", spec, annotations={"kubernetes.io/config.mirror": "x"})
    assert workload_record("Pod", GPU)(pod) is None


# -- the runtime decides --------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["gvisor", "kata-qemu", "runsc"])
def test_privilege_under_a_sandboxing_runtime_class_is_not_a_gpu_daemon(runtime: str) -> None:
    spec = {"runtimeClassName": runtime, "containers": [{"name": "c", **PRIVILEGED}]}
    assert workload_record("DaemonSet", GPU)(_of("DaemonSet", spec)) is None
    # Even where NVIDIA's runtime is the nodes' default: the class names another.
    config = Config.model_validate({"gpu": {"nvidia_default_runtime": True}})
    assert _named("Pod", _of("Pod", spec), config) == []


@pytest.mark.parametrize("runtime", ["nvidia", "nvidia-cdi", "nvidia-legacy"])
def test_an_unprivileged_pod_under_an_nvidia_runtime_class_asking_for_no_gpu_is_named(
    runtime: str,
) -> None:
    spec = {"runtimeClassName": runtime, "containers": [{"name": "exporter"}]}
    [found] = _named("Deployment", _of("Deployment", spec))
    assert found.how == (
        f"runs with runtimeClassName {runtime} (its image sets NVIDIA_VISIBLE_DEVICES)"
    )
    assert found.daemon


def test_a_sidecar_of_a_gpu_pod_under_the_nvidia_class_is_not_a_daemon() -> None:
    gpu = {"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    spec = {
        "runtimeClassName": "nvidia",
        "initContainers": [{"name": "fetch"}],
        "containers": [gpu, {"name": "logs"}],
    }
    assert workload_record("Job", GPU)(_of("Job", spec)) is None
    # A privileged one is given what its image says, GPU pod or not.
    spec["containers"] = [gpu, {"name": "logs", **PRIVILEGED}]
    [found] = _named("Job", _of("Job", spec))
    assert found.containers == ("logs",)


def test_privileged_without_a_class_counts_where_nvidia_is_the_nodes_default_runtime() -> None:
    spec = {"containers": [{"name": "c", **PRIVILEGED}]}
    assert _named("DaemonSet", _of("DaemonSet", spec)) == []  # runc: the variable does nothing
    config = Config.model_validate({"gpu": {"nvidia_default_runtime": True}})
    [found] = _named("DaemonSet", _of("DaemonSet", spec), config)
    assert found.how == (
        "runs privileged under the nodes' default runtime, NVIDIA's "
        "(its image sets NVIDIA_VISIBLE_DEVICES)"
    )
    # An unprivileged CPU pod under the default runtime is what the policy is for.
    assert _named("Deployment", _of("Deployment", {"containers": [{"name": "c"}]}), config) == []


# -- envFrom ----------------------------------------------------------------------------------

FROM_MAP = {"envFrom": [{"configMapRef": {"name": "plugin-env"}}]}


def test_envfrom_is_named_only_where_the_workload_looks_like_a_gpu_daemon() -> None:
    spec = {"containers": [{"name": "plugin", **FROM_MAP}]}
    [found] = _named("DaemonSet", _of("DaemonSet", spec))
    assert found.how == (
        "takes its environment from envFrom ConfigMap plugin-env (may set NVIDIA_VISIBLE_DEVICES)"
    )
    assert workload_record("Deployment", GPU)(_of("Deployment", spec)) is None  # users' config
    secret = {
        "containers": [{"name": "c", "envFrom": [{"secretRef": {"name": "s"}}], **PRIVILEGED}]
    }
    [found] = _named("StatefulSet", _of("StatefulSet", secret))
    assert "envFrom Secret s" in found.how


def test_envfrom_with_a_prefix_that_cannot_make_the_name_is_not_read() -> None:
    spec = {
        "containers": [{"name": "c", "envFrom": [{**FROM_MAP["envFrom"][0], "prefix": "APP_"}]}]
    }
    assert workload_record("DaemonSet", GPU)(_of("DaemonSet", spec)) is None
    spec["containers"][0]["envFrom"][0]["prefix"] = "NVIDIA_"
    assert len(_named("DaemonSet", _of("DaemonSet", spec))) == 1


def test_an_explicit_entry_wins_over_envfrom() -> None:
    none = {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}], **FROM_MAP}
    assert _named("DaemonSet", _of("DaemonSet", {"containers": [{"name": "c", **none}]})) == []


# -- two kinds of advice ------------------------------------------------------------------------


def test_a_users_workload_that_sets_the_variable_is_told_to_ask_by_resource() -> None:
    [found] = _named("Deployment", _of("Deployment", {"containers": [{"name": "app", **ALL}]}))
    assert not found.daemon
    assert found.fix == (
        "ask for a GPU by resource (resources.limits nvidia.com/gpu: 1) instead of setting "
        "NVIDIA_VISIBLE_DEVICES"
    )
    assert "exempt" not in found.message and "kubectl label" not in found.message
    assert "by design" in found.message


def test_a_workload_beside_a_gpu_daemon_is_gpu_software() -> None:
    config = Config()
    app = workload_record("Deployment", config.gpu)(
        _of("Deployment", {"containers": [{"name": "app", **ALL}]})
    )
    spec = {"runtimeClassName": "nvidia", "containers": [{"name": "c", **PRIVILEGED}]}
    exporter = workload_record("DaemonSet", config.gpu)(_of("DaemonSet", spec, name="dcgm"))
    assert app is not None and exporter is not None
    found = blinded_daemons(config, [app, exporter], {})
    assert [f.daemon for f in found] == [True, True]
    assert "kubectl label namespace ns gpu-admission.io/exempt=true" in found[1].message


def test_a_pod_that_asks_a_scheduler_for_a_gpu_is_not_a_daemon_under_the_nvidia_class() -> None:
    """KAI's fraction pod under the default scheduler: hidden, but a users' pod all the same."""
    spec = {"runtimeClassName": "nvidia", "containers": [{"name": "main"}]}
    pod = _of("Pod", spec, annotations={"gpu-fraction": "0.5"})
    assert workload_record("Pod", GPU)(pod) is None


@pytest.mark.parametrize("kind", ["Pod", "CronJob", "DaemonSet"])
def test_the_informers_shape_keeps_all_the_record_reads(kind: str) -> None:
    spec = {
        "runtimeClassName": "nvidia",
        "schedulerName": "default-scheduler",
        "initContainers": [{"name": "i", **ALL, **PRIVILEGED}],
        "containers": [{"name": "c", **FROM_MAP, "resources": {"limits": {"cpu": "1"}}}],
    }
    whole = _of(kind, spec, annotations={"a": "b"}, resourceVersion="7", managedFields=[{}])
    whole["status"] = {"phase": "Pending"}
    decode_list, decode_event = shaped_decoders(read_shape(kind))
    listed = decode_list(json.dumps({"metadata": {}, "items": [whole]}).encode())["items"][0]
    event = decode_event(json.dumps({"type": "ADDED", "object": whole}).encode())["object"]
    keep = workload_record(kind, GPU)
    assert keep(listed) == keep(event) == keep(whole) is not None
    assert "status" not in listed and "managedFields" not in listed["metadata"]
