"""Which resource names are GPUs, and which are shared (time-sliced) GPUs, compiled once.

`GpuConfig` holds the patterns; this turns them into one regular expression at policy-build time,
so the per-container test on the admission path is a single match.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_admission.config.model import GpuConfig
from webhooks.policies.containers import ContainerRef


def _combined(patterns: Iterable[str]) -> re.Pattern[str]:
    # An empty list matches nothing (an empty alternation would match everything).
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or r"(?!)")


@dataclass(frozen=True, slots=True)
class GpuResources:
    pattern: re.Pattern[str]
    shared_suffixes: tuple[str, ...]
    # GPU resources and the companions that ask for a GPU without counting one (HAMi's).
    asks: re.Pattern[str]

    @classmethod
    def from_config(cls, gpu: GpuConfig) -> GpuResources:
        return cls(
            _combined(gpu.resource_patterns),
            tuple(gpu.shared_suffixes),
            _combined([*gpu.resource_patterns, *gpu.companion_resources]),
        )

    def is_gpu(self, name: str) -> bool:
        return self.pattern.match(name) is not None

    def is_shared(self, name: str) -> bool:
        return name.endswith(self.shared_suffixes) and self.is_gpu(name)

    def gpu_names(self, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if self.is_gpu(n))

    def shared_names(self, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if self.is_shared(n))

    def requests_gpu(self, container: ContainerRef) -> bool:
        """True when the container's requests or limits name any GPU resource, or a companion
        that asks for one (`gpu.companion_resources`)."""
        return any(self.asks.match(n) is not None for n in container.resource_names())
