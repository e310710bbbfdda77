"""Nodes as gpu-feature-discovery and the device plugin leave them, for the tier's modules."""

from __future__ import annotations

from typing import Any


def renamed_shared_node(name: str) -> dict[str, Any]:
    """A node time-slicing an A10G 4 ways, its replicas renamed `nvidia.com/gpu.shared`."""
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/gpu.memory": "23028",
            },
        },
        "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu.shared": "4"}},
    }
