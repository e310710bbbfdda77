"""GPU env tampering: a container granted GPUs may not choose which GPUs it sees.

The device plugin sets `NVIDIA_VISIBLE_DEVICES` to the devices it allocated; a container that sets
it itself (to `all`, or from a ConfigMap via `valueFrom`) could see GPUs granted to other pods.
`envFrom` cannot be checked here: its keys live in ConfigMaps and Secrets the request does not
carry.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_admission.cluster.view import ClusterView
from gpu_admission.config import Config
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.gpu_visibility import EPHEMERAL_SUBRESOURCE, new_ephemeral_containers
from webhooks.policy import Scope, ValidatingPolicy
from webhooks.review import AdmissionRequest, Verdict


def _how_set(entry: object) -> str:
    # Never the value itself: a guarded name may be configured for something sensitive.
    if isinstance(entry, dict) and entry.get("valueFrom") is not None:
        return "from valueFrom"
    return "by value"


def tampering(
    containers: Iterable[ContainerRef], gpus: GpuResources, guarded: frozenset[str]
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
        if hits and gpus.requests_gpu(ref):
            which = ", ".join(f"{name} ({how})" for name, how in sorted(hits.items()))
            problems.append(f"{ref.describe} requests a GPU and sets {which}")
    return problems


def _deny(problems: list[str]) -> Verdict:
    return Verdict.deny(
        "; ".join(problems) + ". The device plugin decides which GPUs a container sees; "
        "setting this yourself could expose GPUs granted to other pods. Remove it from the "
        "container's env (GPUs are chosen by the resource request alone)."
    )


def policies(config: Config) -> list[ValidatingPolicy]:
    gpus = GpuResources.from_config(config.gpu)
    guarded = frozenset(config.gpu.guarded_env)

    def on_create(request: AdmissionRequest, view: ClusterView) -> Verdict:
        problems = tampering(iter_containers(request.object), gpus, guarded)
        return _deny(problems) if problems else Verdict.allow()

    def on_ephemeral(request: AdmissionRequest, view: ClusterView) -> Verdict:
        problems = tampering(new_ephemeral_containers(request), gpus, guarded)
        return _deny(problems) if problems else Verdict.allow()

    return [
        ValidatingPolicy("gpu-env-guard", Scope("Pod"), on_create),
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
