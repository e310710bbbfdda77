"""Generated pods for what the API server decides alone (GPU visibility, the webhooks' routing):
every field those decisions read, in shapes the real API server accepts, so the same pods serve
the Python tests here and the agreement tests on the real server (tests/real_api)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpu_admission.names import Names

NAMES = Names()
KAI_MAPS = "p-x7k2p9q-shared-gpu"  # what KAI's webhook writes in runai/shared-gpu-configmap
RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/gpumem",  # HAMi's: asks for a GPU, counts none
    "cpu",
]
# Whole numbers: the API server refuses fractions of an extended resource before any admission.
WHOLE = st.sampled_from(["0", "1", "2", "1000m"])
ENV = st.sampled_from(
    [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"},
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
        {"name": "PATH", "value": "/usr/bin"},
        # KAI-Scheduler's fraction env, from the ConfigMap its webhook names for the pod
        # (`runai/shared-gpu-configmap` below): KAI's own, an impostor's, another key.
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {
                "configMapKeyRef": {"name": f"{KAI_MAPS}-0", "key": "NVIDIA_VISIBLE_DEVICES"}
            },
        },
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "mine-0", "key": "NVIDIA_VISIBLE_DEVICES"}},
        },
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": f"{KAI_MAPS}-0", "key": "GPU_PORTION"}},
        },
    ]
)
CLAIM = "gpu"  # the pod's one claim, where it has one
# Under KAI-Scheduler: its scheduler name, the fraction marks, and the pod's ConfigMaps' prefix.
SCHEDULERS = st.sampled_from(["default-scheduler", "kai-scheduler"])
KAI_ANNOTATIONS = st.dictionaries(
    st.sampled_from(["gpu-fraction", "gpu-memory", "runai/shared-gpu-configmap"]),
    st.sampled_from(["0.5", KAI_MAPS]),
    max_size=3,
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            NAMES.cloud_credentials,
            NAMES.gpu_app,
            NAMES.dataset_writable,
            NAMES.inject_cloud_credentials,
            "team",
        ]
    ),
    st.sampled_from(["", " , ", "s3-keys", "s3-keys, hf-token", "pytorch", "true", "false"]),
    max_size=3,
)
VOLUMES = st.lists(
    st.sampled_from(
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "weights"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "cache", "persistentVolumeClaim": {"claimName": "cache", "readOnly": True}},
        ]
    ),
    max_size=2,
    unique_by=lambda v: v["name"],
)


@st.composite
def containers(draw: Any, name: str, claims: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "cuda"}
    resources: dict[str, Any] = {}
    limits = draw(st.dictionaries(st.sampled_from(RESOURCES), WHOLE, max_size=2))
    if limits:
        resources["limits"] = limits
        if draw(st.booleans()):
            resources["requests"] = dict(limits)  # extended resources: equal where both given
    if claims and draw(st.booleans()):
        resources["claims"] = [{"name": CLAIM}]
    if resources:
        container["resources"] = resources
    env = draw(st.lists(ENV, max_size=4))
    if env:
        container["env"] = env
    return container


@st.composite
def admission_pods(draw: Any) -> dict[str, Any]:
    """A pod as a researcher might write it: GPUs or not, claims or not, env that sets the
    visible devices (once, twice, by reference), credentials named, volumes mounted; under
    KAI-Scheduler or not, as KAI's webhook leaves a fraction pod or not quite."""
    claims = draw(st.booleans())
    count = draw(st.integers(1, 3))
    spec: dict[str, Any] = {
        "containers": [draw(containers(f"c{i}", claims)) for i in range(count)],
    }
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init", claims))]
    if claims:
        spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": "one-gpu"}]
    volumes = draw(VOLUMES)
    if volumes:
        spec["volumes"] = volumes
    spec["schedulerName"] = draw(SCHEDULERS)
    if draw(st.integers(0, 7)) == 0:
        spec["nodeName"] = "gpu-node-1"  # placed by hand: no scheduler gave anything
    metadata: dict[str, Any] = {"name": "p"}
    annotations = {**draw(ANNOTATIONS), **draw(KAI_ANNOTATIONS)}
    if annotations:
        metadata["annotations"] = annotations
    if draw(st.booleans()):
        metadata["labels"] = {NAMES.data_load_label: draw(st.sampled_from(["true", "false"]))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


DEBUGGERS = st.lists(
    st.builds(
        lambda name, env: {"name": name, "image": "busybox", **({"env": env} if env else {})},
        st.sampled_from(["debug-a", "debug-b"]),
        st.lists(ENV, max_size=3),
    ),
    min_size=1,
    max_size=2,
    unique_by=lambda c: c["name"],
)
