"""GPU env tampering: a container granted GPUs may not choose which GPUs it sees.

The device plugin (or the DRA driver) sets `NVIDIA_VISIBLE_DEVICES` to the devices it allocated; a
container that sets it itself (to `all`, or from a ConfigMap via `valueFrom`) could see GPUs
granted to other pods. GPU containers are those of `gpu_claims`: by extended resource, or through a
ResourceClaim of a GPU DeviceClass (or one that cannot be resolved).
`envFrom` cannot be checked here: its keys live in ConfigMaps and Secrets the request does not
carry.

A GPU-sharing scheduler's pod (`gpu.schedulers`) is the other way round: its containers ask for no
GPU resource, and the scheduler's own webhook gives the fraction's container NVIDIA_VISIBLE_DEVICES
from a ConfigMap after the visibility policy has run (KAI's is reinvoked last, and keeps a
ConfigMap name the pod already carries: kai-scheduler/KAI-Scheduler `pkg/binder/common/
gpusharingconfigmap/config_map.go`). So the last word is this check's, on the pod as the API
server stores it: such a container whose NVIDIA_VISIBLE_DEVICES gives GPUs and was not given by
its scheduler (`scheduler_gives`: placed by hand, or a ConfigMap the pod does not name) is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config
from gpu_admission.gpus.scheduler_gpus import scheduler_gives
from gpu_admission.names import HIDDEN_VALUES, NVIDIA_VISIBLE_DEVICES
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_claims import GpuDetector, GpuUse
from webhooks.policies.gpu_visibility import EPHEMERAL_SUBRESOURCE, new_ephemeral_containers
from webhooks.policies.interface import Scope, ValidatingPolicy


def _how_set(entry: object) -> str:
    # Never the value itself: a guarded name may be configured for something sensitive.
    if isinstance(entry, dict) and entry.get("valueFrom") is not None:
        return "from valueFrom"
    return "by value"


# Said after the list of containers; the ValidatingAdmissionPolicy's CEL says the same.
TAMPERING_ADVICE = (
    ". The device plugin decides which GPUs a container sees; setting this yourself could expose "
    "GPUs granted to other pods. Remove it from the container's env (GPUs are chosen by the "
    "resource request alone)."
)


def tampering(
    containers: Iterable[ContainerRef],
    has_gpu: Callable[[ContainerRef], bool],
    guarded: frozenset[str],
) -> list[str]:
    """One description per GPU container that sets a guarded env name."""
    problems = []
    for ref in containers:
        env = ref.container.get("env") or ()
        hits = {
            e.get("name"): _how_set(e)
            for e in env
            if isinstance(e, dict) and e.get("name") in guarded
        }
        if hits and has_gpu(ref):
            which = ", ".join(f"{name} ({how})" for name, how in sorted(hits.items()))
            problems.append(f"{ref.describe} requests a GPU and sets {which}")
    return problems


# Said after the list of a GPU-sharing scheduler's containers; the policy's CEL says the same.
NOT_GIVEN_ADVICE = (
    ". A GPU-sharing scheduler gives a container GPUs only when it places the pod itself, "
    "through the ConfigMap it names for the pod: remove spec.nodeName and the container's "
    f"{NVIDIA_VISIBLE_DEVICES}, and ask the scheduler for a share (or for a GPU by resource)."
)


def guards_schedulers(config: Config) -> bool:
    """Whether pods of `gpu.schedulers` are held to what their scheduler gives (in the env
    guard's mode, whatever the visibility policy's: a pod may not choose GPUs either way)."""
    return bool(config.gpu.schedulers)


def not_given(
    pod: Mapping[str, Any],
    containers: Iterable[ContainerRef],
    has_gpu: Callable[[ContainerRef], bool],
    config: Config,
) -> list[str]:
    """One description per container of a GPU-sharing scheduler's pod that asks for no GPU yet
    gets NVIDIA_VISIBLE_DEVICES (its last entry, the one it gets) that gives GPUs and that its
    scheduler did not give it."""
    scheduler = (pod.get("spec") or {}).get("schedulerName")
    if scheduler not in {s.scheduler_name for s in config.gpu.schedulers}:
        return []
    problems = []
    for ref in containers:
        entries = [
            e
            for e in ref.container.get("env") or ()
            if isinstance(e, Mapping) and e.get("name") == NVIDIA_VISIBLE_DEVICES
        ]
        if not entries or has_gpu(ref):
            continue
        last = entries[-1]
        if last.get("valueFrom") is None and last.get("value") in HIDDEN_VALUES:
            continue
        if scheduler_gives(pod, ref.container, config.gpu):
            continue
        problems.append(
            f"{ref.describe} asks for no GPU and sets {NVIDIA_VISIBLE_DEVICES} "
            f"({_how_set(last)}), which {scheduler} did not give it"
        )
    return problems


def messages(tampered: list[str], ungiven: list[str]) -> list[str]:
    """The check's parts of a refusal: each kind of problem with its advice."""
    parts = []
    if tampered:
        parts.append("; ".join(tampered) + TAMPERING_ADVICE)
    if ungiven:
        parts.append("; ".join(ungiven) + NOT_GIVEN_ADVICE)
    return parts


def policies(config: Config) -> list[ValidatingPolicy]:
    detector = GpuDetector.from_config(config)
    guarded = frozenset(config.gpu.guarded_env)

    schedulers = guards_schedulers(config)

    def check(
        request: AdmissionRequest,
        containers: Iterable[ContainerRef],
        view: ClusterView,
        created: bool,
    ) -> Verdict:
        gpus = detector.pod(request.object, request.namespace, view)
        refs = list(containers)
        tampered = tampering(refs, lambda ref: gpus.of(ref).use.has_gpu, guarded)
        ungiven = (
            not_given(request.object, refs, lambda ref: gpus.of(ref).use is not GpuUse.NONE, config)
            if schedulers and created
            else []
        )
        parts = messages(tampered, ungiven)
        return Verdict.deny("; ".join(parts)) if parts else Verdict.allow()

    def on_create(request: AdmissionRequest, view: ClusterView) -> Verdict:
        return check(request, iter_containers(request.object), view, created=True)

    def on_ephemeral(request: AdmissionRequest, view: ClusterView) -> Verdict:
        return check(request, new_ephemeral_containers(request), view, created=False)

    def claims(request: AdmissionRequest, view: ClusterView | None) -> Iterable[ObjectRef]:
        return detector.references(request.object, request.namespace, view)

    return [
        ValidatingPolicy("gpu-env-guard", Scope("Pod"), on_create, references=claims),
        ValidatingPolicy(
            "gpu-env-guard-ephemeral",
            Scope(
                "Pod",
                operations=frozenset({"UPDATE"}),
                subresources=frozenset({EPHEMERAL_SUBRESOURCE}),
            ),
            on_ephemeral,
        ),
    ]
