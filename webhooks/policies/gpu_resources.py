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


@dataclass(frozen=True, slots=True)
class GpuResources:
    pattern: re.Pattern[str]
    shared_suffixes: tuple[str, ...]

    @classmethod
    def from_config(cls, gpu: GpuConfig) -> GpuResources:
        combined = "|".join(f"(?:{fnmatch.translate(p)})" for p in gpu.resource_patterns)
        return cls(re.compile(combined), tuple(gpu.shared_suffixes))

    def is_gpu(self, name: str) -> bool:
        return self.pattern.match(name) is not None

    def is_shared(self, name: str) -> bool:
        return name.endswith(self.shared_suffixes) and self.is_gpu(name)

    def gpu_names(self, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if self.is_gpu(n))

    def shared_names(self, names: Iterable[str]) -> list[str]:
        return sorted(n for n in names if self.is_shared(n))

    def requests_gpu(self, container: ContainerRef) -> bool:
        """True when the container's requests or limits name any GPU resource."""
        return any(self.is_gpu(n) for n in container.resource_names())
