"""Which GPU daemons the visibility policy blinds (gpu_admission/gpus/daemons.py says what one
is): a workload in a namespace that is not exempt whose template has a container the policy
hides (`visibility_mutation.hidden_containers`: no GPU resource, no claim, no scheduler's
visibility) and that wants the node's GPUs all the same. Pure: the self-check and `audit` bring
the workloads and the namespaces' labels."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import PolicyMode
from gpu_admission.gpus.daemons import DaemonFinding, WorkloadRecord, wants_gpus
from webhooks.apiserver_policies.visibility_mutation import hidden_containers


def blinded_daemons(
    config: Config,
    workloads: Iterable[WorkloadRecord],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> list[DaemonFinding]:
    label = config.exempt_label
    enforced = config.mode_of("gpu-visibility") is PolicyMode.ENFORCE
    found = []
    for workload in sorted(workloads, key=lambda w: (w.namespace, w.kind, w.name)):
        if (namespace_labels.get(workload.namespace) or {}).get(label) == "true":
            continue
        runtime = workload.template["spec"].get("runtimeClassName")
        wanting = [
            (ref.name, how)
            for ref in hidden_containers(workload.template, None, config)
            if (how := wants_gpus(ref.container, runtime)) is not None
        ]
        if wanting:
            found.append(
                DaemonFinding(
                    workload.kind,
                    workload.namespace,
                    workload.name,
                    workload.uid,
                    tuple(name for name, _ in wanting),
                    wanting[0][1],
                    label,
                    enforced,
                )
            )
    return found
