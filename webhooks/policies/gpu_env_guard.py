"""GPU env tampering: a container granted GPUs may not choose which GPUs it sees.

The device plugin (or the DRA driver) sets `NVIDIA_VISIBLE_DEVICES` to the devices it allocated; a
container that sets it itself (to `all`, or from a ConfigMap via `valueFrom`) could see GPUs
granted to other pods. GPU containers are those of `gpu_claims`: by extended resource, or through a
ResourceClaim of a GPU DeviceClass (or one that cannot be resolved).
`envFrom` cannot be checked here: its keys live in ConfigMaps and Secrets the request does not
carry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpu_admission.cluster.view import ClusterView, ObjectRef
from gpu_admission.config.model import Config
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_claims import GpuDetector
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


def _deny(problems: list[str]) -> Verdict:
    return Verdict.deny("; ".join(problems) + TAMPERING_ADVICE)


def policies(config: Config) -> list[ValidatingPolicy]:
    detector = GpuDetector.from_config(config)
    guarded = frozenset(config.gpu.guarded_env)

    def check(
        request: AdmissionRequest, containers: Iterable[ContainerRef], view: ClusterView
    ) -> Verdict:
        gpus = detector.pod(request.object, request.namespace, view)
        problems = tampering(containers, lambda ref: gpus.of(ref).use.has_gpu, guarded)
        return _deny(problems) if problems else Verdict.allow()

    def on_create(request: AdmissionRequest, view: ClusterView) -> Verdict:
        return check(request, iter_containers(request.object), view)

    def on_ephemeral(request: AdmissionRequest, view: ClusterView) -> Verdict:
        return check(request, new_ephemeral_containers(request), view)

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
