"""Contract between the emulator core and an admission hook (the admission chain)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class AdmissionAttributes:
    """What kube-apiserver hands to admission plugins for one write."""

    operation: str  # CREATE | UPDATE | DELETE
    group: str
    version: str
    resource: str
    subresource: str  # "" when none
    kind_group: str
    kind_version: str
    kind: str
    namespace: str
    name: str  # "" for generateName creates
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    options: dict[str, Any] = field(default_factory=dict)  # Create/Update/DeleteOptions
    user_info: dict[str, Any] = field(default_factory=dict)  # {"username": ..., "groups": [...]}


class AdmissionHook(Protocol):
    async def mutate(self, attrs: AdmissionAttributes) -> tuple[dict[str, Any] | None, list[str]]:
        """Return the (possibly patched) object and warnings; raise StatusError to reject."""
        ...

    async def validate(self, attrs: AdmissionAttributes) -> list[str]:
        """Return warnings; raise StatusError to reject."""
        ...
