"""Which GPU daemons the visibility policy blinds (gpu_admission/gpus/daemons.py says what one
is): a workload in a namespace that is not exempt whose template (a bare Pod's spec) has a
container the policy hides (`visibility_mutation.hidden_containers`: no GPU resource, no claim,
no scheduler's visibility) and that wants the node's GPUs all the same. Each finding says
whether it is a GPU daemon (its own signs, or a namespace that holds one: GPU software) or a
workload of users', whose fix is a GPU asked for by resource. Pure: the self-check and `audit`
bring the workloads and the namespaces' labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from gpu_admission.gpus.daemons import (
    DaemonFinding,
    WorkloadRecord,
    asks_through_scheduler,
    gpu_resource_example,
    wants_gpus,
)
from webhooks.apiserver_policies.visibility_mutation import hidden_containers
from webhooks.policies.containers import iter_containers

_CREATED = ("initContainers", "containers")


def blinded_daemons(
    config: Config,
    workloads: Iterable[WorkloadRecord],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> list[DaemonFinding]:
    label = config.exempt_label
    enforced = config.mode_of("gpu-visibility") is PolicyMode.ENFORCE
    gpu = config.gpu
    named: list[tuple[WorkloadRecord, list[tuple[str, str]], bool]] = []
    for workload in sorted(workloads, key=lambda w: (w.namespace, w.kind, w.name)):
        if (namespace_labels.get(workload.namespace) or {}).get(label) == "true":
            continue
        template = workload.template
        runtime = template["spec"].get("runtimeClassName")
        hidden = hidden_containers(template, None, config)
        # A container the policy leaves alone asks for a GPU, or the pod asks a scheduler for
        # one: a GPU workload, whose other containers are its sidecars.
        asks = asks_through_scheduler(template, gpu) or len(hidden) < sum(
            1 for _ in iter_containers(template, _CREATED)
        )
        daemon_like = workload.looks_like_daemon(gpu)
        wanting = [
            (ref.name, how)
            for ref in hidden
            if (
                how := wants_gpus(
                    ref.container,
                    runtime,
                    gpu,
                    pod_asks_for_gpu=asks,
                    admitted=workload.admitted,
                    daemon_like=daemon_like,
                )
            )
            is not None
        ]
        if wanting:
            named.append((workload, wanting, daemon_like))
    # A namespace that holds a GPU daemon by its own signs holds GPU software: a workload there
    # that only sets the variable is one of its parts, not a user's.
    software = {w.namespace for w, _, daemon_like in named if daemon_like}
    resource = gpu_resource_example(gpu)
    return [
        DaemonFinding(
            w.kind,
            w.namespace,
            w.name,
            w.uid,
            tuple(name for name, _ in wanting),
            wanting[0][1],
            label,
            enforced,
            daemon=daemon_like or w.namespace in software,
            resource=resource,
            hidden=config.gpu.hidden_value,
        )
        for w, wanting, daemon_like in named
    ]
