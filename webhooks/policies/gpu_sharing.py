"""Which GPU requests are shared, and how: NVIDIA's device plugin and gpu-feature-discovery as
they ship.

What the policies rely on, read in NVIDIA/k8s-device-plugin:
- A shared GPU (time-slicing or MPS with `replicas` > 1) keeps its resource name unless the
  config renames it (`rename`, or `renameByDefault: true`, which appends `.shared`). The default
  is not to rename: a node with 1 GPU shared 4 ways advertises `nvidia.com/gpu: 4` (a MIG slice
  `nvidia.com/mig-<profile>` likewise). So a request for `nvidia.com/gpu` is shared exactly when
  the node it lands on shares it, which only the node's labels tell
  (`api/config/v1/sharing.go`, `replicas.go`).
- gpu-feature-discovery labels each node under the resource's original name
  (`internal/lm/resource.go`, `baseLabeler`): `<name>.replicas` (1 when not shared, 0 when
  sharing is disabled), `<name>.sharing-strategy` (`none`, or `time-slicing` / `mps` when
  replicas > 1), `<name>.memory` (MiB per device) and `<name>.product` (with `-SHARED` when
  shared and not renamed).
- Under MPS the plugin's control daemon caps every client at the device's memory divided by the
  replicas (`set_default_device_pinned_mem_limit`) and at 100/replicas percent of its SMs
  (`set_default_active_thread_percentage`), in `cmd/mps-control-daemon/mps/daemon.go`.

A request is shared when every candidate node offering the resource shares it; a renamed
(`.shared`) resource is shared wherever it is offered, by the strategy its node labels name
(time-slicing when no label says, as older gpu-feature-discovery did not).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_admission import names as n
from gpu_admission.cluster.view import NodeInfo
from gpu_admission.config.model import GpuConfig
from webhooks.policies.quantity import is_positive

_COUNT = re.compile(r"[0-9]{1,9}")
SHARING_STRATEGIES = (n.SHARING_TIME_SLICING, n.SHARING_MPS)


def label_count(value: str | None) -> int | None:
    return int(value) if value is not None and _COUNT.fullmatch(value) else None


def node_strategy(node: NodeInfo, resource: str, gpu: GpuConfig) -> str | None:
    """How `node` shares `resource` (time-slicing or mps), or None when it does not."""
    base = gpu.base_resource_name(resource)
    strategy = node.labels.get(base + n.GPU_SHARING_STRATEGY_LABEL_SUFFIX)
    if gpu.is_shared_resource(resource):  # renamed: shared by definition
        return strategy if strategy in SHARING_STRATEGIES else n.SHARING_TIME_SLICING
    replicas = label_count(node.labels.get(base + n.GPU_REPLICAS_LABEL_SUFFIX))
    if strategy in SHARING_STRATEGIES and replicas is not None and replicas > 1:
        return strategy
    return None


@dataclass(frozen=True, slots=True)
class RequestSharing:
    """How the candidate nodes offering one resource share it."""

    resource: str
    shared: tuple[NodeInfo, ...]  # the nodes that share it
    exclusive: tuple[NodeInfo, ...]  # the nodes that offer it whole
    strategies: tuple[str, ...]  # of the sharing nodes, sorted

    @property
    def everywhere(self) -> bool:
        return bool(self.shared) and not self.exclusive

    @property
    def mixed(self) -> bool:
        return bool(self.shared) and bool(self.exclusive)

    @property
    def strategy(self) -> str:
        """`time-slicing`, `mps`, or both comma-separated when the candidates differ."""
        return ",".join(self.strategies)

    @property
    def described(self) -> str:
        """The strategies for a message: `time-slicing`, or `mps, time-slicing`."""
        return ", ".join(self.strategies)

    def mixed_note(self) -> str:
        return (
            f"{self.resource}: {len(self.shared)} of {len(self.shared) + len(self.exclusive)} "
            f"candidate nodes share it ({self.described}), the rest give whole GPUs; using the "
            "share of the sharing nodes"
        )


def classify(resource: str, candidates: Iterable[NodeInfo], gpu: GpuConfig) -> RequestSharing:
    shared: list[NodeInfo] = []
    exclusive: list[NodeInfo] = []
    strategies: set[str] = set()
    for node in candidates:
        if not is_positive(node.allocatable.get(resource)):
            continue
        strategy = node_strategy(node, resource, gpu)
        if strategy is None:
            exclusive.append(node)
        else:
            shared.append(node)
            strategies.add(strategy)
    return RequestSharing(resource, tuple(shared), tuple(exclusive), tuple(sorted(strategies)))
